"""The MDE a decided window actually had, from its own in-window control spread, beside its verdict.

win2-v1: the two bracketing controls' per-repeat values (s1 and s3, as the decision
computed them) of the rate and of both guards; pp3-v1: blocks A1 and A2's rate per pair
(delivered tokens over decode seconds of every observed run, bounded runs included: seed
003 counts delivered tokens without a fixed token count) and, per context, their mean
rate (the base rates). One window's two control starts estimate the spread
(``runner.decide.noise``), and the registered design is simulated under it (model 2,
``runner.decide.power``) at the plan's power seed: "NO_CHANGE; this window could detect
>= 4.1 % with 80 % power". One window cannot estimate a correlation, so the conservative
value is assumed for each; where the guards alone keep the MDE up, the report says what
the rate alone could detect.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ..decide import NOISE_METRICS as METRICS
from ..decide import NOISE_PRIMARY as PRIMARY
from ..decide import (
    ControlPair,
    Pp3Design,
    Pp3Noise,
    Win2Noise,
    correlation_label,
    design_of,
    estimate_win2_noise,
    power_figures,
)
from ..decide.pp3 import OBSERVED
from ..decide.spread import Spread, estimate_spread
from .document import Para, Section

if TYPE_CHECKING:
    from ledger.event import Event

    from ..plan.model import Plan

__all__ = ["REPORT_WINDOWS", "in_window_mde", "power_head"]

REPORT_WINDOWS = 4000


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _win2_noise(plan: Plan, result: Mapping[str, Any]) -> Win2Noise | None:
    pairs: dict[str, list[ControlPair]] = {}
    for cell in plan.decision_cells:
        metrics = ((result.get("cells") or {}).get(cell) or {}).get("metrics") or {}
        first: dict[str, list[float | None]] = {}
        second: dict[str, list[float | None]] = {}
        for m in METRICS:
            per = (metrics.get(m) or {}).get("per_repeat") or {}
            first[m] = [x if _number(x) else None for x in per.get("s1") or []]
            second[m] = [x if _number(x) else None for x in per.get("s3") or []]
        size = min(len(first[PRIMARY]), len(second[PRIMARY]))
        for m in METRICS:   # a guard the result lacks: no values (its spread is then assumed, not estimated)
            first[m] = (first[m] + [None] * size)[:size]
            second[m] = (second[m] + [None] * size)[:size]
        pairs[cell] = [ControlPair("in-window", first, second)]
    _, noise = estimate_win2_noise(plan.decision_cells, pairs, source="in-window")
    return noise


def _pp3_noise(plan: Plan, data: Mapping[str, Any]) -> Pp3Noise | None:
    sums: dict[tuple[str, str, str], list[float]] = {}
    for r in data.get("requests") or []:
        if (r.get("status") not in OBSERVED or r.get("block") not in ("A1", "A2") or not _number(r.get("decode_s"))
                or not r.get("decode_s")):
            continue
        entry = sums.setdefault((r["block"], r["family"], r["context"]), [0.0, 0.0])
        entry[0] += float(r.get("delivered_tokens") or 0)
        entry[1] += float(r["decode_s"])
    pairs = sorted({(f, c) for (_, f, c) in sums if ("A1", f, c) in sums and ("A2", f, c) in sums})
    rates = [(p, sums[("A1", *p)][0] / sums[("A1", *p)][1], sums[("A2", *p)][0] / sums[("A2", *p)][1]) for p in pairs]
    rates = [(p, a, b) for p, a, b in rates if a > 0 and b > 0]
    if not rates:
        return None
    spread = estimate_spread([([a for _, a, _ in rates], [b for _, _, b in rates])], source="in-window")
    if spread is None:
        return None
    design = design_of(plan)
    contexts = design.contexts if isinstance(design, Pp3Design) else ()
    by_context = {c: [(a + b) / 2 for (_, pc), a, b in rates if pc == c] for c in contexts}
    if contexts and all(by_context[c] for c in contexts):
        base = tuple(math.fsum(by_context[c]) / len(by_context[c]) for c in contexts)
        return Pp3Noise(spread, base, "in-window")
    return Pp3Noise(spread)


def in_window_mde(plan: Plan, data: Mapping[str, Any], result: Mapping[str, Any], *,
                  guards: bool = True) -> dict[str, Any] | None:
    """The power figures of the registered design under the window's own control spread (``None``: not estimable).

    ``guards=False``: the rate alone (win2-v1's guards held neutral).
    """
    noise: Win2Noise | Pp3Noise | None
    if plan.protocol == "win2-v1":
        noise = _win2_noise(plan, result)
        if noise is not None and not guards:
            zero = Spread(0.0, 0.0, 0, 0, "in-window")
            noise = Win2Noise(noise.cells, noise.primary, tuple((zero, zero) for _ in noise.cells),
                              noise.guard_correlation, noise.cell_correlation).settled()
    else:
        noise = _pp3_noise(plan, data)
    if noise is None:
        return None
    target = plan.power.min_power if plan.power is not None else 0.8
    seed = plan.power.seed if plan.power is not None else 1
    return power_figures(design_of(plan), noise, target=target, windows=REPORT_WINDOWS, seed=seed, search=False,
                         analytic=False)


def _before(events: Iterable[Event]) -> list[Para]:
    """What the window's last power gate said before it ran (its MDE from the archive or a pilot)."""
    from ..events import payloads as pl
    from ..events import read_payload

    gate, seq = None, 0
    for event in events:
        if event.type == "gate.result":
            result = read_payload(event, pl.GateResult)
            if result.gate == "power":
                gate, seq = result, event.seq
    figures = None if gate is None else (gate.evidence or {}).get("figures")
    if gate is None or not isinstance(figures, dict):
        return []
    return [Para(f"Before the window, its power gate (seq {seq}) said {gate.summary}", "note")]


def _detect(mde: float | None, target: float) -> str:
    return (f"this window could detect >= {mde:.1%} with {target:.0%} power" if mde is not None
            else f"this window could not detect any effect up to +100 % with {target:.0%} power")


def power_head(plan: Plan, data: Mapping[str, Any], result: Mapping[str, Any],
               events: Iterable[Event] = ()) -> list[Section]:
    """The section beside the decision: the MDE this window had (and what its power gate said before)."""
    figures = in_window_mde(plan, data, result)
    before = _before(events)
    if figures is None:
        return [Section("Power this window had", (Para(
            "The window's own control spread cannot be estimated (its control starts lack matched "
            "repeats or pairs), so no MDE is stated.", "power"), *before))]
    mde = figures["mde"]
    target = figures["target_power"]
    spreads = figures["spread"].values() if plan.protocol == "win2-v1" else [figures["spread"]]
    worst = max(spreads, key=lambda s: math.hypot(s["start_sd"], s["repeat_sd"]))
    notes = [Para(f"From its own control starts (start-to-start {worst['start_sd']:.2%}, repeat-to-repeat "
                  f"{worst['repeat_sd']:.2%}, widest cell), {figures['windows']} simulated windows of the registered "
                  f"design (seed {figures['seed']}); docs/power.md says how to read it.", "note")]
    thin = (figures.get("conservative") or {}).get("thin") or []
    if thin:
        names = ", ".join(correlation_label(t) for t in thin)
        notes.append(Para(f"One window cannot estimate a correlation ({names}): the conservative value is assumed "
                          "for each figure.", "note"))
    if plan.protocol == "win2-v1":
        alone = in_window_mde(plan, data, result, guards=False)
        if alone is not None and alone["mde"] != mde:
            notes.append(Para(f"Its rate alone (guards held neutral): {_detect(alone['mde'], target)}; the guards' "
                              "'below both controls' takes the rest.", "note"))
    rates = figures.get("base_rates") or {}
    if rates.get("rates"):
        notes.append(Para("Per-context base rates (A1 and A2): " + ", ".join(
            f"{c} {v:.1f} tok/s" for c, v in rates["rates"].items()) + ".", "note"))
    detect = _detect(mde, target)
    return [Section("Power this window had", (Para(detect[0].upper() + detect[1:], "power"), *notes, *before))]
