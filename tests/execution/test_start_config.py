"""Starts are attested against the arm the plan declares: config digest, speculative or none, P's identity."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from runner.audit.full import run_audit
from runner.decide.inputs import replay_window
from runner.demo.scenarios import sim_config_for
from runner.drivers.site import load_site
from runner.execution.window import WindowRunner
from runner.plan.parse import read_plan_file
from tests.runner.script import EXAMPLES

from ..runner.script import SIMPLE_PP3
from .worlds import close, gate_all, run, small, state, window, world

SPEC_OFF_A = ("speculative = \"none\"\nsim = { draft_depth = 0, accept_per_pos = [], step_base_ms = 9.0, "
              "step_per_token_ms = 0.12, ttft_base_ms = 60.0, ttft_per_1k_prompt_ms = 9.0 }")


def spec_off_control(text: str) -> str:
    """Seed 003's ABBA plan with arm A a plain engine (no speculative decoding), short outputs."""
    text = text.replace("max_tokens = 1024", "max_tokens = 48")
    head, _, rest = text.partition('role = "A"')
    spec_at = rest.index("speculative = ")
    sim_end = rest.index("}\n", rest.index("sim = ", spec_at)) + 2
    return head + 'role = "A"' + rest[:spec_at] + SPEC_OFF_A + "\n" + rest[sim_end:]


def _gates(w: Any, window_id: str) -> dict[tuple[str, str], dict[str, Any]]:
    return {(e.payload["gate"], e.payload["start"]): e.payload
            for e in w.book.events(stream=f"window/{window_id}", types=["gate.result"]) if e.payload.get("start")}


def test_a_spec_off_control_passes_its_starts(tmp_path: Path) -> None:
    w = world(tmp_path, [window("seed003-abba.toml", "plain", edit=spec_off_control)])
    try:
        gate_all(w)
        result = run(w, "plain")
        assert result.ending == "restored", result.blocked
        gates = _gates(w, "plain")
        # every start, the smoke stage's own (A-smoke, B-smoke) too
        assert {s for (g, s), r in gates.items() if g == "start_config" and r["verdict"] == "PASS"} == {
            "A1", "B1", "B2", "A2", "A-smoke", "B-smoke"}
        assert {s for (g, s) in gates if g == "standard_spec"} == {"B1", "B2", "B-smoke"}  # speculative arms only
        a1 = gates[("start_config", "A1")]["evidence"]
        assert a1["declared"]["speculative"] == "none" and a1["reported"]["speculative_config"] is None
        assert result.decision in ("CANDIDATE", "NO_PROMOTION")
        assert replay_window(w.book, "plain").match
        assert run_audit(book=w.book).ok
    finally:
        close(w)


def _world_with_sim_arm(tmp_path: Path, window_id: str, **b_overrides: Any) -> Any:
    """A seed 003 world whose simulated arm B reports ``b_overrides`` (what the host says it started)."""
    plans = tmp_path / "plans"
    plans.mkdir()
    shutil.copytree(EXAMPLES / "families", plans / "families")
    text = SIMPLE_PP3.read_text().replace("max_tokens = 1024", "max_tokens = 48")
    (plans / "p.toml").write_text(text)
    plan = read_plan_file(plans / "p.toml").plan
    config = sim_config_for([plan], time_scale=0.01)
    config["arms"][plan.arm("B").name].update(b_overrides)
    shortened = lambda t: t.replace("max_tokens = 1024", "max_tokens = 48")  # noqa: E731
    return world(tmp_path / "w", [window(str(SIMPLE_PP3), window_id, edit=shortened)],
                 sim_config={"arms": config["arms"], "production_arm": config["production_arm"]})


def test_a_candidate_reporting_lossy_verification_fails_at_its_start(tmp_path: Path) -> None:
    lossy = {"method": "k2", "num_speculative_tokens": 5, "adaptive_k": False, "draft_sampling": "sampled",
             "acceptance_method": "typical_acceptance_sampler", "posterior_threshold": 0.09}
    w = _world_with_sim_arm(tmp_path, "lossy", reported_config=lossy)
    try:
        gate_all(w)
        result = run(w, "lossy")
        assert result.ending == "aborted" and result.decision == "REJECT"
        gates = _gates(w, "lossy")
        assert gates[("standard_spec", "B1")]["verdict"] == "FAIL"
        assert ("standard_spec", "B2") not in gates  # the window stopped at B1
        decision = next(w.book.events(stream="window/lossy", types=["decision.recorded"])).payload
        assert any("standard_spec FAIL for start B1" in r for r in decision["result"]["reasons"])
        assert state(w.book).production == "up"
        assert run_audit(book=w.book).ok
    finally:
        close(w)


def _digest_changes_at_start(w: Any) -> None:
    """Arm B's next start reports another config_digest than the simulator lists for it before the drain
    (the engine changed after the site was asked): the fit check passes, start_config finds it."""
    b = next(arm for arm in read_plan_file(SIMPLE_PP3).plan.arms if arm.role == "B")
    w.sim.set_faults(digest_mismatch={"config_digest": "0" * 64, "arm": b.name})


def test_a_listed_digest_the_start_would_not_report_is_refused_before_the_drain(tmp_path: Path) -> None:
    """A simulator configured to report another digest for arm B says so before the drain: refused, nothing done."""
    from ledger.errors import PolicyError

    w = _world_with_sim_arm(tmp_path, "listed", reported_digest="0" * 64)
    try:
        gate_all(w)
        size = w.book.size()
        try:
            run(w, "listed")
        except PolicyError as exc:
            assert "declares config_digest" in str(exc) and "reports 0000000000000000" in str(exc)
        else:
            raise AssertionError("the window ran")
        assert w.book.size() == size                                              # nothing appended
        assert httpx.get(f"{w.sim.url}/_sim/state").json()["actions"] == []      # no host touched
    finally:
        close(w)


