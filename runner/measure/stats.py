"""Percentiles (pure), in memory or over samples too many to hold.

Percentiles are numpy's default (linear interpolation), the method ``vllm bench serve``
uses, so the same samples give the same p50/p95/p99 in both tools.

:func:`streamed_percentiles` gives the same figures for samples read back in chunks
(from a spool file): it finds the order statistics the interpolation needs exactly, by
refining a histogram over the chunks until the wanted ranks sit in a range small enough
to sort, then interpolates as numpy does. Memory is bounded by the chunk size and the
gather limit, not by the number of samples.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence

import numpy

__all__ = ["interpolate", "order_statistics", "percentile", "percentiles", "streamed_percentiles"]

_BINS = 4096
_GATHER = 1 << 20      # a range holding at most this many samples is sorted in memory
_MAX_STEPS = 64


def percentile(values: Sequence[float], q: float) -> float:
    return float(numpy.percentile(numpy.asarray(values, dtype=float), q))


def percentiles(values: Sequence[float] | numpy.ndarray,
                qs: Sequence[int] = (50, 95, 99)) -> dict[str, float] | None:
    """``{"p50": .., "p95": .., "p99": ..}`` or ``None`` without samples."""
    if not len(values):
        return None
    points = numpy.percentile(numpy.asarray(values, dtype=float), list(qs))
    return {f"p{q}": float(v) for q, v in zip(qs, points, strict=True)}


def _ranks(n: int, q: float) -> tuple[int, int, numpy.float64]:
    """numpy's linear method: the two order statistics (0-based) around the q-th percentile and the weight."""
    virtual = numpy.float64(n - 1) * numpy.true_divide(numpy.float64(q), 100)
    below = numpy.floor(virtual)
    if virtual >= n - 1:
        return n - 1, n - 1, virtual - below
    if virtual < 0:
        return 0, 0, virtual - below
    return int(below), int(below) + 1, virtual - below


def interpolate(a: float, b: float, gamma: numpy.float64) -> float:
    """numpy's ``_lerp``: a + (b - a) * gamma, computed from b's side when gamma >= 0.5."""
    lo, hi = numpy.float64(a), numpy.float64(b)
    diff = hi - lo
    return float(hi - diff * (1 - gamma)) if gamma >= 0.5 else float(lo + diff * gamma)


Chunks = Callable[[], Iterator[numpy.ndarray]]


def order_statistics(chunks: Chunks, n: int, ranks: Sequence[int], *, bins: int = _BINS,
                     gather: int = _GATHER) -> dict[int, float]:
    """The ``ranks``-th smallest samples (0-based) of the ``n`` finite samples ``chunks()`` yields, exactly.

    Each pass over the chunks either sorts the samples of a rank's current range (when
    at most ``gather`` are left in it) or splits the range into ``bins`` and keeps the
    bin holding the rank. Ranges are half-open ``[a, b)`` compared against the same
    float edges in every pass, so the counts stay consistent.
    """
    if n <= 0:
        return {}
    low, high = math.inf, -math.inf
    for chunk in chunks():
        if len(chunk):
            low, high = min(low, float(chunk.min())), max(high, float(chunk.max()))
    top = float(numpy.nextafter(high, math.inf))
    # rank -> [a, b, below (samples < a), count (samples in [a, b))]
    state: dict[int, list[float]] = {k: [low, top, 0, n] for k in sorted(set(ranks))}
    result: dict[int, float] = {}
    for _step in range(_MAX_STEPS + 1):
        for k, (a, b, _below, _count) in list(state.items()):
            if float(numpy.nextafter(a, math.inf)) >= b:   # one representable value left
                result[k] = a
                del state[k]
        if not state:
            break
        sort_now = {k for k, s in state.items()
                    if s[3] <= gather or _step == _MAX_STEPS or not math.isfinite(s[1] - s[0])}
        edges = {k: numpy.linspace(s[0], s[1], bins + 1) for k, s in state.items() if k not in sort_now}
        counts = {k: numpy.zeros(bins, dtype=numpy.int64) for k in edges}
        kept: dict[int, list[numpy.ndarray]] = {k: [] for k in sort_now}
        for chunk in chunks():
            for k, s in state.items():
                inside = chunk[(chunk >= s[0]) & (chunk < s[1])]
                if k in sort_now:
                    kept[k].append(inside)
                elif len(inside):
                    index = numpy.searchsorted(edges[k], inside, side="right") - 1
                    counts[k] += numpy.bincount(index, minlength=bins)[:bins]
        for k in list(state):
            a, b, below, _count = state[k]
            if k in sort_now:
                values = numpy.sort(numpy.concatenate(kept[k]) if kept[k] else numpy.empty(0))
                result[k] = float(values[k - int(below)])
                del state[k]
                continue
            cumulative = numpy.cumsum(counts[k])
            j = min(int(numpy.searchsorted(cumulative, k - int(below), side="right")), bins - 1)
            before = int(cumulative[j - 1]) if j > 0 else 0
            state[k] = [float(edges[k][j]), float(edges[k][j + 1]), below + before, int(counts[k][j])]
    return result


def streamed_percentiles(chunks: Chunks, n: int, qs: Sequence[int] = (50, 95, 99)) -> dict[str, float] | None:
    """:func:`percentiles` of samples read back in chunks (numpy's linear method, exact order statistics)."""
    if n <= 0:
        return None
    wanted = {q: _ranks(n, q) for q in qs}
    values = order_statistics(chunks, n, [r for lo, hi, _ in wanted.values() for r in (lo, hi)])
    return {f"p{q}": interpolate(values[lo], values[hi], gamma) for q, (lo, hi, gamma) in wanted.items()}
