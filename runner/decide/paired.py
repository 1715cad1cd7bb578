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
    "Verdict",
    "effect_verdict",
    "mean",
    "paired_interval",
    "relative_change",
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
    """``scipy.stats.t.ppf(1 - (1 - confidence) / 2, df)`` (two-sided Student-t quantile)."""
    from scipy.stats import t  # heavy import, paid once per process

    return float(t.ppf(1 - (1 - confidence) / 2, df))


def paired_interval(d: Sequence[float], confidence: float) -> Interval:
    """``point = mean(d)``, ``half = t * sd(d, ddof=1) / sqrt(n)``, interval ``point -/+ half``.

    ``n = len(d)`` must be at least 2. The operations, in this order:
    ``point = fsum(d) / n``; ``sd = sqrt(fsum((x - point) * (x - point) for x in d) / (n - 1))``;
    ``half = (t * sd) / sqrt(n)``; ``low = point - half``; ``high = point + half``.
    """
    n = len(d)
    if n < 2:
        raise ValueError("a paired interval needs at least two differences")
    point = math.fsum(d) / n
    sd = math.sqrt(math.fsum((x - point) * (x - point) for x in d) / (n - 1))
    half = t_quantile(confidence, n - 1) * sd / math.sqrt(n)
    return Interval(point, point - half, point + half)


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
