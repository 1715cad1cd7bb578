"""The smoke stage executed on the simulator: each probe's failure reaches the decision by its kind.

Windows are seed 003's ABBA plan cut short (32-token decode runs), with a ``[smoke]`` table
(``tests/fixtures/smoke/``) on A1 and B1; the simulator's faults make the candidate's
engine (arm ``k2-sampled-fixed5``) diverge at T=0, ignore a schema or a stop string, or
hang after a cancel.
"""

from __future__ import annotations

import dataclasses
import json
import re
import stat
from pathlib import Path
from typing import Any

import pytest

from ledger.canonical import canonical
from runner.audit.full import run_audit
from runner.audit.invariants import audit_protocol
from runner.decide.inputs import decision_for, replay_window
from runner.plan.register import registered_plan

from ..runner.script import SIMPLE_PP3
from .worlds import close, gate_all, run, window, world

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "smoke"
CANDIDATE_ARM = "k2-sampled-fixed5"
SHORT_TIME_SCALE = 0.02


OWN_STAGE = ('name = "paired greedy and failure/structured smoke within qualified test processes"\nkind = "measure"\n',
             'name = "paired greedy and failure/structured smoke within qualified test processes"\nkind = "smoke"\n')
"""The plan's 3-minute smoke stage in the budget, made the smoke stage's own (for ``[smoke] arms``)."""


def _plan_with(smoke: str, *, short: bool = False, own: bool = False):  # type: ignore[no-untyped-def]
    """The plan with 32-token decode runs and ``smoke``; ``short``: its short cell alone (a quick window);
    ``own``: the budget's smoke stage is the smoke stage of its own (``[smoke] arms``)."""
    def edit(text: str) -> str:
        text = text.replace("max_tokens = 1024", "max_tokens = 32") + "\n" + smoke
        if own:
            assert OWN_STAGE[0] in text
            text = text.replace(*OWN_STAGE)
        if short:
            for cell in ("32k", "150k"):
                text = text.replace(f'[[cells]]\nname = "{cell}"\ncontext = "{cell}"\n', "")
            text = re.sub(r', (32k|150k) = \["[a-z]+-(32k|150k)-01"\]', "", text)
        return text
    return edit


def _smoke(**extra: Any) -> str:
    lines = ["[smoke]"] + [f"{k} = {json.dumps(v)}" for k, v in extra.items()]
    return "\n".join(lines) + "\n"


def _window(tmp_path: Path, smoke: str, faults: dict[str, Any] | None = None, window_id: str = "smoke-pp3",
            sim: dict[str, Any] | None = None, short: bool = False, own: bool = False) -> tuple[Any, Any, list[Any]]:
    config = dict(sim or {})
    if faults:
        config["faults"] = faults
    # a short window runs at a slower time scale: a loaded machine's overhead counts less against its budget
    w = world(tmp_path, [window(str(SIMPLE_PP3), window_id, edit=_plan_with(smoke, short=short, own=own))],
              sim_config=config, **({"time_scale": SHORT_TIME_SCALE} if short else {}))
    gate_all(w)
    result = run(w, window_id)
    events = list(w.book.events(stream=f"window/{window_id}"))
    return w, result, events


