"""The MDE of simulated windows and the search for the repeats / families that bring it down to an effect.

``mde(thresholds, target)``: the ``ceil(target N)``-th smallest per-window WIN threshold,
the smallest true effect decided WIN (CANDIDATE) in at least ``target`` of the windows.

``fewest(size, ok, low, cap)`` (model 2): the fewest repeats (win2-v1) or source families
(pp3-v1) whose MDE is at most the effect. When the plan's own size reaches it, every size
below it is tried from the smallest up (so the answer is the fewest, never the plan's own
count by default); when it does not, sizes double up to the cap, then bisection between
the last failure and the first success (the MDE falls with more repeats or families as the
paired t and the bootstrap narrow). Model 1 searched upward only (``power_v1``). Pure.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["MAX_FAMILIES", "MAX_REPEATS", "MIN_FAMILIES", "MIN_REPEATS", "SEARCH_WINDOWS", "SEARCH_WINDOWS_WIN2",
           "fewest", "mde", "probabilities"]

MAX_REPEATS = 100      # a plan's repeats are at most 100
MIN_REPEATS = 2        # the paired t needs two differences
MAX_FAMILIES = 16      # pp3-v1 pairs are searched up to this many source families
MIN_FAMILIES = 2       # the source-cluster bootstrap of one family resamples nothing
SEARCH_WINDOWS = 2000  # pp3-v1 windows simulated per step of the pairs search (each runs the bootstrap)
# win2-v1 windows simulated per step of the repeats search: the default window count (a step costs
# windows x repeats x cells draws, up to 100 repeats; model 1 held them all, 8 MB a cell at 10,000 windows,
# where the 1,000,000 windows a plan may ask for would need 800 MB; model 2 draws 4,096 windows at a time)
SEARCH_WINDOWS_WIN2 = 10_000


def mde(thresholds: Any, target: float) -> float | None:
    """The smallest effect decided positive in at least ``target`` of the windows (``None``: none is)."""
    import numpy as np

    ordered = np.sort(thresholds)
    k = max(1, math.ceil(target * len(ordered) - 1e-9))
    value = float(ordered[k - 1])
    return None if not math.isfinite(value) else max(0.0, value)


def probabilities(counts: Mapping[str, int], n: int) -> dict[str, Any]:
    return {k: {"p": v / n, "mc_error": math.sqrt((v / n) * (1 - v / n) / n)} for k, v in counts.items()}


def fewest(size: int, ok: Callable[[int], bool], low: int, cap: int) -> int | None:
    """The fewest sizes in ``[low, cap]`` with ``ok`` (``None``: none up to ``cap``), from the plan's ``size``."""
    if ok(size):
        for smaller in range(low, size):
            if ok(smaller):
                return smaller
        return size
    failed, step = size, min(cap, size * 2)
    while step > failed:
        if ok(step):
            while step - failed > 1:           # bisection between the last failure and the first success
                mid = (failed + step) // 2
                if ok(mid):
                    step = mid
                else:
                    failed = mid
            return step
        failed, step = step, min(cap, step * 2)
    return None
