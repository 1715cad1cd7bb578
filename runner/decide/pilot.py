"""A pilot file read for power model 2: the win2-v1 noise model, or pp3-v1's spread and base rates (``docs/power.md``).

The members model 1 read (``spread``, ``cells``: ``runner.decide.spread.parse_pilot``) read
the same; model 2 adds, all optional, a spread's ``guards``, the top-level ``correlation``
(win2-v1) and ``rates`` (pp3-v1). Pure: a parsed JSON document in, values out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..fields import FieldError, Fields
from .noise import (
    GUARDS,
    NOT_NEEDED,
    PRIMARY,
    ControlPair,
    Correlation,
    Pp3Noise,
    Win2Noise,
    guard_correlation,
    spread_of_metric,
)
from .spread import Spread, read_spread

__all__ = ["PilotNoise", "parse_pilot_noise"]


@dataclass(frozen=True)
class PilotNoise:
    """A pilot file read for model 2: the win2-v1 noise model, or pp3-v1's spread and base rates."""

    win2: Win2Noise | None
    pp3: Pp3Noise | None


def _pilot_cell(f: Fields) -> tuple[Spread, list[Spread | None], list[ControlPair]]:
    """One pilot spread ``S`` with its optional ``guards``: the primary, each guard (None: not given), the pairs."""
    primary = read_spread(f, also=("guards",))
    guards: list[Spread | None] = [None] * len(GUARDS)
    pairs: list[ControlPair] = []
    if isinstance(f.data.get("windows"), list):
        for index, w in enumerate(f.tables("windows")):
            first: dict[str, list[float | None]] = {PRIMARY: list(w.numbers("first", low=0))}
            second: dict[str, list[float | None]] = {PRIMARY: list(w.numbers("second", low=0))}
            if "guards" in w.data:
                table = w.table("guards")
                for name in list(table.data):
                    if name not in GUARDS:
                        raise table.fail(name, f"not a guard of win2-v1 (expected one of {', '.join(GUARDS)})")
                    g = table.table(name)
                    a, b = g.numbers("first", low=0), g.numbers("second", low=0)
                    if len(a) != len(first[PRIMARY]) or len(b) != len(second[PRIMARY]):
                        raise g.fail("first", "the guard's units are the primary's: as many values as first/second")
                    g.done()
                    first[name], second[name] = list(a), list(b)
                table.done()
            pairs.append(ControlPair(f"pilot-{index}", first, second))
        for i, name in enumerate(GUARDS):
            if any(name in p.first for p in pairs):
                spread = spread_of_metric([p for p in pairs if name in p.first], name, "pilot", None)
                if spread is None:
                    raise f.fail("windows", f"guard {name}: no window has two or more matched units")
                guards[i] = spread
    elif "guards" in f.data:
        table = f.table("guards")
        for name in list(table.data):
            if name not in GUARDS:
                raise table.fail(name, f"not a guard of win2-v1 (expected one of {', '.join(GUARDS)})")
            g = table.table(name)
            guards[GUARDS.index(name)] = Spread(float(g.number("start_sd", low=0)), float(g.number("repeat_sd", low=0)),
                                                primary.entries, primary.windows, "pilot")
            g.done()
        table.done()
    return primary, guards, pairs


def parse_pilot_noise(data: Any, cells: Sequence[str], *, protocol: str,
                      contexts: Sequence[str] = ()) -> PilotNoise:
    """A pilot file (``docs/power.md``) for model 2: ``spread``, ``cells``, and the optional ``correlation``, ``rates``.

    ``correlation`` (win2-v1): ``{"cells": x, "accepted_per_round": y, "decode_tps": z,
    "cells_accepted_per_round": u, "cells_decode_tps": v}``, each optional, as measured
    elsewhere (``cells``: the rate's start offsets across cells; ``cells_<guard>``: the
    guard's; a guard's name alone: its correlation with the rate); a spread ``S`` may carry ``guards`` (per guard
    ``{"start_sd", "repeat_sd"}``, or per window ``{"first", "second"}`` over the primary's
    units). ``rates`` (pp3-v1): every context's base rate (any unit; only the ratios count).
    """
    f = Fields(data, "pilot", dialect="json")
    names = list(cells)
    default = f.table("spread") if "spread" in f.data else None
    named: dict[str, Fields] = {}
    if "cells" in f.data:
        table = f.table("cells")
        for name in list(table.data):
            if name not in names:
                raise table.fail(name, f"not a cell of the plan (expected one of {', '.join(names)})")
            named[name] = table.table(name)
        table.done()
    declared: dict[str, float] = {}
    if "correlation" in f.data:
        if protocol != "win2-v1":
            raise f.fail("correlation", "win2-v1 only (pp3-v1's blocks share one offset by design)")
        table = f.table("correlation")
        if "cells" in table.data:
            declared["cells"] = float(table.number("cells", low=0, high=1))
        for g in GUARDS:
            if g in table.data:
                declared[g] = float(table.number(g, low=-1, high=1))
            if f"cells_{g}" in table.data:
                declared[f"cells_{g}"] = float(table.number(f"cells_{g}", low=0, high=1))
        table.done()
    rates: tuple[float, ...] | None = None
    if "rates" in f.data:
        if protocol != "pp3-v1":
            raise f.fail("rates", "pp3-v1 only (per-context base rates)")
        table = f.table("rates")
        for name in list(table.data):
            if name not in contexts:
                raise table.fail(name, f"not a context of the plan (expected one of {', '.join(contexts)})")
        rates = tuple(float(table.number(c, low=0, low_open=True)) for c in contexts)
        table.done()
    f.done()
    read: dict[int, tuple[Spread, list[Spread | None], list[ControlPair]]] = {}

    def cell_of(name: str) -> tuple[Spread, list[Spread | None], list[ControlPair]]:
        chosen = named.get(name, default)
        if chosen is None:
            raise FieldError("pilot.spread", f"required: no spread for cell {name}")
        key = id(chosen)
        if key not in read:
            read[key] = _pilot_cell(chosen)
        return read[key]

    if protocol == "pp3-v1":
        primary, guards, _ = cell_of(names[0])
        if any(g is not None for g in guards):
            raise FieldError("pilot.spread.guards", "win2-v1 only (pp3-v1's guards are not simulated)")
        return PilotNoise(None, Pp3Noise(primary, rates, "pilot" if rates is not None else "assumed equal"))
    per_cell = [cell_of(c) for c in names]
    pairs = {c: per_cell[i][2] for i, c in enumerate(names)}
    primary_by = {c: per_cell[i][0] for i, c in enumerate(names)}
    guard_corr = []
    for gi, g in enumerate(GUARDS):
        if g in declared:
            guard_corr.append(Correlation(declared[g], 0, "pilot"))
            continue
        spreads = {c: per_cell[i][1][gi] for i, c in enumerate(names)}
        guard_corr.append(guard_correlation(pairs, primary_by, spreads, g, "pilot")
                          if any(s is not None for s in spreads.values()) else Correlation(None, 0, "pilot"))
    def across(name: str) -> Correlation:
        if len(names) < 2:
            return NOT_NEEDED
        return Correlation(declared[name], 0, "pilot") if name in declared else Correlation(None, 0, "pilot")

    noise = Win2Noise(tuple(names), tuple(p[0] for p in per_cell), tuple(tuple(p[1]) for p in per_cell),
                      tuple(guard_corr), across("cells"), tuple(across(f"cells_{g}") for g in GUARDS))
    return PilotNoise(noise.settled(), None)