def _results(events: list[Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(e.payload["start"], e.payload["probe"]): e.payload for e in events if e.type == "smoke.result"}


def _evidence(w: Any, result: dict[str, Any]) -> dict[str, Any]:
    blob = w.book.blob(result["evidence"]["blob"].removeprefix("sha256:"))
    assert blob is not None and blob.media_type == "application/json"
    return json.loads(blob.data)


def _checked(w: Any, window_id: str) -> None:
    audit = run_audit(book=w.book)
    assert audit.ok, audit.lines()
    assert replay_window(w.book, window_id).match


def test_fixture_plan_is_the_seed_faithful_smoke_table() -> None:
    """The TOML a seed-faithful seed 003 plan adds parses as the stage the tests run, and is the example's stage."""
    from ledger.stricttoml import read_toml
    from runner.plan import load_plan
    from runner.plan.parse import parse_plan

    text = SIMPLE_PP3.read_text() + "\n" + (FIXTURES / "seed003-smoke.toml").read_text()
    plan = parse_plan(read_toml(text.encode(), "seed003+smoke"))
    assert plan.smoke is not None and plan.smoke.declared
    example = load_plan(Path(__file__).resolve().parents[2] / "examples" / "seed003-abba.toml")
    # the example runs the same stage as a stage of its own, on each arm's engine after the blocks
    assert example.smoke == dataclasses.replace(plan.smoke, arms=("A", "B"), starts=("A-smoke", "B-smoke"))
    assert plan.smoke.starts == ("A1", "B1", "B2", "A2")
    assert set(plan.smoke.probes) == {"greedy_identity", "structured", "stop", "eos", "lifecycle"}
    assert plan.to_json()["smoke"]["near_tie_margin"] == 0.05


def test_a_candidate_diverging_at_t0_is_rejected_naming_greedy_identity_and_the_position(tmp_path: Path) -> None:
    w, result, events = _window(tmp_path, _smoke(starts=["A1", "B1"], near_tie_margin=0.05),
                                {"greedy_diverge": {"arm": CANDIDATE_ARM, "position": 5}})
    try:
        assert result.decision == "REJECT"
        failure = next(r for r in result.reasons if r.startswith("failure: greedy-identity"))
        assert "B1 diverges from A1 at position 5" in failure
        found = _results(events)
        assert found[("A1", "greedy_identity")]["outcome"] == "recorded"
        b1 = found[("B1", "greedy_identity")]
        assert b1["outcome"] == "fail" and b1["position"] == 5 and b1["reference"] == "A1"
        assert b1["margin"] is not None and b1["margin"] > 0.05  # not a near tie
        evidence = _evidence(w, b1)
        divergence = evidence["divergence"]
        assert divergence["position"] == 5
        ref, cand = evidence["reference"]["emitted"]["sequence"], evidence["emitted"]["sequence"]
        assert ref[:5] == cand[:5] and ref[5] != cand[5]  # identical up to the position, different there
        assert divergence["reference_continuation"][0] == ref[5]
        assert divergence["candidate_continuation"][0] == cand[5]
        _checked(w, "smoke-pp3")
    finally:
        close(w)


@pytest.mark.parametrize("rejects", [False, True], ids=["near-tie-reported", "near-tie-registered-to-reject"])
def test_a_near_tie_divergence_is_reported_and_rejects_only_when_registered_to(tmp_path: Path, rejects: bool) -> None:
    w, result, events = _window(tmp_path, _smoke(starts=["A1", "B1"], near_tie_margin=0.05, near_tie_rejects=rejects),
                                {"greedy_diverge": {"arm": CANDIDATE_ARM, "position": 3, "near_tie": True}})
    try:
        b1 = _results(events)[("B1", "greedy_identity")]
        assert b1["outcome"] == "near_tie" and b1["position"] == 3 and b1["margin"] <= 0.05
        assert "a near tie" in b1["summary"]
        if rejects:
            assert result.decision == "REJECT"
            assert any(r.startswith("failure: greedy-identity") for r in result.reasons)
        else:
            assert result.decision != "REJECT", result.reasons
            assert not any("greedy-identity" in r for r in result.reasons)
            # the window report shows it as such, in its banners and the smoke stage's table
            from runner.report.window import window_report

            window_report(w.book, "smoke-pp3", tmp_path / "report")
            report = (tmp_path / "report" / "report.md").read_text()
            assert "smoke near tie: B1 diverges from A1 at position 3" in report and "Smoke stage" in report
        _checked(w, "smoke-pp3")
    finally:
        close(w)


@pytest.mark.parametrize(("probe", "faults", "sim", "kind"), [
    ("structured", {"ignore_schema": {"arm": CANDIDATE_ARM}}, {}, "grammar"),
    ("stop", {"ignore_stop": {"arm": CANDIDATE_ARM}}, {}, "stop"),
    ("eos", {"ignore_min_tokens": {"arm": CANDIDATE_ARM}}, {}, "stop"),
    ("lifecycle", {"hang_after_cancel": {"seconds": 3.0}}, {}, "lifecycle"),
], ids=["structured-ignored-schema", "stop-ignored-stop-string", "eos-candidate-ignores-min-tokens", "lifecycle-hang"])
def test_each_smoke_probe_failing_alone_rejects_with_its_kind(tmp_path: Path, probe: str, faults: dict[str, Any],
                                                               sim: dict[str, Any], kind: str) -> None:
    w, result, events = _window(tmp_path, _smoke(starts=["A1", "B1"], probes=["greedy_identity", probe],
                                                 eos_token_id=1, timeout_s=1.0), faults, sim=sim)
    try:
        found = _results(events)
        failed = {key: r for key, r in found.items() if r["outcome"] == "fail"}
        assert failed and {p for _s, p in failed} == {probe}, found  # that probe alone fails
        assert all(r["kind"] == kind for r in failed.values())
        assert found[("B1", "greedy_identity")]["outcome"] == "pass"
        assert result.decision == "REJECT"
        smoke_reasons = [r for r in result.reasons if r.startswith("failure: ")]
        assert smoke_reasons and all(r.startswith(f"failure: {kind}: ") for r in smoke_reasons), result.reasons
        _checked(w, "smoke-pp3")
    finally:
        close(w)


def test_every_probe_passes_on_equal_engines_and_leaves_its_evidence(tmp_path: Path) -> None:
    w, result, events = _window(tmp_path, (FIXTURES / "seed003-smoke.toml").read_text().replace(
        'starts = ["A1", "B1", "B2", "A2"]', 'starts = ["A1", "B1"]').replace("timeout_s = 30.0", "timeout_s = 5.0"))
    try:
        found = _results(events)
        assert {p for _s, p in found} == {"greedy_identity", "structured", "stop", "eos", "lifecycle"}
        assert all(r["outcome"] in ("pass", "recorded") for r in found.values()), found
        assert result.decision != "REJECT"
        lifecycle = found[("B1", "lifecycle")]["checks"]
        assert lifecycle["cancel"]["cancelled"] and lifecycle["disconnect"]["sent"]
        assert all(lifecycle[c]["healthy_after"] for c in ("cancel", "disconnect", "deadline"))
        assert lifecycle["deadline"]["timed_out"]  # the late reply was exercised, not beaten by a fast server
        stop = found[("B1", "stop")]["checks"]
        assert stop["stop_string"]["ok"] and stop["stop_token_ids"]["ok"]
        # the greedy reference's evidence keeps the emitted token ids (a blob, never in an event)
        ref = _evidence(w, found[("A1", "greedy_identity")])
        assert ref["emitted"]["basis"] == "token_ids" and len(ref["emitted"]["sequence"]) == 16
        assert "sequence" not in json.dumps(found[("A1", "greedy_identity")])
        # exported, the evidence (like every blob) is readable by its owner only
        from ledger.bundle import export_bundle

        export_bundle(w.book, tmp_path / "bundle", signer=w.root)
        sha = found[("A1", "greedy_identity")]["evidence"]["blob"].removeprefix("sha256:")
        assert stat.S_IMODE((tmp_path / "bundle" / "blobs" / sha).stat().st_mode) == 0o600
        _checked(w, "smoke-pp3")
    finally:
        close(w)


def test_a_window_whose_registered_probe_did_not_run_cannot_be_decided(tmp_path: Path) -> None:
    """Without B1's greedy result the rule holds the decision, and a CANDIDATE recorded anyway fails the audit."""
    w, _result, events = _window(tmp_path, _smoke(starts=["A1", "B1"]))
    try:
        plan = registered_plan(w.book, "smoke-pp3").plan
        assert not audit_protocol(events, {"smoke-pp3": plan})
        kept = [e for e in events if not (e.type == "smoke.result" and e.payload["start"] == "B1")]
        _built, outcome = decision_for(plan, kept)
        assert outcome["decision"] != "CANDIDATE"
        assert "incomplete: smoke probe greedy_identity did not run on B1" in outcome["reasons"]
        # a decision recorded CANDIDATE over those events
        forged = []
        for e in kept:
            if e.type == "decision.recorded":
                payload = dict(e.payload, result=dict(e.payload["result"], decision="CANDIDATE"))
                e = dataclasses.replace(e, payload_json=canonical(payload).decode())
            forged.append(e)
        violations = audit_protocol(forged, {"smoke-pp3": plan})
        smoke = [v for v in violations if v.invariant == "smoke-before-decision"]
        assert smoke and "greedy_identity on B1" in smoke[0].message
    finally:
        close(w)


def test_greedy_check_starts_run_the_greedy_identity_probe_in_a_win2_window(tmp_path: Path) -> None:
    """seed 000's controlled plan flags s2-B: s1 (the control) is the reference, s2 is compared with it."""
    from .worlds import small

    w = world(tmp_path, [window("seed000-controlled.toml", "smoke-win2", chain="none", edit=small)],
              sim_config={"faults": {"greedy_diverge": {"arm": "fixed5-sampled", "position": 2}}})
    try:
        gate_all(w)
        result = run(w, "smoke-win2")
        events = list(w.book.events(stream="window/smoke-win2"))
        found = _results(events)
        assert found[("s1", "greedy_identity")]["outcome"] == "recorded"
        s2 = found[("s2", "greedy_identity")]
        assert s2["outcome"] == "fail" and s2["position"] == 2
        # win2-v1 registers no smoke effect by default: the failure is recorded, the decision stands on the waves
        assert result.decision in ("WIN", "LOSS", "NO_CHANGE", "INCONCLUSIVE")
        assert not any("smoke" in r for r in result.reasons)
        _checked(w, "smoke-win2")
    finally:
        close(w)


def test_a_smoke_probe_on_a_field_the_server_ignores_is_refused_before_any_host_action(tmp_path: Path) -> None:
    """The capability probe finds return_token_ids ignored: the rehearsal gate fails and fit refuses the window."""
    from ledger.errors import PolicyError
    from runner.execution.fit import recorded_fields, unfit

    w = world(tmp_path, [window(str(SIMPLE_PP3), "smoke-unfit", edit=_plan_with(_smoke(starts=["A1", "B1"])))],
              sim_config={"ignore_fields": ["return_token_ids"]})
    try:
        gate_all(w)
        gate = next(e.payload for e in w.book.events(stream="window/smoke-unfit", types=["gate.result"])
                    if e.payload["gate"] == "rehearsal")
        assert gate["verdict"] == "FAIL" and "return_token_ids" in gate["summary"]
        plan = registered_plan(w.book, "smoke-unfit").plan
        refusals = unfit(plan, w.driver, fields=recorded_fields(w.book, "smoke-unfit"))
        assert any("smoke stage relies on return_token_ids" in r for r in refusals), refusals
        with pytest.raises(PolicyError):
            run(w, "smoke-unfit")
        assert not any(e.type == "host.action" for e in w.book.events(stream="window/smoke-unfit"))
    finally:
        close(w)


@pytest.mark.parametrize(("probe", "field"), [("eos", "min_tokens"), ("stop", "stop"),
                                            ("structured", "structured_outputs"),
                                            ("greedy_identity", "repetition_penalty")])
def test_a_smoke_probe_the_server_cannot_honour_is_refused_before_the_drain(tmp_path: Path, probe: str,
                                                                            field: str) -> None:
    """min_tokens, stop strings, the structured-output field, a repeat penalty the request cannot neutralise
    (the server's own is 1.1, as llama-cpp-python's, and it reads neither name): found ignored by the capability
    probe, refused at fit."""
    from ledger.errors import PolicyError
    from runner.execution.fit import recorded_fields, unfit

    extra = {"eos_token_id": 1} if probe == "eos" else {}
    penalty = {"repetition_penalty": 1.1} if field == "repetition_penalty" else {}
    w = world(tmp_path, [window(str(SIMPLE_PP3), "smoke-unfit",
                                edit=_plan_with(_smoke(starts=["A1", "B1"], probes=[probe], **extra)))],
              sim_config={"ignore_fields": [field], **penalty})
    try:
        gate_all(w)
        gate = next(e.payload for e in w.book.events(stream="window/smoke-unfit", types=["gate.result"])
                    if e.payload["gate"] == "rehearsal")
        assert gate["evidence"]["fields"][field] == "ignored" and gate["verdict"] == "FAIL"
        assert f"{field} ignored (" in gate["summary"]
        plan = registered_plan(w.book, "smoke-unfit").plan
        refusals = unfit(plan, w.driver, fields=recorded_fields(w.book, "smoke-unfit"))
        assert [r for r in refusals if r.startswith(f"the smoke stage relies on {field} (")], refusals
        with pytest.raises(PolicyError):
            run(w, "smoke-unfit")
        assert not any(e.type == "host.action" for e in w.book.events(stream="window/smoke-unfit"))
    finally:
        close(w)


def test_a_win2_plan_can_register_smoke_failures_as_inconclusive(tmp_path: Path) -> None:
    from .worlds import small

    def edit(text: str) -> str:
        return small(text) + "\n" + _smoke(starts=["s1", "s2"], win2_effect="inconclusive")

    w = world(tmp_path, [window("seed000-controlled.toml", "smoke-win2i", chain="none", edit=edit)],
              sim_config={"faults": {"greedy_diverge": {"arm": "fixed5-sampled", "position": 4}}})
    try:
        gate_all(w)
        result = run(w, "smoke-win2i")
        assert result.decision == "INCONCLUSIVE"
        assert any(r.startswith("smoke: greedy-identity: s2 diverges from s1 at position 4") for r in result.reasons)
        decision = next(w.book.events(stream="window/smoke-win2i", types=["decision.recorded"]))
        assert decision.payload["input"]["smoke_failures"][0].startswith("greedy-identity: s2")
        _checked(w, "smoke-win2i")
    finally:
        close(w)


def test_a_candidate_whose_first_divergence_is_a_near_tie_and_later_tokens_differ_is_rejected_naming_the_later(
        tmp_path: Path) -> None:
    """The near tie at 3 is followed teacher-forced: the candidate, given the reference's token there, diverges
    for real at 6 (a lossy kernel): REJECT naming position 6, every divergence and the forced prefix recorded."""
    w, result, events = _window(tmp_path, _smoke(starts=["A1", "B1"], near_tie_margin=0.05),
                                {"greedy_diverge": {"arm": CANDIDATE_ARM, "position": 3, "near_tie": True},
                                 "greedy_lossy": {"arm": CANDIDATE_ARM, "position": 2}}, short=True)
    try:
        assert result.decision == "REJECT"
        failure = next(r for r in result.reasons if r.startswith("failure: greedy-identity"))
        assert "B1 diverges from A1 at position 6" in failure and "past 1 near tie" in failure
        b1 = _results(events)[("B1", "greedy_identity")]
        assert b1["outcome"] == "fail" and b1["position"] == 6 and b1["margin"] > 0.05
        assert b1["checks"]["divergences"] == 2 and b1["checks"]["near_ties"] == 1
        divergence = _evidence(w, b1)["divergence"]
        assert [(d["position"], d["near_tie"]) for d in divergence["divergences"]] == [(3, True), (6, False)]
        assert all({"reference", "candidate", "reference_margin", "candidate_margin"} <= set(d)
                   for d in divergence["divergences"])
        assert [f["offset"] for f in divergence["forced"]] == [4]
        _checked(w, "smoke-pp3")
    finally:
        close(w)


def test_a_candidate_whose_only_divergences_are_near_ties_is_a_near_tie_not_rejected(tmp_path: Path) -> None:
    w, result, events = _window(tmp_path, _smoke(starts=["A1", "B1"], near_tie_margin=0.05, near_tie_follow=3),
                                {"greedy_diverge": {"arm": CANDIDATE_ARM, "position": 2, "near_tie": True,
                                                    "count": 2}}, short=True)
    try:
        b1 = _results(events)[("B1", "greedy_identity")]
        assert b1["outcome"] == "near_tie" and b1["position"] == 2, b1["summary"]
        assert b1["checks"]["near_ties"] == 2 and b1["checks"]["followed"] == 2 and b1["checks"]["compared"] == 16
        assert result.decision != "REJECT" and not any("greedy-identity" in r for r in result.reasons)
        plan = registered_plan(w.book, "smoke-pp3").plan
        assert plan.smoke is not None and plan.smoke.to_json()["near_tie_follow"] == 3
        _checked(w, "smoke-pp3")
    finally:
        close(w)


@pytest.mark.parametrize("ignores", [False, True], ids=["honours-stops", "ignores-stops"])
def test_the_stop_probe_after_a_near_tie_the_repeat_flips_judges_stops_only(tmp_path: Path, ignores: bool) -> None:
    """The candidate's greedy reply takes a near tie its repeats do not (llama.cpp's prefix cache): the stop probe
    places its stop in its own reply, so it passes a server that honours stops and fails one that ignores them."""
    faults: dict[str, Any] = {"greedy_diverge": {"arm": CANDIDATE_ARM, "position": 3, "near_tie": True}}
    if ignores:
        faults["ignore_stop"] = {"arm": CANDIDATE_ARM}
    w, result, events = _window(tmp_path, _smoke(starts=["A1", "B1"], probes=["greedy_identity", "stop"],
                                                 near_tie_margin=0.05), faults, short=True)
    try:
        found = _results(events)
        assert found[("B1", "greedy_identity")]["outcome"] == "near_tie"
        stop = found[("B1", "stop")]
        if ignores:
            assert stop["outcome"] == "fail" and result.decision == "REJECT"
            assert any(r.startswith("failure: stop: B1: stop string") for r in result.reasons), result.reasons
        else:
            assert stop["outcome"] == "pass", stop["summary"]
            assert result.decision != "REJECT", result.reasons
        _checked(w, "smoke-pp3")
    finally:
        close(w)


SMOKE_STOP_BOUND_S = 2.0   # docs/window.md: a smoke step ends this soon after the signal


def test_sigterm_during_the_smoke_stage_reaches_the_safe_ending_and_nothing_after_it_counts(tmp_path: Path) -> None:
    """A1's greedy request hangs (60 s to its first token, under a 120 s probe timeout): SIGTERM cuts it, the
    step ends within the documented bound, the probe is recorded as after the signal, and the window restores."""
    import os
    import signal
    import threading
    import time

    from runner.execution.window import WindowRunner

    w = world(tmp_path, [window(str(SIMPLE_PP3), "smoke-sig", edit=_plan_with(_smoke(
        starts=["A1", "B1"], probes=["greedy_identity", "stop"], timeout_s=120.0), short=True))],
              time_scale=SHORT_TIME_SCALE)
    try:
        gate_all(w)
        runner = WindowRunner(w.book, w.root, "smoke-sig", w.driver, time_scale=w.time_scale)
        fired: dict[str, float] = {}

        def signal_during_smoke() -> None:
            deadline = time.monotonic() + 300
            while runner.step_kind != "smoke" and time.monotonic() < deadline:
                time.sleep(0.005)
            seen = w.sim.truth()["next"]
            w.sim.set_faults(slow_ttft={"seconds": 60.0, "count": 20})
            while not any(r["status"] == "running" for r in w.sim.truth(seen)["requests"]) \
                    and time.monotonic() < deadline:
                time.sleep(0.01)   # until the greedy request is in flight, waiting for its first token
            time.sleep(0.2)
            fired["at"] = time.perf_counter()
            os.kill(os.getpid(), signal.SIGTERM)
            while runner.step_kind == "smoke":
                time.sleep(0.005)
            fired["step_ended"] = time.perf_counter()

        thread = threading.Thread(target=signal_during_smoke, daemon=True)
        thread.start()
        result = runner.run()
        returned = time.perf_counter()
        thread.join(5)
        assert "at" in fired, "the smoke step never ran"
        assert fired["step_ended"] - fired["at"] < SMOKE_STOP_BOUND_S
        assert returned - fired["at"] < 60.0  # the window's safe ending, long before the hung request's reply
        assert result.ending == "restored" and result.decision is not None
        events = list(w.book.events(stream="window/smoke-sig"))
        interrupted = next(e for e in events if e.type == "window.interrupted")
        assert interrupted.payload["reason"] == "signal" and interrupted.payload["signal"] == "SIGTERM"
        smoke = [e.payload for e in events if e.type == "smoke.result"]
        # what ended before the signal counts; the probe in flight (cut: no answer) is recorded as after it
        assert smoke and {r["start"] for r in smoke} == {"A1"} and smoke[-1]["outcome"] == "interrupted"
        assert all(r["outcome"] in ("recorded", "pass") for r in smoke[:-1]), smoke
        cut = smoke[-1]
        assert "after the stop signal (not counted)" in cut["summary"] and cut["checks"]["outcome_after_stop"]
        decision = next(e.payload for e in events if e.type == "decision.recorded")
        reasons = decision["result"]["reasons"]
        assert not any(r.startswith("failure: ") for r in reasons), reasons  # the cut probe's "fail" never counts
        assert f"incomplete: smoke probe {cut['probe']} did not run on A1" in reasons
        assert decision["result"]["decision"] != "CANDIDATE"
        assert run_audit(book=w.book).ok
    finally:
        close(w)
