"""Paired-difference statistics shared by the rules: mean, Student-t interval, verdicts.

Sums of floats are correctly rounded (``math.fsum``), so they do not depend on the order of
their terms and any reimplementation with an exact sum gets the same bits.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ..vocabulary import EffectVerdict, GuardVerdict

__all__ = [
    "Direction",
    "GuardVerdict",
    "Interval",
    "StepTest",
    "Verdict",
    "effect_verdict",
    "mean",
    "paired_interval",
    "paired_p_value",
    "relative_change",
    "step_tests",
    "t_quantile",
]

Verdict = EffectVerdict
Direction = Literal["higher", "lower"]


@dataclass(frozen=True)
class Interval:
    """Point estimate (mean of the paired differences) and its two-sided interval."""

    point: float
    low: float
    high: float


def mean(values: Sequence[float]) -> float:
    """``fsum(values) / len(values)``."""
    return math.fsum(values) / len(values)


def relative_change(candidate: float, control: float) -> float | None:
    """``candidate / control - 1``; ``None`` when the control is zero."""
    if control == 0:
        return None
    return candidate / control - 1


@functools.lru_cache(maxsize=64)
def t_quantile(confidence: float, df: int) -> float:
    """``scipy.stats.t.ppf(1 - (1 - confidence) / 2, df)`` (two-sided Student-t quantile), computed by the
    function that one calls (``scipy.special.stdtrit``, the same bits): ``scipy.special`` imports in a third
    of ``scipy.stats``'s time, which a window's decision step paid (about 0.5-0.9 s of runner time)."""
    from scipy.special import stdtrit  # paid once per process

    return float(stdtrit(df, 1 - (1 - confidence) / 2))


def paired_interval(d: Sequence[float], confidence: float) -> Interval:
    """``point = mean(d)``, ``half = t * sd(d, ddof=1) / sqrt(n)``, interval ``point -/+ half``.

    ``n = len(d)`` must be at least 2. The operations, in this order:
    ``point = fsum(d) / n``; ``sd = sqrt(fsum((x - point) * (x - point) for x in d) / (n - 1))``;
    ``half = (t * sd) / sqrt(n)``; ``low = point - half``; ``high = point + half``.
    """
    n = len(d)
    point, sd = _point_sd(d)
    half = t_quantile(confidence, n - 1) * sd / math.sqrt(n)
    return Interval(point, point - half, point + half)


def _point_sd(d: Sequence[float]) -> tuple[float, float]:
    """``fsum(d) / n`` and ``sqrt(fsum((x - point)^2) / (n - 1))``, as ``paired_interval`` computes them."""
    n = len(d)
    if n < 2:
        raise ValueError("a paired interval needs at least two differences")
    point = math.fsum(d) / n
    return point, math.sqrt(math.fsum((x - point) * (x - point) for x in d) / (n - 1))


def paired_p_value(d: Sequence[float]) -> float:
    """Two-sided p-value of the paired t statistic the interval uses: ``2 * t.sf(|t|, n - 1)``.

    ``t = point / (sd / sqrt(n))`` with ``point`` and ``sd`` exactly as ``paired_interval``
    computes them. No spread (``sd == 0``): p is 0 for a non-zero point, 1 for a zero one.
    """
    point, sd = _point_sd(d)
    if sd == 0:
        return 1.0 if point == 0 else 0.0
    from scipy.special import stdtr  # what scipy.stats.t.sf computes: t.sf(x, df) = stdtr(df, -x)

    stat = point / (sd / math.sqrt(len(d)))
    return float(2 * stdtr(len(d) - 1, -abs(stat)))


@dataclass(frozen=True)
class StepTest:
    """One hypothesis of a corrected family: its rank by p (1 = smallest), threshold and outcome."""

    rank: int
    threshold: float
    passed: bool


def step_tests(p_values: Sequence[float], alpha: float, correction: Literal["holm", "bonferroni"]) -> list[StepTest]:
    """Holm's step-down or Bonferroni over ``p_values`` at family-wise level ``alpha``, in input order.

    The p-values are ranked ascending (ties keep input order). Holm: the k-th smallest of m
    passes when ``p < alpha / (m - k + 1)`` and every smaller-ranked one passed (the first
    failure stops the step-down). Bonferroni: each passes when ``p < alpha / m``.
    Comparisons are strict, like every comparison of the rules.
    """
    m = len(p_values)
    order = sorted(range(m), key=lambda i: (p_values[i], i))
    out: dict[int, StepTest] = {}
    going = True
    for rank, i in enumerate(order, start=1):
        threshold = alpha / (m - rank + 1) if correction == "holm" else alpha / m
        passed = p_values[i] < threshold and (going or correction != "holm")
        going = going and passed
        out[i] = StepTest(rank, threshold, passed)
    return [out[i] for i in range(m)]


def effect_verdict(interval: Interval, bar: float, direction: Direction) -> Verdict:
    """WIN / LOSS / NO_CHANGE of a paired interval against the bar.

    Higher is better: WIN if ``point > bar`` and ``low > 0``; LOSS if ``point < -bar`` and
    ``high < 0``. Lower is better: the mirror image (WIN if ``point < -bar`` and ``high < 0``).
    """
    up = interval.point > bar and interval.low > 0
    down = interval.point < -bar and interval.high < 0
    if direction == "higher":
        return "WIN" if up else "LOSS" if down else "NO_CHANGE"
    return "WIN" if down else "LOSS" if up else "NO_CHANGE"
