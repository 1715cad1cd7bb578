"""The MDE a decided window actually had, from its own in-window control spread, beside its verdict.

win2-v1: the two bracketing controls' per-repeat rates (s1 and s3, as the decision
computed them); pp3-v1: blocks A1 and A2's rate per pair (delivered tokens over decode
seconds). One window's two control starts estimate the spread (``runner.decide.spread``),
and the registered design is simulated under it (``runner.decide.power``) at the plan's
power seed: "NO_CHANGE; this window could detect >= 4.1 % with 80 % power".
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ..decide.power import design_of, power_figures
from ..decide.spread import Spread, estimate_spread
from .document import Para, Section

if TYPE_CHECKING:
    from ledger.event import Event

    from ..plan.model import Plan

__all__ = ["REPORT_WINDOWS", "in_window_mde", "power_head"]

REPORT_WINDOWS = 4000


def _win2_spreads(plan: Plan, result: Mapping[str, Any]) -> list[Spread] | None:
    out = []
    for cell in plan.decision_cells:
        metric = (((result.get("cells") or {}).get(cell) or {}).get("metrics") or {}).get("pooled_rate_tps") or {}
        per = metric.get("per_repeat") or {}
        pairs = [(a, b) for a, b in zip(per.get("s1") or [], per.get("s3") or [], strict=False)
                 if isinstance(a, int | float) and isinstance(b, int | float) and a > 0 and b > 0]
        matched = [([a for a, _ in pairs], [b for _, b in pairs])]
        spread = estimate_spread(matched, source="in-window") if pairs else None
        if spread is None:
            return None
        out.append(spread)
    return out


def _pp3_spread(data: Mapping[str, Any]) -> list[Spread] | None:
    sums: dict[tuple[str, str, str], list[float]] = {}
    for r in data.get("requests") or []:
        if r.get("status") != "ok" or r.get("block") not in ("A1", "A2") or not r.get("decode_s"):
            continue
        entry = sums.setdefault((r["block"], r["family"], r["context"]), [0.0, 0.0])
        entry[0] += float(r.get("delivered_tokens") or 0)
        entry[1] += float(r["decode_s"])
    pairs = sorted({(f, c) for (_, f, c) in sums if ("A1", f, c) in sums and ("A2", f, c) in sums})
    rates = [(sums[("A1", *p)][0] / sums[("A1", *p)][1], sums[("A2", *p)][0] / sums[("A2", *p)][1]) for p in pairs]
    rates = [(a, b) for a, b in rates if a > 0 and b > 0]
    spread = estimate_spread([([a for a, _ in rates], [b for _, b in rates])], source="in-window") if rates else None
    return None if spread is None else [spread]


def in_window_mde(plan: Plan, data: Mapping[str, Any], result: Mapping[str, Any]) -> dict[str, Any] | None:
    """The power figures of the registered design under the window's own control spread (``None``: not estimable)."""
    spreads = _win2_spreads(plan, result) if plan.protocol == "win2-v1" else _pp3_spread(data)
    if spreads is None:
        return None
    target = plan.power.min_power if plan.power is not None else 0.8
    seed = plan.power.seed if plan.power is not None else 1
    return power_figures(design_of(plan), spreads, target=target, windows=REPORT_WINDOWS, seed=seed, search=False,
                         analytic=False)


def _before(events: Iterable[Event]) -> list[Para]:
    """What the window's last power gate said before it ran (its MDE from the archive or a pilot)."""
    gate = None
    for event in events:
        if event.type == "gate.result" and event.payload.get("gate") == "power":
            gate = event
    figures = None if gate is None else (gate.payload.get("evidence") or {}).get("figures")
    if gate is None or not isinstance(figures, dict):
        return []
    return [Para(f"Before the window, its power gate (seq {gate.seq}) said {gate.payload.get('summary')}", "note")]


def power_head(plan: Plan, data: Mapping[str, Any], result: Mapping[str, Any],
               events: Iterable[Event] = ()) -> list[Section]:
    """The section beside the decision: the MDE this window had (and what its power gate said before)."""
    decision = result.get("decision")
    figures = in_window_mde(plan, data, result)
    before = _before(events)
    if figures is None:
        return [Section("Power this window had", (Para(
            f"{decision}; the window's own control spread cannot be estimated (its control starts lack matched "
            "repeats or pairs), so no MDE is stated.", "note"), *before))]
    mde = figures["mde"]
    target = figures["target_power"]
    spreads = figures["spread"].values() if plan.protocol == "win2-v1" else [figures["spread"]]
    worst = max(spreads, key=lambda s: math.hypot(s["start_sd"], s["repeat_sd"]))
    detect = (f"this window could detect >= {mde:.1%} with {target:.0%} power" if mde is not None
              else f"this window could not detect any effect up to +100 % with {target:.0%} power")
    return [Section("Power this window had", (
        Para(f"{decision}; {detect}", "decision"),
        Para(f"From its own control starts (start-to-start {worst['start_sd']:.2%}, repeat-to-repeat "
             f"{worst['repeat_sd']:.2%}, widest cell), {figures['windows']} simulated windows of the registered design "
             f"(seed {figures['seed']}); docs/power.md says how to read it.", "note"),
        *before,
    ))]
