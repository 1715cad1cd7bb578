"""What a window's events say beside its decision: every gate result, missing counters, repeats.

The rule's report (``sections.py``) shows what the rule computed from its input; a window's
report also shows what the window's events say that the input does not: every gate result
recorded for the window, required or not, FAILs first in the eye; a banner when waves had
no server counters (so a win2 cell that shows few or no waves says why); and the plan's
registered repeats. Read from the events, never from a cache.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .document import Bullets, Para, Section, Table

if TYPE_CHECKING:
    from ledger.event import Event

    from ..plan.model import Plan

__all__ = ["WindowEvidence", "window_evidence"]


@dataclass(frozen=True)
class WindowEvidence:
    gates: tuple[tuple[str, ...], ...]   # gate, start, verdict, required, seq, summary
    banners: tuple[str, ...]
    facts: tuple[tuple[str, str], ...]   # plan facts the rule's input does not carry

    def head_sections(self) -> list[Section]:
        """Banners, shown right under the decision."""
        if not self.banners:
            return []
        return [Section("Attention", (Bullets(self.banners),))]

    def sections(self) -> list[Section]:
        out = [Section("Gates (every result recorded for the window)", (
            Table(("gate", "start", "verdict", "required", "seq", "summary"), self.gates),
            Para("Every gate.result of the window in seq order, required or not: a later PASS does not hide an "
                 "earlier FAIL.", "note"),
        ))]
        if self.facts:
            out.append(Section("Registered plan", (Table(("plan field", "value"), self.facts),)))
        return out


def _gate_rows(plan: Plan, events: Iterable[Event]) -> tuple[tuple[str, ...], ...]:
    required = set(plan.required_gates)
    rows = []
    for event in events:
        if event.type != "gate.result":
            continue
        p = event.payload
        rows.append((str(p.get("gate")), str(p.get("start") or "-"), str(p.get("verdict")),
                     "yes" if p.get("gate") in required else "no", str(event.seq), _clip(str(p.get("summary") or ""))))
    return tuple(rows)


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _counter_banners(events: Sequence[Event]) -> list[str]:
    waves = [e.payload for e in events if e.type == "wave.measured"]
    if not waves:
        return ["no wave was measured"]
    without = [w for w in waves if w.get("counters_missing")]
    if not without:
        return []
    reasons = sorted({str(reason) for w in without for reason in w.get("counters_missing") or ()})
    shown = "; ".join(reasons[:3]) + (f"; and {len(reasons) - 3} more" if len(reasons) > 3 else "")
    return [f"server counters unavailable for {len(without)} of {len(waves)} waves ({shown}): rules that decide "
            "on engine counters could not count those waves"]


def _gate_banners(rows: Sequence[tuple[str, ...]]) -> list[str]:
    failed = [r for r in rows if r[2] == "FAIL"]
    if not failed:
        return []
    names = ", ".join(f"{r[0]}{'' if r[1] == '-' else ' ' + r[1]} (seq {r[4]})" for r in failed)
    return [f"{len(failed)} gate result(s) FAILed: {names}"]


def window_evidence(plan: Plan, events: Sequence[Event]) -> WindowEvidence:
    """The evidence section of ``plan``'s window from its events (``events``: the window's stream)."""
    gates = _gate_rows(plan, events)
    facts: list[tuple[str, str]] = [
        ("repeats", str(plan.measurement.repeats)),
        ("production clock cap", "not applicable (no GPU clocks)" if plan.production_clock_cap_mhz is None
         else f"{plan.production_clock_cap_mhz} MHz"),
        ("arms", "; ".join(f"{a.role} {a.name}: " + ("no speculative decoding" if a.speculative is None
                                                     else "speculative") for a in plan.arms)),
        ("cells", ", ".join(f"{c.name} ({c.context}, {c.tokens} tokens, concurrency {c.concurrency})"
                            for c in plan.cells)),
    ]
    return WindowEvidence(gates, tuple(_gate_banners(gates) + _counter_banners(events)), tuple(facts))

