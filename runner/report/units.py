"""Numbers as a reader reads them: fixed notation (never ``2.691e+04``), a few significant digits, and each
metric in its unit (TTFT in milliseconds, rates in tokens per second)."""

from __future__ import annotations

import math
from collections.abc import Mapping

__all__ = ["METRIC_UNITS", "fixed", "metric_label", "metric_value"]

METRIC_UNITS: Mapping[str, tuple[str, float]] = {
    "pooled_rate_tps": ("tok/s", 1.0),
    "decode_tps": ("tok/s", 1.0),
    "accepted_per_round": ("tokens/round", 1.0),
    "ms_per_round": ("ms/round", 1.0),
    "ttft_s": ("ms", 1000.0),
}
"""A metric's unit, and the factor from its recorded value (``ttft_s`` is recorded in seconds, shown in ms)."""


def fixed(value: float, digits: int = 4) -> str:
    """``value`` in fixed notation with about ``digits`` significant digits, trailing zeros dropped as ``%g``
    drops them: 27910 (``%.4g``: 2.791e+04), 1.601, 0.09665, 31.8, 100."""
    if not math.isfinite(value):
        return str(value)
    if value == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(value)))
    decimals = min(max(digits - 1 - magnitude, 0), 12)
    text = f"{value:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text  # as %g would, without its exponent


def metric_label(name: str) -> str:
    """``ttft_s`` -> ``ttft_s (ms)``: the name as recorded and the unit it is shown in."""
    unit = METRIC_UNITS.get(name)
    return name if unit is None else f"{name} ({unit[0]})"


def metric_value(name: str, value: float | None) -> str:
    """A metric's value in its display unit (``-`` when missing)."""
    if value is None:
        return "-"
    factor = METRIC_UNITS.get(name, ("", 1.0))[1]
    return fixed(value * factor, 3 if factor != 1.0 else 4)
