"""Power figures of a registered design: what a window can detect before it runs (``docs/power.md``).

``power_figures(design, noise, effect=E, target=0.8, windows=N, seed=S)`` simulates ``N``
seeded windows of the design under the noise model with the data's structure (model 2:
``runner.decide.power_win2``, ``runner.decide.power_pp3``) and returns, as JSON-ready data:

* the probability of each outcome at the true effect ``E`` and at 0 (the false-WIN /
  false-CANDIDATE rate; win2-v1 also the false-LOSS rate), with their Monte Carlo errors;
* the minimum detectable effect: the smallest true effect decided WIN (CANDIDATE) in at
  least ``target`` of the simulated windows;
* the fewest repeats (win2-v1) or pairs (pp3-v1, source families with the plan's
  contexts) whose MDE is at most ``E`` (``runner.decide.power_search.fewest``);
* for win2-v1, the analytic check (``runner.decide.power_analytic``: the ratio's linear
  approximation, guards neutral).

Where a correlation of the noise model is too thin to estimate (``Win2Noise.thin``), every
corner of the thin ones (each 0 or 1) is simulated on the same draws and each figure is
the worst of them: the least power, the highest false-WIN and false-LOSS rates, the
largest MDE; ``conservative`` says which corner each came from. ``MODEL`` numbers the
model (a gate result records it; ``runner.decide.power_v1`` is model 1, kept to replay old
results). Same design, noise, ``N`` and seed: the same figures, bit for bit. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from . import power_analytic
from .noise import GUARDS, MIN_CORRELATION_WINDOWS, Pp3Noise, Win2Noise, Win2Scenario
from .power_pp3 import Pp3Sim
from .power_search import (
    MAX_FAMILIES,
    MAX_REPEATS,
    MIN_FAMILIES,
    MIN_REPEATS,
    SEARCH_WINDOWS,
    SEARCH_WINDOWS_WIN2,
    fewest,
    mde,
    probabilities,
)
from .power_sim import Pp3Design, Win2Design
from .power_win2 import Win2Sim

if TYPE_CHECKING:
    from ..plan.model import Plan

__all__ = ["MODEL", "NOISE_MODEL", "correlation_label", "design_of", "power_figures", "spread_lines",
           "thin_reason"]

MODEL = 2
NOISE_MODEL = {
    "win2-v1": ("per start, cell, repeat and metric (rate, accepted per round, client decode rate): log value = "
                "unit level + start offset (start-to-start, start_sd; shared by the start's cells as the cell "
                "correlation says) + repeat noise (repeat-to-repeat, repeat_sd); each guard correlated with the "
                "rate at both levels; the candidate at (1+E) times its rate and (1+E)^beta times each guard (beta: "
                "the guard's regression on the rate, clipped to [0, 1]); decided as win2-v1 decides: the exact "
                "ratio to the mean of the two bracketing controls, the guards' 'below both controls in "
                "guard_min_repeats repeats', WIN when every cell is"),
    "pp3-v1": ("log rate of block b, pair p = context base rate + block offset (start-to-start, start_sd, shared "
               "by the block's pairs) + pair noise (repeat-to-repeat, repeat_sd), times (1+E) in the B blocks; one "
               "run per block and pair, cut at the decode bound (bounded: rate x bound tokens) or of max_tokens "
               "tokens; TTFT and round-time guards held equal across blocks"),
}


def design_of(plan: Plan) -> Win2Design | Pp3Design:
    """The registered rule and design of a plan: cells, repeats, families, contexts, bootstrap, decode bound."""
    from . import pp3, win2

    params: dict[str, Any] = dict(plan.decision_params)
    if plan.protocol == "win2-v1":
        w = win2.Win2Params(bar=float(params.get("bar", 0.02)), confidence=float(params.get("confidence", 0.95)),
                            guard_min_repeats=int(params.get("guard_min_repeats", 2)),
                            repeats=plan.measurement.repeats)
        return Win2Design(plan.decision_cells, w)
    p = pp3.Pp3Params(min_gain=float(params.get("min_gain", 0.05)), bootstrap=int(params.get("bootstrap", 2000)),
                      seed=int(params.get("seed", 4103)), interval=float(params.get("interval", 0.90)),
                      max_regression=float(params.get("max_regression", 0.05)))
    contexts = tuple(dict.fromkeys(c.context for c in plan.cells))
    return Pp3Design(tuple(f.name for f in plan.families), contexts, p, plan.sampling.max_tokens,
                     plan.measurement.decode_bound_s)


Sim = Win2Sim | Pp3Sim


def _sim(design: Win2Design | Pp3Design, scenario: Win2Scenario | Pp3Noise, n: int, seed: int) -> Sim:
    if isinstance(design, Win2Design):
        assert isinstance(scenario, Win2Scenario)
        return Win2Sim(design, scenario, n, seed)
    assert isinstance(scenario, Pp3Noise)
    return Pp3Sim(design, scenario, n, seed)


def _resize(design: Win2Design | Pp3Design, size: int) -> Win2Design | Pp3Design:
    if isinstance(design, Win2Design):
        return replace(design, params=replace(design.params, repeats=size))
    return replace(design, families=tuple(f"f{i + 1}" for i in range(size)))


def _search(design: Win2Design | Pp3Design, scenario: Win2Scenario | Pp3Noise, effect: float, target: float,
            n: int, seed: int, bar: float) -> dict[str, Any]:
    """The fewest repeats (win2) / families (pp3) whose MDE is at most ``effect``."""
    win2_rule = isinstance(design, Win2Design)
    size, low, cap, what = ((design.repeats, max(MIN_REPEATS, design.params.guard_min_repeats), MAX_REPEATS,
                             "repeats") if isinstance(design, Win2Design)
                            else (len(design.families), MIN_FAMILIES, MAX_FAMILIES, "families"))
    n = min(n, SEARCH_WINDOWS_WIN2 if win2_rule else SEARCH_WINDOWS)
    memo: dict[int, bool] = {}

    def ok(k: int) -> bool:
        if k not in memo:
            found = mde(_sim(_resize(design, k), scenario, n, seed).thresholds(), target)
            memo[k] = found is not None and found <= effect
        return memo[k]

    found = fewest(size, ok, low, cap)
    out: dict[str, Any] = {what: found, "searched_up_to": cap, "windows_per_step": n, "searched_from": low}
    if isinstance(design, Pp3Design):
        out["pairs"] = None if found is None else found * len(design.contexts)
    if found is None:
        out["note"] = (f"no {what} up to {cap} bring the MDE down to {effect:.2%}"
                       + (f": at the {'bar' if win2_rule else 'minimum gain'} itself the point estimate must exceed "
                          "it, so the power there stays near 50 %" if effect <= bar else
                          ": the start-to-start spread does not shrink with more " + what
                          + (", and each repeat is another chance for a guard's 'worse than both controls'"
                             if win2_rule else "")))
    return out


def _worst(values: Sequence[float | None], *, high: bool, last: bool = False) -> int:
    """The index of the worst value (``None`` counts as infinite); on ties the first (``last``: the last)."""
    keyed = [math.inf if v is None else v for v in values]
    best = max(keyed) if high else min(keyed)
    return len(keyed) - 1 - keyed[::-1].index(best) if last else keyed.index(best)


def _win2_figures(design: Win2Design, noise: Win2Noise, effect: float, target: float, windows: int, seed: int,
                  analytic: bool) -> tuple[dict[str, Any], Win2Scenario]:
    scenarios = noise.scenarios()
    at_e, at_0, mdes = [], [], []
    for scenario in scenarios:
        (counts_e, counts_0), thresholds = Win2Sim(design, scenario, windows, seed).evaluate((effect, 0.0))
        at_e.append(counts_e)
        at_0.append(counts_0)
        mdes.append(mde(thresholds, target))
    power_i = _worst([c["WIN"] for c in at_e], high=False)
    win_i = _worst([c["WIN"] for c in at_0], high=True, last=True)   # ties: the all-1 corner, where it rises
    loss_i = _worst([c["LOSS"] for c in at_0], high=True)
    mde_i = _worst(mdes, high=True)
    nominal = (1 - design.params.confidence) / 2
    false_win = at_0[win_i]["WIN"] / windows
    p = design.params
    figures: dict[str, Any] = {
        "power": at_e[power_i]["WIN"] / windows,
        "false_positive_rate": false_win,
        "false_loss_rate": at_0[loss_i]["LOSS"] / windows,
        "mde": mdes[mde_i],
        "outcomes": {"at_effect": probabilities(at_e[power_i], windows),
                     "at_zero": probabilities(at_0[win_i], windows)},
        "entries": min(s.entries for s in noise.primary),
        "design": {"cells": list(design.cells), "repeats": design.repeats, "bar": p.bar,
                   "confidence": p.confidence, "guard_min_repeats": p.guard_min_repeats},
        "spread": {cell: s.to_json() for cell, s in zip(design.cells, noise.primary, strict=True)},
        **noise.to_json(),
        "guard_effect": {cell: {g: scenarios[power_i].beta(ci, gi) for gi, g in enumerate(GUARDS)}
                         for ci, cell in enumerate(design.cells)},
        "conservative": {"thin": noise.thin(), "corners": len(scenarios),
                         "power": dict(scenarios[power_i].assumed),
                         "false_positive_rate": dict(scenarios[win_i].assumed),
                         "false_loss_rate": dict(scenarios[loss_i].assumed), "mde": dict(scenarios[mde_i].assumed)},
        "nominal_false_win_rate": nominal,
        # Above nominal beyond Monte Carlo error: start-to-start noise the paired t cannot see.
        "false_win_above_nominal": false_win > nominal + 3 * math.sqrt(nominal * (1 - nominal) / windows),
    }
    if analytic:
        spreads = list(noise.primary)

        def corr(i: int) -> float:
            return scenarios[i].cell_correlation

        figures["analytic"] = {
            "at_effect": power_analytic.win2_outcomes_shared(effect, spreads, design.repeats, p.bar, p.confidence,
                                                             corr(power_i)),
            "at_zero": power_analytic.win2_outcomes_shared(0.0, spreads, design.repeats, p.bar, p.confidence,
                                                           corr(win_i)),
            "mde": power_analytic.win2_mde_shared(target, spreads, design.repeats, p.bar, p.confidence, corr(mde_i)),
            "approximates": "the primary alone (guards neutral), the ratio's linear approximation",
        }
    return figures, scenarios[mde_i]


def _pp3_figures(design: Pp3Design, noise: Pp3Noise, effect: float, target: float, windows: int,
                 seed: int) -> dict[str, Any]:
    sim = Pp3Sim(design, noise, windows, seed)
    (at_e, at_0), thresholds = sim.evaluate((effect, 0.0))
    return {
        "power": at_e["CANDIDATE"] / windows,
        "false_positive_rate": at_0["CANDIDATE"] / windows,
        "mde": mde(thresholds, target),
        "outcomes": {"at_effect": probabilities(at_e, windows), "at_zero": probabilities(at_0, windows)},
        "entries": noise.spread.entries,
        "design": {"families": len(design.families), "contexts": list(design.contexts), "pairs": design.pairs,
                   "min_gain": design.params.min_gain, "bootstrap": design.params.bootstrap,
                   "interval": design.params.interval, "bound_s": design.bound_s},
        "spread": noise.spread.to_json(),
        "base_rates": noise.to_json(design.contexts),
    }


def power_figures(design: Win2Design | Pp3Design, noise: Win2Noise | Pp3Noise, *, effect: float | None = None,
                  target: float = 0.8, windows: int = 10_000, seed: int = 1, search: bool = True,
                  analytic: bool = True) -> dict[str, Any]:
    """Every power figure of ``design`` under ``noise`` (model 2)."""
    win2_rule = isinstance(design, Win2Design)
    bar = design.params.bar if isinstance(design, Win2Design) else design.params.min_gain
    true = bar if effect is None else effect
    head: dict[str, Any] = {"model": MODEL, "rule": "win2-v1" if win2_rule else "pp3-v1", "effect": true,
                            "target_power": target, "windows": windows, "seed": seed,
                            "noise_model": NOISE_MODEL["win2-v1" if win2_rule else "pp3-v1"]}
    searched: Win2Scenario | Pp3Noise
    if isinstance(design, Win2Design):
        assert isinstance(noise, Win2Noise)
        body, searched = _win2_figures(design, noise, true, target, windows, seed, analytic)
    else:
        assert isinstance(noise, Pp3Noise)
        body, searched = _pp3_figures(design, noise, true, target, windows, seed), noise
    figures = {**head, **body}
    if search:
        figures["needed"] = _search(design, searched, true, target, windows, seed, bar)
    return figures


def correlation_label(name: str) -> str:
    """A correlation's name for people: ``cells``, ``<guard>`` (with the rate), ``cells_<guard>``."""
    if name == "cells":
        return "the rate across cells"
    if name.startswith("cells_"):
        return f"{name.removeprefix('cells_')} across cells"
    return f"{name} with the rate"


