"""The budget gate (``docs/gates.md``): does the registered stage estimate fit the registered limits?

Pure arithmetic on ``Plan.budget``, exact (stage minutes are read as decimals and summed
as fractions of a second, then rounded half-up to 0.1 min for display), so the seeds'
tables come out digit for digit:

* elapsed time starts at the window's first host action (drain) and runs through the
  stages in order; **measurement end** is the end of the last ``measure`` stage, the
  **total** the end of the last stage;
* a ``reserve = true`` stage (seed 000's pair reserve) lasts ``pair_reserve_s`` in the
  estimate row and ``dry_bound_s`` in the dry-bound row; when a dry bound is declared
  the verdict is taken on it (seed 000: production-policy refuses at 85.2 min);
* checks: total <= hard ceiling; measurement end <= measurement-end limit; restore
  stages fit the restore reserve; stop-admitting time + restore reserve <= hard
  ceiling; every start's stages <= the per-block limit (when registered);
* the largest reserve that still fits (``fits while the measured pair reserve <= N s``)
  is the smaller slack of the two limits, in whole seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from ..plan.model import Budget
from ..vocabulary import GateVerdict
from .gate import Finding

if TYPE_CHECKING:
    from ledger.store import Ledger

    from ..plan.model import Plan

__all__ = ["BudgetCheck", "BudgetGate", "BudgetReport", "BudgetRow", "budget_report", "minutes_display"]

Verdict = GateVerdict


def _seconds(minutes: float) -> Fraction:
    return Fraction(Decimal(repr(minutes))) * 60


def _exact(seconds: float) -> Fraction:
    return Fraction(Decimal(repr(seconds)))


def minutes_display(seconds: Fraction) -> str:
    """Minutes with one decimal, rounded half up (80.05 -> 80.1)."""
    value = Decimal(seconds.numerator) / Decimal(seconds.denominator) / 60
    return str(value.quantize(Decimal("0.1"), rounding=ROUND_HALF_UP))


def _minutes(seconds: Fraction) -> float:
    return round(float(seconds) / 60, 4)


@dataclass(frozen=True)
class BudgetRow:
    """Total and measurement end for one assumption about the reserve."""

    label: str
    reserve_s: float | None
    total_s: Fraction
    measurement_end_s: Fraction
    fits: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "label": self.label, "reserve_s": self.reserve_s,
            "total_min": _minutes(self.total_s), "measurement_end_min": _minutes(self.measurement_end_s),
            "total": minutes_display(self.total_s), "measurement_end": minutes_display(self.measurement_end_s),
            "fits": self.fits,
        }


@dataclass(frozen=True)
class BudgetCheck:
    name: str
    ok: bool
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "detail": self.detail}


@dataclass(frozen=True)
class BudgetReport:
    verdict: Verdict
    rows: tuple[BudgetRow, ...]
    deciding: str
    checks: tuple[BudgetCheck, ...]
    hard_ceiling_min: float
    measurement_end_limit_min: float
    stop_admitting_min: float
    restore_reserve_min: float
    per_block_limit_min: float | None
    per_block_min: dict[str, float]
    largest_reserve_s: int | None
    slack_min: float
    summary: str
    notes: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "summary": self.summary,
            "rows": [row.to_json() for row in self.rows],
            "deciding_row": self.deciding,
            "checks": [check.to_json() for check in self.checks],
            "hard_ceiling_min": self.hard_ceiling_min,
            "measurement_end_limit_min": self.measurement_end_limit_min,
            "stop_admitting_min": self.stop_admitting_min,
            "restore_reserve_min": self.restore_reserve_min,
            "per_block_limit_min": self.per_block_limit_min,
            "per_block_min": self.per_block_min,
            "largest_reserve_s": self.largest_reserve_s,
            "slack_min": self.slack_min,
            "notes": list(self.notes),
        }


def _row(budget: Budget, label: str, reserve_s: float | None) -> BudgetRow:
    elapsed = Fraction(0)
    measurement_end = Fraction(0)
    for stage in budget.stages:
        if stage.reserve:
            elapsed += _exact(reserve_s or 0.0)
        else:
            elapsed += _seconds(stage.minutes or 0.0)
        if stage.kind in ("measure", "smoke"):   # the smoke stage of its own runs before measurement ends
            measurement_end = elapsed
    fits = (elapsed <= _seconds(budget.hard_ceiling_min)
            and measurement_end <= _seconds(budget.measurement_end_limit_min))
    return BudgetRow(label, reserve_s, elapsed, measurement_end, fits)


def budget_report(budget: Budget, *, measured_reserve_s: float | None = None) -> BudgetReport:
    """The budget table, its checks and the verdict for a registered budget.

    ``measured_reserve_s`` (a pair reserve measured since registration) adds a row and
    decides instead of the dry bound: seed 000's "fits while the measured pair reserve
    <= 588 s".
    """
    has_reserve = any(stage.reserve for stage in budget.stages)
    rows: list[BudgetRow] = []
    if has_reserve and budget.pair_reserve_s is not None:
        rows.append(_row(budget, f"{budget.pair_reserve_s:g} s pair reserve", budget.pair_reserve_s))
        if budget.dry_bound_s is not None:
            rows.append(_row(budget, f"{budget.dry_bound_s:g} s dry bound", budget.dry_bound_s))
        if measured_reserve_s is not None:
            rows.append(_row(budget, f"{measured_reserve_s:g} s measured pair reserve", measured_reserve_s))
    else:
        rows.append(_row(budget, "estimate", None))
    deciding = rows[-1]
    hard = _seconds(budget.hard_ceiling_min)
    mend_limit = _seconds(budget.measurement_end_limit_min)
    reserve = _seconds(budget.restore_reserve_min)
    checks = [
        BudgetCheck("total", deciding.total_s <= hard,
                    f"total {minutes_display(deciding.total_s)} min ({deciding.label}) "
                    f"<= hard ceiling {budget.hard_ceiling_min:g} min"),
        BudgetCheck("measurement_end", deciding.measurement_end_s <= mend_limit,
                    f"measurement end {minutes_display(deciding.measurement_end_s)} min ({deciding.label}) "
                    f"<= limit {budget.measurement_end_limit_min:g} min"),
    ]
    restore_s = sum((_seconds(s.minutes or 0.0) for s in budget.stages if s.kind == "restore"), Fraction(0))
    checks.append(BudgetCheck("restore_reserve", restore_s <= reserve,
                              f"restore stages {minutes_display(restore_s)} min <= restore reserve "
                              f"{budget.restore_reserve_min:g} min"))
    stop = _seconds(budget.stop_admitting_min)
    checks.append(BudgetCheck("stop_admitting", stop + reserve <= hard,
                              f"stop admitting at {budget.stop_admitting_min:g} min + restore reserve "
                              f"{budget.restore_reserve_min:g} min <= hard ceiling {budget.hard_ceiling_min:g} min"))
    per_block: dict[str, Fraction] = {}
    for stage in budget.stages:
        if stage.start is not None:
            per_block[stage.start] = per_block.get(stage.start, Fraction(0)) + _seconds(stage.minutes or 0.0)
    if budget.per_block_limit_min is not None:
        limit = _seconds(budget.per_block_limit_min)
        over = [f"{start} {minutes_display(s)} min" for start, s in per_block.items() if s > limit]
        checks.append(BudgetCheck("per_block", not over,
                                  f"every block <= {budget.per_block_limit_min:g} min"
                                  + (f"; over: {', '.join(over)}" if over else "")))
    largest: int | None = None
    summary_tail = ""
    if has_reserve:
        # The reserve enters both sums once: its largest value is the smaller slack.
        base_total = deciding.total_s - _exact(deciding.reserve_s or 0.0)
        base_mend = deciding.measurement_end_s - _exact(deciding.reserve_s or 0.0)
        room = min(hard - base_total, mend_limit - base_mend)
        largest = math.floor(room)
        summary_tail = f"; fits while the measured pair reserve <= {largest} s"
    slack = min(hard - deciding.total_s, mend_limit - deciding.measurement_end_s)
    notes = []
    last_block_end = Fraction(0)
    elapsed = Fraction(0)
    for stage in budget.stages:
        elapsed += _exact(deciding.reserve_s or 0.0) if stage.reserve else _seconds(stage.minutes or 0.0)
        if stage.start is not None:
            last_block_end = elapsed
    if last_block_end > stop:
        admitted = ("are admitted only if no stage has overrun by then" if budget.stop_admitting_if_overrun
                    else "would not be admitted")
        notes.append(f"the estimated blocks end at {minutes_display(last_block_end)} min, after stop admitting "
                     f"at {budget.stop_admitting_min:g} min: requests due after it {admitted}")
    ok = all(check.ok for check in checks)
    verdict: Verdict = "PASS" if ok else "FAIL"
    first = rows[0]
    head = (f"total {minutes_display(first.total_s)} min, "
            f"measurement ends {minutes_display(first.measurement_end_s)} min ({first.label})")
    for row in rows[1:]:
        head += f"; {minutes_display(row.total_s)} min with the {row.label}"
    limits = (f"; hard {budget.hard_ceiling_min:g} min, stop admitting at {budget.stop_admitting_min:g} min, "
              f"restore reserve {budget.restore_reserve_min:g} min")
    summary = f"{verdict}{'' if ok else ' (refuses)'}: {head}{summary_tail}{limits}"
    return BudgetReport(
        verdict=verdict, rows=tuple(rows), deciding=deciding.label, checks=tuple(checks),
        hard_ceiling_min=budget.hard_ceiling_min, measurement_end_limit_min=budget.measurement_end_limit_min,
        stop_admitting_min=budget.stop_admitting_min, restore_reserve_min=budget.restore_reserve_min,
        per_block_limit_min=budget.per_block_limit_min,
        per_block_min={start: _minutes(s) for start, s in per_block.items()},
        largest_reserve_s=largest, slack_min=_minutes(slack), summary=summary, notes=tuple(notes),
    )


@dataclass(frozen=True)
class BudgetGate:
    """The gate: the plan's stage estimates against its limits (``pair_reserve_s``, a measured pair reserve,
    decides instead of the dry bound when given)."""

    pair_reserve_s: float | None = None

    def check(self, ledger: Ledger, plan: Plan) -> Finding:
        report = budget_report(plan.budget, measured_reserve_s=self.pair_reserve_s)
        return Finding("budget", report.verdict, report.summary, report.to_json(), commit=plan.commit)
