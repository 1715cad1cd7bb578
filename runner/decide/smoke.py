"""The smoke rule's facts from a window's events: which probes ran, which failed, which did not run.

One reading for every reader: the decision input (``runner.decide.inputs``), the audit's
``smoke-before-decision`` invariant and the report's smoke section each word these facts
their own way, but none decides them differently. A near tie is a failure only when the
plan registers ``near_tie_rejects``. A probe the replies did not exercise (``not_exercised``:
a stop never generated) is no failure and does not hold a promotion back; one that ended
after the stop signal (``interrupted``) never counts: as if it had not run.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..events import payloads as pl
from ..events import read_payload

if TYPE_CHECKING:
    from ledger.event import Event

    from ..plan.model import Plan

__all__ = ["SmokeResult", "SmokeTally", "smoke_tally"]


@dataclass(frozen=True)
class SmokeResult:
    """One recorded ``smoke.result`` and whether the plan counts it as a failure."""

    event: Event
    recorded: pl.SmokeResult
    failed: bool

    @property
    def start(self) -> str:
        return self.recorded.start

    @property
    def probe(self) -> str:
        return self.recorded.probe


@dataclass(frozen=True)
class SmokeTally:
    """The smoke stage of a window as recorded."""

    results: tuple[SmokeResult, ...]
    missing: tuple[tuple[str, str], ...]  # (start, probe) the plan registers and no result records
    counts: bool  # a declared stage, or one that recorded results (older windows rebuild to their own input)

    @property
    def failed(self) -> tuple[SmokeResult, ...]:
        return tuple(r for r in self.results if r.failed)


def smoke_tally(plan: Plan, events: Iterable[Event]) -> SmokeTally:
    """The smoke facts of ``plan``'s window from ``events`` (its stream, in seq order)."""
    smoke = plan.smoke
    rejects = smoke is not None and smoke.near_tie_rejects
    results: list[SmokeResult] = []
    for event in events:
        if event.type != "smoke.result":
            continue
        recorded = read_payload(event, pl.SmokeResult)
        outcome = recorded.outcome
        results.append(SmokeResult(event, recorded, outcome == "fail" or (outcome == "near_tie" and rejects)))
    if smoke is None:
        return SmokeTally(tuple(results), (), False)
    ran = {(r.start, r.probe) for r in results if r.recorded.outcome != "interrupted"}
    missing = tuple((start, probe) for start in smoke.starts for probe in smoke.probes if (start, probe) not in ran)
    return SmokeTally(tuple(results), missing, smoke.declared or bool(results))