def thin_reason(correlation: Mapping[str, Any]) -> str:
    """Why a correlation was assumed: too few windows, or a pilot that gives none."""
    if correlation.get("source") == "pilot" and not correlation.get("windows"):
        return "not given (the pilot names none)"
    return f"too thin to estimate ({correlation.get('windows', 0)} window(s) < {MIN_CORRELATION_WINDOWS})"


_FIGURE_NAMES = {"power": "the power", "false_positive_rate": "the false-WIN rate",
                 "false_loss_rate": "the false-LOSS rate", "mde": "the MDE"}


def spread_lines(figures: Mapping[str, Any]) -> list[str]:
    """The noise-model lines of figures for people: spreads, guards, correlations and what was assumed."""
    lines = []
    spreads = figures["spread"] if figures["rule"] == "win2-v1" else {"pairs": figures["spread"]}
    for cell, s in spreads.items():
        lines.append(f"spread {cell}: start-to-start {s['start_sd']:.2%}, repeat-to-repeat {s['repeat_sd']:.2%} "
                     f"({s['source']}: {s['entries']} entries, {s['windows']} windows with both controls)")
    for cell, guards in (figures.get("guards") or {}).items():
        parts = []
        for g, s in guards.items():
            beta = ((figures.get("guard_effect") or {}).get(cell) or {}).get(g)
            moves = "" if beta is None else f", moves {beta:.2f}x with the rate"
            parts.append(f"{g} " + ("no data: spreads as the rate" if s is None else
                                    f"start {s['start_sd']:.2%} repeat {s['repeat_sd']:.2%}") + moves)
        lines.append(f"guards {cell}: " + "; ".join(parts))
    conservative = figures.get("conservative") or {}
    for name, c in (figures.get("correlations") or {}).items():
        what = correlation_label(name)
        if c["thin"]:
            by_value: dict[float, list[str]] = {}
            for figure, corner in conservative.items():
                if isinstance(corner, dict) and name in corner:
                    by_value.setdefault(corner[name], []).append(_FIGURE_NAMES.get(figure, figure))
            said = "; ".join(f"{value:g} for {', '.join(names)}" for value, names in sorted(by_value.items()))
            lines.append(f"correlation {what}: {thin_reason(c)}; assumed the conservative value: {said}")
        elif c["source"] == "not needed":
            lines.append(f"correlation {what}: not needed (no spread it could act on)")
        else:
            rests = f", {c['windows']} windows" if c["windows"] else ""
            lines.append(f"correlation {what}: {c['value']:.2f} ({c['source']}{rests})")
    rates = figures.get("base_rates")
    if rates is not None:
        lines.append("base rates per context: " + (", ".join(f"{k} {v:g}" for k, v in rates["rates"].items())
                                                   + f" ({rates['source']})" if rates["rates"] is not None
                                                   else "not given: equal rates assumed"))
    return lines