def test_a_start_reporting_another_digest_is_refused_and_the_window_restores(tmp_path: Path) -> None:
    w = _world_with_sim_arm(tmp_path, "digest")
    try:
        gate_all(w)
        _digest_changes_at_start(w)
        result = run(w, "digest")
        assert result.ending == "aborted" and result.decision == "REJECT"
        gates = _gates(w, "digest")
        b1 = gates[("start_config", "B1")]
        assert b1["verdict"] == "FAIL" and "config_digest 000000000000 is not arm B's declared" in b1["summary"]
        assert ("standard_spec", "B1") not in gates and not any(
            e.payload["start"] == "B1" for e in w.book.events(stream="window/digest", types=["wave.measured"]))
        restore = next(w.book.events(stream="window/digest", types=["restore.finished"])).payload
        assert restore["status"] == "ok" and state(w.book).production == "up"
        decision = next(w.book.events(stream="window/digest", types=["decision.recorded"])).payload
        assert any("start_config FAIL for start B1" in r for r in decision["result"]["reasons"])
        assert run_audit(book=w.book).ok
    finally:
        close(w)


def test_a_command_site_start_reporting_another_digest_is_refused(tmp_path: Path) -> None:
    w = world(tmp_path, [window("seed000-controlled.toml", "cmd-digest", chain="none")])
    try:
        gate_all(w)
        shutil.copytree(EXAMPLES / "site-scripts", tmp_path / "site-scripts")
        site = tmp_path / "site-commands.toml"
        site.write_text((EXAMPLES / "site-commands.toml").read_text().replace("http://127.0.0.1:8000", w.sim.url))
        (tmp_path / "site-state" / "inject").mkdir(parents=True)
        (tmp_path / "site-state" / "inject" / "config_digest").write_text("ab" * 32)
        driver = load_site(site)
        result = WindowRunner(w.book, w.root, "cmd-digest", driver, time_scale=w.time_scale).run()
        driver.close()
        assert result.ending == "aborted" and result.decision == "REJECT"
        s1 = _gates(w, "cmd-digest")[("start_config", "s1")]
        assert s1["verdict"] == "FAIL" and s1["evidence"]["reported"]["config_digest"] == "ab" * 32
        actions = (tmp_path / "site-state" / "actions.log").read_text().split("\n")
        assert any(a.startswith("restore") for a in actions) and (tmp_path / "site-state" / "production").read_text(
        ).strip() == "up"
        assert run_audit(book=w.book).ok
    finally:
        close(w)


def test_production_policy_starts_are_compared_with_production(tmp_path: Path) -> None:
    w = world(tmp_path, [window("seed000-production-policy.toml", "pp", chain="none")])
    try:
        gate_all(w)
        assert run(w, "pp").ending == "restored"
        gates = _gates(w, "pp")
        s1 = gates[("start_config", "s1")]["evidence"]
        assert s1["identity"]["unexpected"] == [] and set(s1["identity"]["listed"]) == {"arm", "image"}
        assert "identity" not in gates[("start_config", "s2")]["evidence"]  # B is not compared with production
    finally:
        close(w)


def test_production_policy_outside_its_allowed_differences_fails(tmp_path: Path) -> None:
    narrow = lambda t: t.replace('allowed_differences = ["arm", "image"]', 'allowed_differences = ["arm"]')  # noqa: E731
    w = world(tmp_path, [window("seed000-production-policy.toml", "narrow", chain="none",
                                edit=lambda t: narrow(small(t)))])
    try:
        gate_all(w)
        result = run(w, "narrow")
        assert result.ending == "aborted" and result.decision == "REJECT"
        s1 = _gates(w, "narrow")[("start_config", "s1")]
        assert s1["verdict"] == "FAIL" and s1["evidence"]["identity"]["unexpected"] == ["image"]
    finally:
        close(w)


def test_execute_exits_1_when_the_window_ended_aborted_and_abort_exits_0(tmp_path: Path) -> None:
    w = _world_with_sim_arm(tmp_path, "cli-abort")
    tally = str(Path(sys.executable).with_name("tally"))
    home = tmp_path / "w"
    env = dict(os.environ, TALLY_DB=str(home / "tally.db"), TALLY_KEY=str(home / ".tally/root.pem"))
    try:
        gate_all(w)
        _digest_changes_at_start(w)
        done = subprocess.run([tally, "window", "run", "cli-abort", "--site", str(home / "site.toml"), "--execute",
                               "--json"], capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode == 1, done.stderr
        result = json.loads(done.stdout)
        assert result["ending"] == "aborted" and result["decision"] == "REJECT"
        assert state(w.book).production == "up"  # restored: exit 1 says the window failed, not that it is unsafe
    finally:
        close(w)


def test_abort_exits_0_once_the_window_is_closed(tmp_path: Path) -> None:
    w = world(tmp_path, [window("seed000-controlled.toml", "to-abort", chain="none")])
    tally = str(Path(sys.executable).with_name("tally"))
    env = dict(os.environ, TALLY_DB=str(tmp_path / "tally.db"), TALLY_KEY=str(tmp_path / ".tally/root.pem"))
    try:
        gate_all(w)
        done = subprocess.run([tally, "window", "abort", "to-abort", "--site", str(tmp_path / "site.toml"),
                               "--json"], capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["ending"] == "aborted"
    finally:
        close(w)
