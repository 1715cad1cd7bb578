"""The false-promotion rate over looks: many simulated chains of win2-v1 windows (power model 2), vectorised.

A chain is ``looks`` windows of one candidate, each drawn by ``Win2Sim`` (``power_win2``)
and decided as ``win2.decide`` decides it. The candidate is promoted when any look passes
the promotion gate's looks check (``spending.look_test``: the recorded WIN, and every
decision cell's interval at the look's spent confidence above 0 with its point above the
bar): the operator may present whichever look passed. Beside it, the rate without the
budget: any look whose own WIN (at the rule's 95 %) would have been presented.

``Win2Sim.cell_statistics`` gives per window the point and the interval at the rule's
confidence; the interval at another confidence has the same point and its half-width
scaled by the ratio of the two t quantiles (the same ``sd / sqrt(n)``). Pure: no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .paired import t_quantile
from .spending import LookBudget

if TYPE_CHECKING:
    from .noise import Win2Scenario
    from .power_sim import Win2Design

__all__ = ["ChainStudy", "chain_study"]


@dataclass(frozen=True)
class ChainStudy:
    """Over ``chains`` simulated chains of ``looks`` windows at true effect ``effect``."""

    chains: int
    looks: int
    effect: float
    promoted: float              # the share promoted under the budget
    promoted_error: float        # its Monte Carlo standard error
    naive: float                 # the share with a WIN at some look (no budget: the receipt of that WIN)
    naive_error: float
    per_look_win: float          # one window's WIN rate (the rule at 95 %)
    first_promotion: tuple[int, ...]   # per look, the chains first promoted at it

    def to_json(self) -> dict[str, Any]:
        return {"chains": self.chains, "looks": self.looks, "effect": self.effect, "promoted": self.promoted,
                "promoted_error": self.promoted_error, "naive": self.naive, "naive_error": self.naive_error,
                "per_look_win": self.per_look_win, "first_promotion": list(self.first_promotion)}


def _error(p: float, n: int) -> float:
    return math.sqrt(max(p * (1 - p), 0.0) / n) if n else 0.0


def chain_study(design: Win2Design, scenario: Win2Scenario, budget: LookBudget, *, looks: int, chains: int,
                effect: float = 0.0, seed: int = 0) -> ChainStudy:
    """Simulate ``chains`` chains of ``looks`` windows each (window ``c * looks + i`` is look ``i + 1`` of chain
    ``c``) and count the promotions under ``budget`` and without it."""
    import numpy as np

    from .power_win2 import Win2Sim

    p = design.params
    sim = Win2Sim(design, scenario, chains * looks, seed)
    stats = sim.cell_statistics(effect)
    t_rule = t_quantile(p.confidence, p.repeats - 1)
    guard = np.zeros(chains * looks, dtype=bool)
    win = np.ones(chains * looks, dtype=bool)
    for s in stats:
        guard |= np.logical_or.reduce([w >= p.guard_min_repeats for w in s.worse])
        win &= (s.point > p.bar) & (s.low > 0)
    win &= ~guard
    passes = np.zeros((chains, looks), dtype=bool)
    win_by_look = win.reshape(chains, looks)
    for look in range(1, looks + 1):
        confidence = budget.confidence(look)
        if confidence is None:
            continue
        scale = t_quantile(confidence, p.repeats - 1) / t_rule
        ok = win_by_look[:, look - 1].copy()
        for s in stats:
            point = s.point.reshape(chains, looks)[:, look - 1]
            half = (s.point - s.low).reshape(chains, looks)[:, look - 1]
            ok &= (point > p.bar) & (point - half * scale > 0)
        passes[:, look - 1] = ok
    promoted = passes.any(axis=1)
    first = np.where(promoted, passes.argmax(axis=1), -1)
    counts = tuple(int((first == i).sum()) for i in range(looks))
    naive = win_by_look.any(axis=1)
    share, naive_share = float(promoted.mean()), float(naive.mean())
    return ChainStudy(chains, looks, effect, share, _error(share, chains), naive_share, _error(naive_share, chains),
                      float(win.mean()), counts)
