"""Power figures of a registered design: what a window can detect before it runs (``docs/power.md``).

``power_figures(design, spreads, effect=E, target=0.8, windows=N, seed=S)`` simulates ``N``
seeded windows of the design under the noise model (``runner.decide.power_sim``) and
returns, as JSON-ready data:

* the probability of each outcome at the true effect ``E`` and at 0 (the false-WIN /
  false-CANDIDATE rate), with their Monte Carlo standard errors;
* the minimum detectable effect: the smallest true effect decided WIN (CANDIDATE) in at
  least ``target`` of the simulated windows;
* the repeats (win2-v1) or pairs (pp3-v1, more source families with the plan's contexts)
  needed for the MDE to come down to ``E``, searched up to a cap;
* for win2-v1, the same outcome probabilities and MDE computed analytically
  (``runner.decide.power_analytic``).

Same design, spreads, ``N`` and seed: the same figures, bit for bit. Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from . import power_analytic
from .power_sim import Pp3Design, Pp3Draws, Win2Design, Win2Draws
from .spread import Spread

if TYPE_CHECKING:
    from ..plan.model import Plan

__all__ = ["MAX_FAMILIES", "MAX_REPEATS", "NOISE_MODEL", "SEARCH_WINDOWS", "SEARCH_WINDOWS_WIN2", "design_of",
           "power_figures"]

MAX_REPEATS = 100      # a plan's repeats are at most 100
MAX_FAMILIES = 16      # pp3-v1 pairs are searched up to this many source families
SEARCH_WINDOWS = 2000  # pp3-v1 windows simulated per step of the pairs search (each runs the bootstrap)
# win2-v1 windows simulated per step of the repeats search: the default window count (a step costs
# windows x repeats x cells draws, up to 100 repeats: 10,000 windows keep a step near 8 MB a cell,
# where the 1,000,000 windows a plan may ask for would need 800 MB)
SEARCH_WINDOWS_WIN2 = 10_000
NOISE_MODEL = {
    "win2-v1": ("log rate = unit level + start offset (start-to-start, start_sd) + repeat noise (repeat-to-repeat, "
                "repeat_sd); the paired difference d_r = (1+E)(1 + b + eps_r) - 1 with b ~ N(0, 1.5 start_sd^2) "
                "shared by the window's repeats and eps_r ~ N(0, 1.5 repeat_sd^2); guards held equal across starts; "
                "decision cells independent"),
    "pp3-v1": ("log rate of block b, pair p = pair level + block offset (start-to-start, start_sd) + pair noise "
               "(repeat-to-repeat, repeat_sd), times (1+E) in the B blocks; one request per block and pair; "
               "TTFT and round-time guards held equal across blocks"),
}


def design_of(plan: Plan) -> Win2Design | Pp3Design:
    """The registered rule and design of a plan: cells, repeats, families, contexts, bootstrap."""
    from . import pp3, win2

    params = dict(plan.decision_params)
    if plan.protocol == "win2-v1":
        w = win2.Win2Params(bar=float(params.get("bar", 0.02)), confidence=float(params.get("confidence", 0.95)),
                            guard_min_repeats=int(params.get("guard_min_repeats", 2)),
                            repeats=plan.measurement.repeats)
        return Win2Design(plan.decision_cells, w)
    p = pp3.Pp3Params(min_gain=float(params.get("min_gain", 0.05)), bootstrap=int(params.get("bootstrap", 2000)),
                      seed=int(params.get("seed", 4103)), interval=float(params.get("interval", 0.90)),
                      max_regression=float(params.get("max_regression", 0.05)))
    contexts = tuple(dict.fromkeys(c.context for c in plan.cells))
    return Pp3Design(tuple(f.name for f in plan.families), contexts, p, plan.sampling.max_tokens)


def _bar(design: Win2Design | Pp3Design) -> float:
    return design.params.bar if isinstance(design, Win2Design) else design.params.min_gain


def _mde(thresholds: Any, target: float) -> float | None:
    """The smallest effect decided positive in at least ``target`` of the windows (``None``: none is)."""
    import numpy as np

    ordered = np.sort(thresholds)
    k = max(1, math.ceil(target * len(ordered) - 1e-9))
    value = float(ordered[k - 1])
    return None if not math.isfinite(value) else max(0.0, value)


def _probabilities(counts: Mapping[str, int], n: int) -> dict[str, Any]:
    return {k: {"p": v / n, "mc_error": math.sqrt((v / n) * (1 - v / n) / n)} for k, v in counts.items()}


def _draws(design: Win2Design | Pp3Design, spreads: Sequence[Spread], n: int, seed: int) -> Win2Draws | Pp3Draws:
    if isinstance(design, Win2Design):
        return Win2Draws(design, spreads, n, seed)
    return Pp3Draws(design, spreads[0], n, seed)


def _search(design: Win2Design | Pp3Design, spreads: Sequence[Spread], effect: float, target: float,
            n: int, seed: int) -> dict[str, Any]:
    """The smallest repeats (win2) / families (pp3) whose MDE is at most ``effect``."""
    if isinstance(design, Win2Design):
        first, cap, what = design.repeats, MAX_REPEATS, "repeats"
        n = min(n, SEARCH_WINDOWS_WIN2)

        def build(size: int) -> Win2Design | Pp3Design:
            assert isinstance(design, Win2Design)
            return replace(design, params=replace(design.params, repeats=size))
    else:
        first, cap, what = len(design.families), MAX_FAMILIES, "families"
        n = min(n, SEARCH_WINDOWS)

        def build(size: int) -> Win2Design | Pp3Design:
            assert isinstance(design, Pp3Design)
            return replace(design, families=tuple(f"f{i + 1}" for i in range(size)))

    def ok(size: int) -> bool:
        mde = _mde(_draws(build(size), spreads, n, seed).thresholds(), target)
        return mde is not None and mde <= effect

    found: int | None = None
    low, size = first - 1, first
    while size <= cap:           # doubling, then bisection between the last failure and the first success
        if ok(size):
            found = size
            break
        low, size = size, min(cap, size * 2) if size < cap else cap + 1
    if found is not None:
        high = found
        while high - low > 1:
            mid = (low + high) // 2
            if ok(mid):
                high = mid
            else:
                low = mid
        found = high
    out: dict[str, Any] = {what: found, "searched_up_to": cap, "windows_per_step": n}
    if isinstance(design, Pp3Design):
        out["pairs"] = None if found is None else found * len(design.contexts)
    if found is None:
        bar = _bar(design)
        out["note"] = (f"no {what} up to {cap} bring the MDE down to {effect:.2%}"
                       + (f": at the {'bar' if isinstance(design, Win2Design) else 'minimum gain'} itself the "
                          "point estimate must exceed it, so the power there stays near 50 %" if effect <= bar else
                          ": the start-to-start spread does not shrink with more " + what))
    return out


def power_figures(design: Win2Design | Pp3Design, spreads: Sequence[Spread], *, effect: float | None = None,
                  target: float = 0.8, windows: int = 10_000, seed: int = 1, search: bool = True,
                  analytic: bool = True) -> dict[str, Any]:
    """Every power figure of ``design`` under ``spreads`` (one per win2 decision cell; one for pp3)."""
    win2_rule = isinstance(design, Win2Design)
    bar = _bar(design)
    true = bar if effect is None else effect
    draws = _draws(design, spreads, windows, seed)
    at_effect = draws.counts(true)
    at_zero = draws.counts(0.0)
    positive = "WIN" if win2_rule else "CANDIDATE"
    mde = _mde(draws.thresholds(), target)
    figures: dict[str, Any] = {
        "rule": "win2-v1" if win2_rule else "pp3-v1",
        "effect": true,
        "target_power": target,
        "windows": windows,
        "seed": seed,
        "power": at_effect[positive] / windows,
        "false_positive_rate": at_zero[positive] / windows,
        "mde": mde,
        "outcomes": {"at_effect": _probabilities(at_effect, windows), "at_zero": _probabilities(at_zero, windows)},
        "noise_model": NOISE_MODEL["win2-v1" if win2_rule else "pp3-v1"],
        "entries": min(s.entries for s in spreads),
        "design": ({"cells": list(design.cells), "repeats": design.repeats, "bar": bar,
                    "confidence": design.params.confidence} if isinstance(design, Win2Design) else
                   {"families": len(design.families), "contexts": list(design.contexts), "pairs": design.pairs,
                    "min_gain": bar, "bootstrap": design.params.bootstrap, "interval": design.params.interval}),
    }
    if isinstance(design, Win2Design):
        figures["spread"] = {cell: s.to_json() for cell, s in zip(design.cells, spreads, strict=True)}
        nominal = (1 - design.params.confidence) / 2
        figures["nominal_false_win_rate"] = nominal
        # Above nominal beyond Monte Carlo error: start-to-start noise the paired t cannot see.
        figures["false_win_above_nominal"] = figures["false_positive_rate"] > nominal + 3 * math.sqrt(
            nominal * (1 - nominal) / windows)
        if analytic:
            figures["analytic"] = {
                "at_effect": power_analytic.win2_outcomes(true, spreads, design.repeats, bar, design.params.confidence),
                "at_zero": power_analytic.win2_outcomes(0.0, spreads, design.repeats, bar, design.params.confidence),
                "mde": power_analytic.win2_mde(target, spreads, design.repeats, bar, design.params.confidence),
            }
    else:
        figures["spread"] = spreads[0].to_json()
    if search:
        figures["needed"] = _search(design, spreads, true, target, windows, seed)
    return figures
