"""Windows end to end against the simulator: execute, then verify, audit, replay the verdict."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ledger.stored import verify_ledger
from runner.audit.full import run_audit
from runner.decide.inputs import replay_window

from .worlds import close, gate_all, run, state, window, world


def _checked(w, window_id: str) -> None:  # type: ignore[no-untyped-def]
    assert verify_ledger(w.book).verified.size == w.book.size()
    audit = run_audit(book=w.book)
    assert audit.ok, audit.lines()
    assert not audit.protocol.skipped  # decision-recomputes ran
    assert replay_window(w.book, window_id).match


@pytest.mark.parametrize(("plan", "window_id"), [
    ("seed000-production-policy.toml", "e2e-production-policy"),
    ("seed000-controlled.toml", "e2e-controlled"),
])
def test_win2_window_restores_and_decides(tmp_path: Path, plan: str, window_id: str) -> None:
    w = world(tmp_path, [window(plan, window_id, chain="none")])
    try:
        gate_all(w)
        result = run(w, window_id)
        assert result.ending == "restored" and result.decision in ("WIN", "LOSS", "NO_CHANGE", "INCONCLUSIVE")
        assert result.waves == 18 and not result.blocked
        s = state(w.book)
        assert s.production == "up" and s.hold is None and s.marker is None
        ws = s.windows[window_id]
        assert ws.phase == "decided" and ws.restore.status == "ok" and ws.watch.verdict == "PASS"
        assert [sid for sid in ws.starts] == ["s1", "s2", "s3"]
        assert all(info.clock_cap_mhz == 2300 for info in ws.starts.values())
        archive = list(w.book.events(stream="archive"))
        assert {e.payload["start"] for e in archive} == {"s1", "s3"}  # the control starts
        _checked(w, window_id)
    finally:
        close(w)


def test_pp3_abba_window(tmp_path: Path) -> None:
    """The seed-faithful example as written: priming at the declared sizes, bounded runs, the smoke stage."""
    w = world(tmp_path, [window("seed003-abba.toml", "e2e-pp3", edit=None)], sim_config={"eos_probability": 0.0})
    try:
        gate_all(w)
        result = run(w, "e2e-pp3")
        assert result.ending == "restored"
        assert result.decision in ("CANDIDATE", "NO_PROMOTION")
        decision = next(w.book.events(stream="window/e2e-pp3", types=["decision.recorded"]))
        requests = decision.payload["input"]["requests"]
        assert len(requests) == 24 and {r["block"] for r in requests} == {"A1", "B1", "B2", "A2"}
        assert all(r["status"] == "bounded" for r in requests)  # every decode run reached its 30 s bound
        primed = [e.payload for e in w.book.events(stream="window/e2e-pp3", types=["priming.done"])]
        assert [p["start"] for p in primed] == ["A1", "B1", "B2", "A2"] and all(p["ok"] for p in primed)
        assert {r["prompt_tokens"] for p in primed for r in p["requests"]} == {2048, 32768, 153600}
        smoke = [e.payload for e in w.book.events(stream="window/e2e-pp3", types=["smoke.result"])]
        # the smoke stage of its own: five probes on A's engine, then on B's, after the four blocks
        assert [(s["start"], s["probe"]) for s in smoke][::5] == [("A-smoke", "greedy_identity"),
                                                                  ("B-smoke", "greedy_identity")]
        assert len(smoke) == 10 and all(s["outcome"] in ("pass", "recorded") for s in smoke)
        _checked(w, "e2e-pp3")
    finally:
        close(w)


def test_three_window_chain(tmp_path: Path) -> None:
    w = world(tmp_path, [
        window("seed000-production-policy.toml", "chain-a", chain="chained"),
        window("seed000-controlled.toml", "chain-b", chain="chained"),
        window("seed000-controlled.toml", "chain-c", chain="last"),
    ])
    try:
        gate_all(w)
        assert run(w, "chain-a").ending == "chained"
        s = state(w.book)
        assert s.marker.window == "chain-a" and s.production == "down" and s.hold is None
        assert set(s.placeholders) == {"sim-head", "sim-worker"}
        assert run(w, "chain-b").ending == "chained"
        s = state(w.book)
        assert s.marker.window == "chain-b"
        prev_ok = s.windows["chain-b"].gates["chain_prev_ok"]
        assert prev_ok.verdict == "PASS" and prev_ok.seq > s.windows["chain-a"].marker_set_seq
        assert run(w, "chain-c").ending == "restored"
        s = state(w.book)
        assert s.marker is None and s.production == "up" and not s.placeholders and s.hold is None
        for wid in ("chain-a", "chain-b", "chain-c"):
            _checked(w, wid)
        order = [e.type for e in w.book.events(stream="window/chain-c")
                 if e.type in ("restore.finished", "watch.result", "placeholder.down", "chain.marker.cleared",
                               "production.state", "hold.closed", "window.closed")]
        assert order == ["restore.finished", "watch.result", "placeholder.down", "placeholder.down",
                         "chain.marker.cleared", "production.state", "hold.closed", "window.closed"]
    finally:
        close(w)


def test_cli_dry_run_then_execute(tmp_path: Path) -> None:
    w = world(tmp_path, [window("seed000-controlled.toml", "cli-window", chain="none")])
    tally = str(Path(sys.executable).with_name("tally"))
    env = dict(os.environ, TALLY_DB=str(tmp_path / "tally.db"), TALLY_KEY=str(tmp_path / ".tally/root.pem"))
    try:
        gate_all(w)
        size = w.book.size()
        dry = subprocess.run([tally, "window", "run", "cli-window", "--site", str(tmp_path / "site.toml"),
                              "--dry-run"], capture_output=True, text=True, env=env)
        assert dry.returncode == 0, dry.stderr
        assert "would execute" in dry.stdout and "restore" in dry.stdout and "ADMITTED" in dry.stdout
        assert w.book.size() == size  # touched nothing, appended nothing
        done = subprocess.run([tally, "window", "run", "cli-window", "--site", str(tmp_path / "site.toml"),
                               "--execute", "--json"], capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        assert result["ending"] == "restored" and result["decision"]
        again = subprocess.run([tally, "window", "run", "cli-window", "--site", str(tmp_path / "site.toml"),
                                "--execute"], capture_output=True, text=True, env=env)
        assert again.returncode == 2 and "already run" in again.stderr
        verdict = subprocess.run([tally, "replay", "verdict", "cli-window", "--json"], capture_output=True,
                                 text=True, env=env)
        assert verdict.returncode == 0 and json.loads(verdict.stdout)["verdict"] == "MATCH"
        report = subprocess.run([tally, "window", "report", "cli-window", "--out", str(tmp_path / "r")],
                                capture_output=True, text=True, env=env)
        assert report.returncode == 0 and (tmp_path / "r" / "report.html").exists()
    finally:
        close(w)
