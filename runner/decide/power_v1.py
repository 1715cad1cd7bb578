"""Power model 1: the figures every gate result recorded before model 2 holds, kept to replay them bit for bit.

Model 1 simulated the paired difference of each win2-v1 decision cell alone (``d_r = (1 +
E)(1 + b + eps_r) - 1``, the linear approximation of the rule's ratio), the cells
independent and the guards held neutral; pp3-v1 with one base rate for every context and
runs of ``max_tokens`` tokens; its repeats / families search went upward only
(``runner.decide.power_sim``). ``runner.decide.power`` is the current model; a recorded
``gate.result`` without a ``model`` member was computed by this one, and
``runner.gates.power.replay_power_gate`` replays it here. Do not change its numbers.
Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from . import power_analytic
from .power_search import MAX_FAMILIES, MAX_REPEATS, SEARCH_WINDOWS, SEARCH_WINDOWS_WIN2
from .power_search import mde as _mde
from .power_search import probabilities as _probabilities
from .power_sim import Pp3Design, Pp3Draws, Win2Design, Win2Draws
from .spread import Spread

__all__ = ["NOISE_MODEL_V1", "power_figures_v1"]

NOISE_MODEL_V1 = {
    "win2-v1": ("log rate = unit level + start offset (start-to-start, start_sd) + repeat noise (repeat-to-repeat, "
                "repeat_sd); the paired difference d_r = (1+E)(1 + b + eps_r) - 1 with b ~ N(0, 1.5 start_sd^2) "
                "shared by the window's repeats and eps_r ~ N(0, 1.5 repeat_sd^2); guards held equal across starts; "
                "decision cells independent"),
    "pp3-v1": ("log rate of block b, pair p = pair level + block offset (start-to-start, start_sd) + pair noise "
               "(repeat-to-repeat, repeat_sd), times (1+E) in the B blocks; one request per block and pair; "
               "TTFT and round-time guards held equal across blocks"),
}


def _bar(design: Win2Design | Pp3Design) -> float:
    return design.params.bar if isinstance(design, Win2Design) else design.params.min_gain


def _draws(design: Win2Design | Pp3Design, spreads: Sequence[Spread], n: int, seed: int) -> Win2Draws | Pp3Draws:
    if isinstance(design, Win2Design):
        return Win2Draws(design, spreads, n, seed)
    return Pp3Draws(design, spreads[0], n, seed)


def _search_v1(design: Win2Design | Pp3Design, spreads: Sequence[Spread], effect: float, target: float,
               n: int, seed: int) -> dict[str, Any]:
    """Upward from the plan's own size: doubling, then bisection (model 1 never searched below it)."""
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


def power_figures_v1(design: Win2Design | Pp3Design, spreads: Sequence[Spread], *, effect: float | None = None,
                  target: float = 0.8, windows: int = 10_000, seed: int = 1, search: bool = True,
                  analytic: bool = True) -> dict[str, Any]:
    """Model 1's figures of ``design`` under ``spreads`` (one per win2 decision cell; one for pp3)."""
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
        "noise_model": NOISE_MODEL_V1["win2-v1" if win2_rule else "pp3-v1"],
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
        figures["needed"] = _search_v1(design, spreads, true, target, windows, seed)
    return figures
