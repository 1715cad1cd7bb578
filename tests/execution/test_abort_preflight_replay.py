"""`tally window abort`, `tally chain preflight`, `tally replay verdict` MISMATCH, the control archive."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from runner.audit.full import run_audit
from runner.decide import compute
from runner.decide.inputs import build_input
from runner.events.catalogue import WindowLog
from runner.plan.register import registered_plan

from .worlds import close, gate_all, run, state, window, world

TALLY = str(Path(sys.executable).with_name("tally"))


def _env(tmp_path: Path) -> dict[str, str]:
    return dict(os.environ, TALLY_DB=str(tmp_path / "tally.db"), TALLY_KEY=str(tmp_path / ".tally/root.pem"))


def test_abort_mid_window_restores_and_records_reject(tmp_path: Path) -> None:
    w = world(tmp_path, [window("seed000-controlled.toml", "to-abort", chain="none")])
    try:
        gate_all(w)
        env = dict(_env(tmp_path), TALLY_TEST_CRASH_AFTER="wave.measured:4")
        killed = subprocess.run([TALLY, "window", "run", "to-abort", "--site", str(tmp_path / "site.toml"),
                                 "--execute"], env=env, capture_output=True, text=True, timeout=300)
        assert killed.returncode == -9
        aborted = subprocess.run([TALLY, "window", "abort", "to-abort", "--site", str(tmp_path / "site.toml"),
                                  "--json"], env=_env(tmp_path), capture_output=True, text=True, timeout=300)
        assert aborted.returncode == 0, aborted.stderr
        result = json.loads(aborted.stdout)
        assert result["ending"] == "aborted" and result["decision"] == "REJECT"
        assert "aborted by the operator" in " ".join(result["reasons"])
        s = state(w.book)
        assert s.production == "up" and s.hold is None
        events = [e.type for e in w.book.events(stream="window/to-abort")]
        assert events.index("window.interrupted") < events.index("measurement.ended") < events.index(
            "restore.finished") < events.index("window.closed") < events.index("decision.recorded")
        assert run_audit(book=w.book).ok
        verdict = subprocess.run([TALLY, "replay", "verdict", "to-abort"], env=_env(tmp_path), capture_output=True,
                                 text=True)
        assert verdict.returncode == 0 and verdict.stdout.startswith("MATCH")
    finally:
        close(w)


def test_chain_preflight(tmp_path: Path) -> None:
    w = world(tmp_path, [window("seed000-controlled.toml", "pre-a", chain="chained")])
    env = _env(tmp_path)
    site = str(tmp_path / "site.toml")
    try:
        gate_all(w)
        before = subprocess.run([TALLY, "chain", "preflight", "--site", site, "--json"], env=env,
                                capture_output=True, text=True)
        report = json.loads(before.stdout)
        assert before.returncode == 0 and report["marker"] is None and report["placeholders"] == {}
        assert report["serving"]["serving"] == "up"
        run(w, "pre-a")
        size = w.book.size()
        after = subprocess.run([TALLY, "chain", "preflight", "--site", site, "pre-a", "--json"], env=env,
                               capture_output=True, text=True)
        assert w.book.size() == size  # read-only
        report = json.loads(after.stdout)
        assert after.returncode == 0, after.stdout
        assert report["marker"]["window"] == "pre-a"
        assert report["placeholders"] == {"sim-head": True, "sim-worker": True}  # probed under the marker
        w.sim.control("placeholder_down", hosts=["sim-worker"])
        broken = subprocess.run([TALLY, "chain", "preflight", "--site", site], env=env, capture_output=True,
                                text=True)
        assert broken.returncode == 1 and "placeholder sim-worker: NOT held" in broken.stdout
    finally:
        close(w)


def test_replay_verdict_mismatch_names_the_fields(tmp_path: Path) -> None:
    w = world(tmp_path, [window("seed000-controlled.toml", "honest", chain="none"),
                         window("seed000-controlled.toml", "tinkered", chain="none")])
    try:
        gate_all(w)
        run(w, "honest")
        # The same measurements recorded for another window, then a decision computed with a
        # bar of 50% instead of the registered 2%: what replay exists to catch.
        reg = registered_plan(w.book, "tinkered")
        log = WindowLog(w.book, w.root, "tinkered", reg.plan_sha256)
        copied = []
        for event in w.book.events(stream="window/honest", types=["start.began", "wave.measured"]):
            payload: dict[str, Any] = {k: v for k, v in event.payload.items() if k not in ("window", "plan_sha256")}
            blobs = []
            if event.type == "wave.measured":
                blob = w.book.blob(payload["records"]["blob"])
                assert blob is not None
                blobs = [blob]
            copied.append(log.append(event.type, payload, blobs))
        log.append("window.closed", {"ending": "restored", "summary": "copied"})
        events = list(w.book.events(stream="window/tinkered"))
        built = build_input(reg.plan, events)
        tinkered = dict(built.input, params=dict(built.input["params"], bar=0.5))
        log.append("decision.recorded", {"rule": "win2-v1", "params": tinkered["params"],
                                         "inputs_digest": built.digest, "input": tinkered,
                                         "result": compute(tinkered)})
        env = _env(tmp_path)
        good = subprocess.run([TALLY, "replay", "verdict", "honest", "--json"], env=env, capture_output=True,
                              text=True)
        assert good.returncode == 0 and json.loads(good.stdout)["verdict"] == "MATCH"
        bad = subprocess.run([TALLY, "replay", "verdict", "tinkered", "--json"], env=env, capture_output=True,
                             text=True)
        result = json.loads(bad.stdout)
        assert bad.returncode == 1 and result["verdict"] == "MISMATCH"
        paths = {d["path"] for d in result["differences"]}
        assert "params.bar" in paths and "input.params.bar" in paths
        text = subprocess.run([TALLY, "replay", "verdict", "tinkered"], env=env, capture_output=True, text=True)
        assert text.returncode == 1 and "MISMATCH" in text.stdout and "params.bar" in text.stdout
    finally:
        close(w)


def test_control_archive_feeds_the_next_windows_spread(tmp_path: Path) -> None:
    w = world(tmp_path, [window("seed000-controlled.toml", "day-1", chain="none"),
                         window("seed000-controlled.toml", "day-2", chain="none")])
    try:
        gate_all(w)
        run(w, "day-1")
        run(w, "day-2")
        archive = [e.payload for e in w.book.events(stream="archive")]
        assert {(p["window"], p["start"]) for p in archive} == {("day-1", "s1"), ("day-1", "s3"),
                                                               ("day-2", "s1"), ("day-2", "s3")}
        decision = next(w.book.events(stream="window/day-2", types=["decision.recorded"])).payload
        entries = decision["input"]["archive"]
        assert {e["window"] for e in entries} == {"day-1"} and len(entries) == 2  # other windows only
        assert decision["result"]["spread"]["short-b1"]["archive_day_to_day"] is not None
        assert run_audit(book=w.book).ok
    finally:
        close(w)
