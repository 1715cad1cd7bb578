"""Seed 003's smoke stage as its own 3-minute stage, after the four 11-minute blocks.

The same window twice on the simulator, with engines that take 2 minutes to start and
probes that take about 5 minutes on A's slow engine (128-token answers at 1 s a step): with
the probes at the end of each block (``[smoke] starts``, as plans without ``arms`` run
them), A1 goes over its 11 minutes and the experiment is truncated; with the stage of its
own (``[smoke] arms``) every block ends after its waves, well inside its minutes, and the
probes run after A2 on A's engine and then B's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runner.execution.clock import parse_time
from runner.gates.budget import budget_report
from runner.plan.register import registered_plan

from ..worlds import close, gate_all, run
from . import WINDOW, faithful_world

PROBES = '\n[smoke]\narms = ["A", "B"]\nprobes = ["greedy_identity", "structured", "stop"]\nmax_tokens = 128\n'
STAGE = 'smoke within qualified test processes"\nkind = "measure"'
ENGINE_START = {"start_s": 120.0}   # simulated seconds for an engine to come up (window time)


def _own_stage(text: str) -> str:
    return text.replace(STAGE, 'smoke within qualified test processes"\nkind = "smoke"') + PROBES


def _in_blocks(text: str) -> str:
    return text + PROBES.replace('arms = ["A", "B"]', 'starts = ["A1", "B1", "B2", "A2"]')


def _events(w: Any, kind: str | None = None) -> list[Any]:
    return [e for e in w.book.events(stream=f"window/{WINDOW}") if kind is None or e.type == kind]


def _block_minutes(w: Any) -> dict[str, float]:
    """Each start's block clock, as the budget reads it: its arm's start_arm began -> its start.ended."""
    out: dict[str, float] = {}
    began = None
    for e in _events(w):
        if e.type == "host.action" and e.payload["action"] == "start_arm" and began is None:
            began = parse_time(e.time)
        elif e.type == "start.ended" and began is not None:
            out[e.payload["start"]] = (parse_time(e.time) - began).total_seconds() / 60 / w.time_scale
            began = None
    return out


def test_the_seed_table_registers_the_smoke_stage_in_the_budget() -> None:
    from ledger.stricttoml import read_toml
    from runner.plan import load_plan
    from runner.plan.parse import parse_plan

    from . import PLAN

    plan = parse_plan(read_toml(_own_stage(PLAN.read_text()).encode(), "plan"))
    assert load_plan(PLAN).smoke is None and plan.smoke is not None and plan.smoke.own_stage
    assert plan.budget.stage_minutes("smoke") == 3.0
    report = budget_report(plan.budget)
    # 7 setup + 4 x 11 blocks + 3 smoke: measurement ends at 54 min; 12 restore + 3 close: 69 in all
    assert report.rows[0].to_json()["measurement_end"] == "54.0" and report.rows[0].to_json()["total"] == "69.0"


def test_a_block_that_uses_its_minutes_is_not_truncated_by_the_stage_of_its_own(tmp_path: Path) -> None:
    w = faithful_world(tmp_path, edit=_own_stage, sim_config=ENGINE_START)
    try:
        gate_all(w)
        result = run(w, WINDOW)
        assert result.ending == "restored"
        assert not _events(w, "budget.decision")
        assert _events(w, "measurement.ended")[0].payload["reason"] == "complete"
        blocks = _block_minutes(w)
        assert list(blocks) == ["A1", "B1", "B2", "A2", "A-smoke", "B-smoke"]
        assert all(blocks[b] < 11.0 for b in ("A1", "B1", "B2", "A2")), blocks
        probes = _events(w, "smoke.result")
        a2_ended = next(e.seq for e in _events(w, "start.ended") if e.payload["start"] == "A2")
        assert len(probes) == 6 and all(e.seq > a2_ended for e in probes)
        assert {(e.payload["start"], e.payload["outcome"]) for e in probes if e.payload["probe"] == "greedy_identity"} \
            == {("A-smoke", "recorded"), ("B-smoke", "pass")}
        assert not [r for r in result.reasons if r.startswith(("failure:", "incomplete:"))], result.reasons
        assert registered_plan(w.book, WINDOW).plan.stage_starts[1].id == "B-smoke"
    finally:
        close(w)


def test_the_same_probes_inside_the_blocks_push_a1_over_its_limit(tmp_path: Path) -> None:
    w = faithful_world(tmp_path, edit=_in_blocks, sim_config=ENGINE_START)
    try:
        gate_all(w)
        result = run(w, WINDOW)
        budget = [(e.payload["action"], e.payload["start"]) for e in _events(w, "budget.decision")]
        assert budget == [("truncate_block", "A1")]
        assert _events(w, "measurement.ended")[0].payload["reason"] == "truncated"
        assert [e.payload["start"] for e in _events(w, "start.began")] == ["A1"]   # no other block ran
        assert {e.payload["start"] for e in _events(w, "smoke.result")} == {"A1"}
        assert _block_minutes(w)["A1"] > 11.0
        assert result.decision != "CANDIDATE"
    finally:
        close(w)
