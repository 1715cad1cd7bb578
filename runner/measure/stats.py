"""Percentiles (pure).

Percentiles are numpy's default (linear interpolation), the method ``vllm bench serve``
uses, so the same samples give the same p50/p95/p99 in both tools.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy

__all__ = ["percentile", "percentiles"]


def percentile(values: Sequence[float], q: float) -> float:
    return float(numpy.percentile(numpy.asarray(values, dtype=float), q))


def percentiles(values: Sequence[float], qs: Sequence[int] = (50, 95, 99)) -> dict[str, float] | None:
    """``{"p50": .., "p95": .., "p99": ..}`` or ``None`` without samples."""
    if not values:
        return None
    points = numpy.percentile(numpy.asarray(values, dtype=float), list(qs))
    return {f"p{q}": float(v) for q, v in zip(qs, points, strict=True)}
