"""A window resumed on a machine whose clock is behind or ahead: the budget is not fooled.

Runner A opens a window and stops after its first host actions, as a crashed runner
would leave it. Runner B, on another machine, resumes it with its wall clock thirty
minutes behind or ahead (its ``Ledger`` given that clock). The budget's now is the
ledger's clock, never before the window's last recorded event (``BudgetClock.not_before``):
behind, B cannot give the window the thirty minutes back (it used to read a negative
elapsed time: the whole budget again); ahead, B ends the window early, never late. On
PostgreSQL both machines read the server's clock (``tests/ledger/test_clock_skew.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ledger.store import Ledger
from runner.execution.clock import parse_time
from runner.execution.steps import next_step
from runner.execution.window import RunResult, WindowRunner

from .worlds import close, gate_all, window, world


def _skewed(offset: timedelta) -> Callable[[], datetime]:
    return lambda: datetime.now(UTC) + offset


def _skew_this_machine(monkeypatch: pytest.MonkeyPatch, offset: timedelta) -> None:
    """Machine B's wall clock, wherever the runner might read one (``datetime.now`` in its modules)."""
    import runner.execution.starts
    import runner.execution.window

    class Skewed(datetime):
        @classmethod
        def now(cls, tz=None):  # type: ignore[no-untyped-def, override]
            return datetime.now(tz) + offset

    for module in (runner.execution.starts, runner.execution.window):
        monkeypatch.setattr(module, "datetime", Skewed, raising=False)


@pytest.mark.parametrize("offset", [timedelta(minutes=-30), timedelta(minutes=30)], ids=["behind", "ahead"])
def test_a_resumed_window_on_a_skewed_machine_keeps_its_budget(tmp_path: Path, offset: timedelta,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from runner.demo.scenarios import pass_chain_gate
    from runner.gates.admission import admit

    w = world(tmp_path, [window("seed000-controlled.toml", "skewed", chain="none")])
    other = None
    try:
        gate_all(w)
        pass_chain_gate(w.book, w.root, "skewed", lambda _t: None)
        admit(w.book, w.root, "skewed")
        first = WindowRunner(w.book, w.root, "skewed", w.driver, time_scale=w.time_scale)
        for _ in range(8):  # the first host actions, then the runner is gone
            first.refresh()
            step = next_step(first._context(first.ws))
            if step.kind == "start_arm":
                break
            first.perform(step, RunResult("skewed", None, None, []))
        assert first.ws.clock.first_action is not None
        _skew_this_machine(monkeypatch, offset)
        other = Ledger.open(w.book.url, clock=_skewed(offset))  # SQLite: the machine's clock is the ledger's
        resumed = WindowRunner(other, w.root, "skewed", w.driver, time_scale=w.time_scale)
        resumed.refresh()
        ws = resumed.ws
        began, last = parse_time(ws.clock.first_action), parse_time(ws.clock.last)
        recorded = resumed.clock.minutes(began, last)  # what the record itself proves has elapsed
        seen: list[float] = []
        resumed.clock = _Spy(resumed.clock, seen)  # type: ignore[assignment]
        context = resumed._context(ws)
        assert len(seen) == 1
        elapsed = seen[0]  # the elapsed minutes the step machine was given
        assert elapsed >= recorded >= 0  # never less than the record proves (behind: it was about -3000)
        if offset < timedelta(0):
            assert elapsed < recorded + (datetime.now(UTC) - last).total_seconds() / 60 / w.time_scale + 1
            assert context.stop_limit is None  # the window goes on with the budget it has left
        else:  # ahead: 3,000 window minutes (30 real minutes at time scale 0.01) too many: it ends, early
            assert context.stop_limit is not None and context.stop_limit.action == "begin_restore"
    finally:
        if other is not None:
            other.close()
        close(w)


class _Spy:
    """The runner's budget clock, noting the elapsed minutes it is asked about."""

    def __init__(self, clock: object, seen: list[float]) -> None:
        self._clock, self._seen = clock, seen

    def __getattr__(self, name: str) -> object:
        return getattr(self._clock, name)

    def admitting(self, elapsed_min: float, stages: object = None) -> object:
        self._seen.append(elapsed_min)
        return self._clock.admitting(elapsed_min, stages)  # type: ignore[attr-defined]


def test_the_budget_never_reads_before_the_last_recorded_event() -> None:
    from runner.execution.clock import BudgetClock

    last = "2026-12-01T10:00:00.000000Z"
    behind = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)
    ahead = datetime(2026, 12, 1, 10, 30, tzinfo=UTC)
    assert BudgetClock.not_before(behind, last) == parse_time(last)
    assert BudgetClock.not_before(ahead, last) == ahead
    assert BudgetClock.not_before(behind, None) == behind
