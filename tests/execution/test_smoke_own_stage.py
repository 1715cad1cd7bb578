"""The smoke stage of its own (``[smoke] arms``), executed on the simulator.

Seed 003's budget gives each block 11 minutes and the paired greedy and failure/structured
smoke a 3-minute stage of its own. Run inside the blocks, the probes spend a block's
minutes; run as a stage, they come after the last block, on each arm's engine in turn
(starts ``A-smoke`` and ``B-smoke``, attested like any start), and decide exactly as before:
any semantic mismatch REJECTs B.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runner.decide.inputs import decision_for
from runner.plan.register import registered_plan

from .test_smoke_stage import CANDIDATE_ARM, _checked, _results, _smoke, _window
from .worlds import close

PROBES = ["greedy_identity", "structured", "stop"]


def _own(**extra: Any) -> str:
    """A ``[smoke]`` table on arms A and B (the control first: the greedy reference)."""
    return _smoke(arms=["A", "B"], probes=PROBES, **extra)


def _span(events: list[Any], start: str) -> tuple[int, int]:
    began = next(e.seq for e in events if e.type == "start.began" and e.payload["start"] == start)
    ended = next(e.seq for e in events if e.type == "start.ended" and e.payload["start"] == start)
    return began, ended


def test_the_stage_runs_after_the_blocks_on_each_arms_engine_attested_like_any_start(tmp_path: Path) -> None:
    w, result, events = _window(tmp_path, _own(), short=True, own=True)
    try:
        began = [e.payload["start"] for e in events if e.type == "start.began"]
        assert began == ["A1", "B1", "B2", "A2", "A-smoke", "B-smoke"]
        last_block = _span(events, "A2")[1]
        probes = [e for e in events if e.type == "smoke.result"]
        # every probe inside the stage's own starts; none inside a block, so no block's minutes pay for one
        assert len(probes) == 2 * len(PROBES)
        for start in ("A-smoke", "B-smoke"):
            first, end = _span(events, start)
            mine = [e for e in probes if e.payload["start"] == start]
            assert [e.payload["probe"] for e in mine] == PROBES and all(first < e.seq < end for e in mine)
            assert all(e.seq > last_block for e in mine)
            role = start[0]
            assert {e.payload["role"] for e in mine} == {role}
            gates = {e.payload["gate"]: e.payload["verdict"] for e in events
                     if e.type == "gate.result" and e.payload.get("start") == start}
            assert gates == {"start_config": "PASS", "standard_spec": "PASS"}   # attested like any start
            attested = [e for e in events if e.type == "params.attested" and e.payload["start"] == start]
            assert len(attested) == 1 and attested[0].payload["ok"] and first < attested[0].seq < mine[0].seq
            assert not [e for e in events if e.type in ("warmup.done", "priming.done", "wave.measured")
                        and e.payload["start"] == start]   # the stage measures nothing
        found = _results(events)
        assert found[("A-smoke", "greedy_identity")]["outcome"] == "recorded"
        assert found[("B-smoke", "greedy_identity")]["outcome"] == "pass"
        assert found[("B-smoke", "greedy_identity")]["reference"] == "A-smoke"
        # every probe passed and ran: nothing of the stage among the reasons (the short window's timing may
        # still decide on its own, as any window's)
        assert not [r for r in result.reasons if r.startswith(("failure:", "incomplete:"))], result.reasons
        built, outcome = decision_for(registered_plan(w.book, "smoke-pp3").plan, events)
        assert "smoke_missing" not in built.input and outcome["decision"] == result.decision
        # the rule's blocks are the four measurement starts: the stage's starts are no block of it
        assert {r["block"] for r in built.input["requests"]} == {"A1", "B1", "B2", "A2"}
        _checked(w, "smoke-pp3")
    finally:
        close(w)


def test_a_greedy_mismatch_in_the_stage_rejects_b_naming_the_position(tmp_path: Path) -> None:
    w, result, events = _window(tmp_path, _own(), {"greedy_diverge": {"arm": CANDIDATE_ARM, "position": 4}},
                                short=True, own=True)
    try:
        assert result.decision == "REJECT"
        failure = next(r for r in result.reasons if r.startswith("failure: greedy-identity"))
        assert "B-smoke diverges from A-smoke at position 4" in failure
        assert _results(events)[("B-smoke", "greedy_identity")]["outcome"] == "fail"
        _checked(w, "smoke-pp3")
    finally:
        close(w)


def test_a_structured_mismatch_in_the_stage_rejects_b(tmp_path: Path) -> None:
    w, result, events = _window(tmp_path, _own(), {"ignore_schema": {"arm": CANDIDATE_ARM}}, short=True, own=True)
    try:
        assert result.decision == "REJECT"
        assert "failure: grammar: B-smoke: the structured_outputs answer is not JSON" in result.reasons
        found = _results(events)
        assert found[("B-smoke", "structured")]["outcome"] == "fail"
        assert found[("A-smoke", "structured")]["outcome"] == "pass"
        _checked(w, "smoke-pp3")
    finally:
        close(w)
