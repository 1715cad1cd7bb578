"""Seed 003's budget rules as written, against its own table (total 69, hard 75, stop admitting at 50,
restore reserve 12, block limit 11).

- "At elapsed 50 min stop admitting experiment requests and begin restore if any stage has overrun":
  with no overrun the window continues (to the restore point, 75 - 12 = 63 min);
- "Any block over 11 min: truncate the experiment, preserve raw partials": the remaining blocks
  do not run;
- the block clock starts with the arm's start (a slow engine start counts toward the 11 minutes).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from runner.audit.full import run_audit
from runner.decide.inputs import replay_window
from runner.execution.clock import BudgetClock, StageClock, parse_time
from runner.gates.budget import budget_report
from runner.plan import load_plan

from ...runner.script import SIMPLE_PP3
from ..worlds import close, gate_all, run, window, world
from . import PLAN, WINDOW, copy_families, faithful_world

SEED_TABLE = {"total": "69.0", "hard": 75.0, "stop": 50.0, "reserve": 12.0, "block": 11.0}


def _plan_budget() -> Any:
    return load_plan(PLAN).budget


def test_the_plan_registers_the_seed_table() -> None:
    budget = _plan_budget()
    report = budget_report(budget)
    assert report.verdict == "PASS"
    assert report.rows[0].to_json()["total"] == SEED_TABLE["total"]
    assert (budget.hard_ceiling_min, budget.stop_admitting_min, budget.restore_reserve_min,
            budget.per_block_limit_min) == (75.0, 50.0, 12.0, 11.0)
    assert budget.restore_by_min == 63.0
    assert budget.stop_admitting_if_overrun and budget.block_overrun == "truncate_experiment"
    assert any("admitted only if no stage has overrun" in note for note in report.notes), report.notes


ON_TIME = {"A1": 11.0, "B1": 11.0, "B2": 11.0}   # each block exactly at its 11 registered minutes


def test_at_stop_admitting_without_an_overrun_the_window_continues() -> None:
    clock = BudgetClock(_plan_budget())
    # 7 min setup + three 11-minute blocks = 40; A2 has run 10.5 of its 11 at elapsed 50.5
    assert clock.admitting(50.5, StageClock(7.0, {**ON_TIME, "A2": 10.5})) is None


def test_at_stop_admitting_an_overrun_block_stops_admitting() -> None:
    clock = BudgetClock(_plan_budget())
    limit = clock.admitting(51.2, StageClock(7.0, {**ON_TIME, "A2": 11.2}))
    assert limit is not None and limit.action == "stop_admitting" and limit.at_min == 50.0
    assert limit.reason == "elapsed 51.2 min reached stop-admitting at 50 min and block A2 ran 11.2 min, over its 11 min"


def test_at_stop_admitting_an_overrun_setup_stops_admitting() -> None:
    clock = BudgetClock(_plan_budget())
    limit = clock.admitting(50.0, StageClock(8.0, {"A1": 10.0, "B1": 10.0, "B2": 10.0, "A2": 2.0}))
    assert limit is not None and limit.action == "stop_admitting"
    assert limit.reason.endswith("the setup stages ran 8.0 min, over their 7 min")


def test_an_overrun_before_stop_admitting_does_not_stop() -> None:
    clock = BudgetClock(_plan_budget())
    assert clock.admitting(45.0, StageClock(9.0, {"A1": 12.0})) is None


def test_the_restore_point_stops_whatever_the_stages_did() -> None:
    clock = BudgetClock(_plan_budget())
    limit = clock.admitting(63.0, StageClock(7.0, ON_TIME))
    assert limit is not None and limit.action == "begin_restore" and limit.at_min == 63.0


def test_without_the_seed_rule_stop_admitting_is_unconditional() -> None:
    plan = load_plan(SIMPLE_PP3)
    assert not plan.budget.stop_admitting_if_overrun and plan.budget.block_overrun == "next_block"
    limit = BudgetClock(plan.budget).admitting(50.5, StageClock(7.0, ON_TIME))
    assert limit is not None and limit.action == "stop_admitting"


# --------------------------------------------------------------------------- on the simulator


def _events(w: Any, window_id: str, kind: str | None = None) -> list[Any]:
    return [e for e in w.book.events(stream=f"window/{window_id}") if kind is None or e.type == kind]


def _short_runs(text: str) -> str:
    """6-second decode runs: the budget, not the measurement, is under test."""
    return text.replace("decode_bound_s = 30.0", "decode_bound_s = 6.0")


def _stop_at_3(text: str) -> str:
    return _short_runs(text).replace("stop_admitting_min = 50.0", "stop_admitting_min = 3.0")


def _stop_at_3_a1_overruns(text: str) -> str:
    text = _stop_at_3(text)
    return text.replace('start = "A1"\nminutes = 11.0', 'start = "A1"\nminutes = 0.5')


def test_stop_admitting_on_the_simulator_only_after_an_overrun(tmp_path: Path) -> None:
    """Stop admitting moved to 3 min: on time, every block runs past it; with A1 registered at 0.5 min, it stops."""
    copy_families(tmp_path)
    w = world(tmp_path, [window(str(PLAN), "on-time", edit=_stop_at_3),
                         window(str(PLAN), "overrun", edit=_stop_at_3_a1_overruns)],
              time_scale=0.01, sim_config={"eos_probability": 0.0})
    try:
        gate_all(w)
        run(w, "on-time")
        waves = _events(w, "on-time", "wave.measured")
        assert len(waves) == 24 and not _events(w, "on-time", "budget.decision")
        first = parse_time(_events(w, "on-time", "host.action")[0].time)
        late = [e for e in waves if parse_time(e.payload["started_at"]) > first + timedelta(seconds=3 * 60 * 0.01)]
        assert late  # waves began after the registered 3 minutes: nothing had overrun
        assert _events(w, "on-time", "measurement.ended")[0].payload["reason"] == "complete"

        run(w, "overrun")
        budget = [e.payload for e in _events(w, "overrun", "budget.decision")]
        assert budget and {b["action"] for b in budget} == {"stop_admitting"}, budget  # (the block's, the window's)
        assert "block A1 ran" in budget[0]["reason"] and "over its 0.5 min" in budget[0]["reason"]
        assert _events(w, "overrun", "measurement.ended")[0].payload["reason"] == "stop_admitting"
        assert len(_events(w, "overrun", "wave.measured")) < 24
        assert run_audit(book=w.book).ok
    finally:
        close(w)


def test_a_block_over_its_limit_with_its_slow_start_truncates_the_experiment(tmp_path: Path) -> None:
    """The seed's 11-minute limit, an engine that takes 9 minutes to start: A1 goes over 11 minutes only
    because its block clock includes the arm's start; then no other block runs, and A1's partials stay."""
    w = faithful_world(tmp_path, sim_config={"start_s": 540.0})
    try:
        gate_all(w)
        result = run(w, WINDOW)
        assert result.ending == "restored" and result.decision == "NO_PROMOTION"
        budget = [e.payload for e in _events(w, WINDOW, "budget.decision")]
        assert [(b["action"], b["start"], b["limit_min"]) for b in budget] == [("truncate_block", "A1", 11.0)]
        began = [e.payload["start"] for e in _events(w, WINDOW, "start.began")]
        assert began == ["A1"]  # the remaining blocks do not run
        ended = [e.payload for e in _events(w, WINDOW, "start.ended")]
        assert len(ended) == 1 and ended[0]["truncated"]
        assert _events(w, WINDOW, "measurement.ended")[0].payload["reason"] == "truncated"
        # the arm's start took most of the block: started -> finished of its start_arm
        actions = [e for e in _events(w, WINDOW, "host.action") if e.payload["action"] == "start_arm"]
        start_min = (parse_time(actions[1].time) - parse_time(actions[0].time)).total_seconds() / 60 / w.time_scale
        assert start_min >= 8.5, start_min
        waves = [e.payload for e in _events(w, WINDOW, "wave.measured")]
        assert waves and all(p["start"] == "A1" for p in waves)
        kept = [r for p in waves for r in p["requests"] if r["delivered_tokens"] > 0]
        assert kept  # raw partials preserved
        decision = _events(w, WINDOW, "decision.recorded")[0].payload["result"]
        assert any("is cancelled" in r for r in decision["reasons"]), decision["reasons"]
        assert replay_window(w.book, WINDOW).match
        assert run_audit(book=w.book).ok
    finally:
        close(w)
