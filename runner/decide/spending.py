"""Error spending over looks (``docs/promotion.md``, looks): how a false-promotion budget is spent window by window.

A candidate measured window after window is looked at once per window. The promotion
policy registers a total false-promotion rate ``alpha`` and a fixed maximum number of
looks ``K``; look ``i`` (1-based) may spend

    a_i = f(i / K) - f((i - 1) / K)          (a_i = 0 past look K)

of it, ``f`` the spending function (``f(0) = 0``, ``f(1) = alpha``, non-decreasing):

- ``bonferroni``: ``f(t) = alpha t``, the same ``alpha / K`` at every look;
- ``pocock``: the Lan-DeMets Pocock-type function ``f(t) = alpha ln(1 + (e - 1) t)``,
  more at the first looks;
- ``obrien-fleming``: the Lan-DeMets O'Brien-Fleming-type function
  ``f(t) = 2 - 2 Phi(z_(1 - alpha / 2) / sqrt(t))``, almost nothing early.

Each window is decided on its own data only (win2-v1 pools nothing across windows), so
a look passes at level ``a_i`` when its one-sided test at ``a_i`` does, and by the union
bound the chance that any of the ``K`` looks of a candidate with no effect passes is at
most ``sum a_i = alpha``, whichever look is presented and however the operator chose to
stop. For win2-v1 the test of a look is its recorded paired differences ``d`` of every
decision cell: the two-sided interval at confidence ``1 - 2 a_i`` must lie above 0 (its
low end is the one-sided test at ``a_i``) and the point above the bar, as the rule's own
WIN asks at 95 %.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .paired import paired_interval

__all__ = ["SPENDINGS", "LookBudget", "LookTest", "look_test"]

SPENDINGS = ("bonferroni", "pocock", "obrien-fleming")


def _normal_cdf(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def _normal_quantile(p: float) -> float:
    from scipy.special import ndtri  # what scipy.stats.norm.ppf computes, without importing scipy.stats

    return float(ndtri(p))


@dataclass(frozen=True)
class LookBudget:
    """A registered error budget: ``alpha`` in total over at most ``max_looks`` looks, spent by ``spending``."""

    alpha: float
    max_looks: int
    spending: str = "bonferroni"

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha {self.alpha} is not in (0, 1)")
        if self.max_looks < 1:
            raise ValueError(f"max_looks {self.max_looks} is not at least 1")
        if self.spending not in SPENDINGS:
            raise ValueError(f"spending {self.spending!r} is not one of {', '.join(SPENDINGS)}")

    def spent(self, looks: int) -> float:
        """``f(looks / K)``: the budget spent by the first ``looks`` looks (all of it from look ``K`` on)."""
        if looks <= 0:
            return 0.0
        t = min(1.0, looks / self.max_looks)
        if t >= 1.0:
            return self.alpha
        if self.spending == "bonferroni":
            return self.alpha * t
        if self.spending == "pocock":
            return self.alpha * math.log(1.0 + (math.e - 1.0) * t)
        z = _normal_quantile(1.0 - self.alpha / 2.0)
        return 2.0 - 2.0 * _normal_cdf(z / math.sqrt(t))

    def at(self, look: int) -> float:
        """``a_i``: what look ``look`` (1-based) may spend; 0 past the maximum."""
        if look < 1 or look > self.max_looks:
            return 0.0
        return max(0.0, self.spent(look) - self.spent(look - 1))

    def confidence(self, look: int) -> float | None:
        """The two-sided confidence whose low end is the one-sided test at ``a_i`` (``None``: nothing left)."""
        a = self.at(look)
        return None if a <= 0.0 else 1.0 - 2.0 * a

    def to_json(self) -> dict[str, Any]:
        return {"alpha": self.alpha, "max_looks": self.max_looks, "spending": self.spending}


@dataclass(frozen=True)
class LookTest:
    """A look's test at its spent level: per decision cell the interval, and whether the look passes."""

    look: int
    alpha: float                 # a_i
    confidence: float | None     # 1 - 2 a_i
    passes: bool
    cells: Mapping[str, Mapping[str, float | None]]
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"look": self.look, "alpha": self.alpha, "confidence": self.confidence, "passes": self.passes,
                "cells": {c: dict(v) for c, v in self.cells.items()}, "reason": self.reason}


def look_test(budget: LookBudget, look: int, differences: Mapping[str, Sequence[float | None] | None],
              bar: float) -> LookTest:
    """Does look ``look`` pass its spent level? ``differences``: per decision cell the recorded ``d`` of the primary
    (higher is better), ``bar`` the rule's. Every cell's interval at ``1 - 2 a_i`` must lie above 0, its point above
    ``bar``."""
    a = budget.at(look)
    confidence = budget.confidence(look)
    if confidence is None:
        return LookTest(look, 0.0, None, False, {}, f"look {look} is past the policy's {budget.max_looks}: "
                                                     "no budget left")
    cells: dict[str, dict[str, float | None]] = {}
    failing: list[str] = []
    for cell, d in differences.items():
        values = [x for x in d or () if isinstance(x, int | float) and math.isfinite(x)]
        if d is None or len(values) != len(d) or len(values) < 2:
            cells[cell] = {"point": None, "low": None, "high": None}
            failing.append(f"{cell}: no complete paired differences recorded")
            continue
        interval = paired_interval(values, confidence)
        cells[cell] = {"point": interval.point, "low": interval.low, "high": interval.high}
        if not (interval.point > bar and interval.low > 0):
            failing.append(f"{cell}: point {interval.point:+.2%}, {confidence:.4%} interval "
                           f"[{interval.low:+.2%}, {interval.high:+.2%}] (needs point above {bar:.2%}, "
                           "low end above 0)")
    if not cells:
        failing.append("no decision cell")
    passes = not failing
    reason = (f"every decision cell's {confidence:.4%} interval lies above 0 with its point above {bar:.2%}"
              if passes else "; ".join(failing))
    return LookTest(look, a, confidence, passes, cells, reason)
