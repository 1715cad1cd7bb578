"""The noise model behind power figures, and its estimate from paired control starts (``docs/power.md``).

A control start ``s`` measured over units ``u`` (repeats for win2-v1, pairs for pp3-v1)
reads, on the log scale, ``mu_u + a_s + e_su``: ``mu_u`` is the unit's own level (its
prompts, its seeds, the day), shared by every start of the window, so it cancels in a
paired comparison; ``a_s ~ N(0, start_sd^2)`` is the start-to-start noise (engine session
to session) and ``e_su ~ N(0, repeat_sd^2)`` the repeat-to-repeat noise (unit by start).

Two control starts of one window over the same units (s1 and s3, or A1 and A2) give
``delta_u = log x_1u - log x_2u = (a_1 - a_2) + (e_1u - e_2u)``. Over windows ``w`` with
``U_w`` units each::

    repeat_sd^2 = sum_w sum_u (delta_wu - mean_w delta)^2 / (2 sum_w (U_w - 1))
    start_sd^2  = max(0, (mean_w (mean_w delta)^2 - 2 repeat_sd^2 mean_w (1/U_w)) / 2)

Pure: numbers in, ``Spread`` out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..fields import FieldError, Fields

__all__ = ["MIN_WINDOWS", "Spread", "estimate_spread", "parse_pilot", "read_spread"]

MIN_WINDOWS = 2
"""Windows with both control starts (so 2 x this many archive entries) a spread estimate needs by default."""


@dataclass(frozen=True)
class Spread:
    """Start-to-start and repeat-to-repeat standard deviations (log scale, i.e. relative) and what they rest on."""

    start_sd: float
    repeat_sd: float
    entries: int        # control starts used
    windows: int        # windows with both control starts over matched units
    source: str         # "archive", "pilot" or "in-window"

    def to_json(self) -> dict[str, Any]:
        return {"start_sd": self.start_sd, "repeat_sd": self.repeat_sd, "entries": self.entries,
                "windows": self.windows, "source": self.source}


Pair = tuple[Sequence[float], Sequence[float]]


def estimate_spread(windows: Sequence[Pair], *, source: str, entries: int | None = None) -> Spread | None:
    """The spread of matched control pairs (``None`` when no window has two or more matched units).

    Each item is one window's two control starts, their per-unit values in unit order
    (positive; a unit missing from either is left out by the caller).
    """
    deltas: list[list[float]] = []
    for first, second in windows:
        d = [math.log(x) - math.log(y) for x, y in zip(first, second, strict=True) if x > 0 and y > 0]
        if len(d) >= 1:
            deltas.append(d)
    df = sum(len(d) - 1 for d in deltas)
    if df <= 0:
        return None
    within = math.fsum((x - math.fsum(d) / len(d)) ** 2 for d in deltas for x in d) / (2 * df)
    between = math.fsum((math.fsum(d) / len(d)) ** 2 for d in deltas) / len(deltas)
    inv_units = math.fsum(1 / len(d) for d in deltas) / len(deltas)
    start_var = max(0.0, (between - 2 * within * inv_units) / 2)
    used = entries if entries is not None else 2 * len(deltas)
    return Spread(math.sqrt(start_var), math.sqrt(within), used, len(deltas), source)


def read_spread(f: Fields, also: tuple[str, ...] = ()) -> Spread:
    """One pilot spread ``S`` (``also``: members another reader takes, e.g. the guards of model 2)."""
    if isinstance(f.data.get("windows"), list):
        pairs: list[Pair] = []
        for w in f.tables("windows"):
            first = w.numbers("first", low=0)
            second = w.numbers("second", low=0)
            if 0 in first or 0 in second:
                raise w.fail("first" if 0 in first else "second", "values must be > 0 (rates)")
            if len(first) != len(second):
                raise w.fail("second", f"{len(second)} values, but first has {len(first)} (units are matched)")
            w.done(also)
            pairs.append((first, second))
        f.done(also)
        spread = estimate_spread(pairs, source="pilot")
        if spread is None:
            raise f.fail("windows", "no window has two or more matched units: no repeat-to-repeat spread")
        return spread
    start_sd = f.number("start_sd", low=0)
    repeat_sd = f.number("repeat_sd", low=0)
    windows = f.integer("windows", 0, low=0)
    f.done(also)
    return Spread(float(start_sd), float(repeat_sd), 2 * windows, windows, "pilot")


def parse_pilot(data: Any, cells: Sequence[str]) -> Mapping[str, Spread]:
    """A pilot file's spread per cell: ``{"spread": S, "cells": {name: S}}`` (``docs/power.md``).

    ``S`` is ``{"windows": [{"first": [...], "second": [...]}, ...]}`` (two control starts'
    per-unit values, estimated as above) or ``{"start_sd": x, "repeat_sd": y, "windows": n}``
    (measured elsewhere over ``n`` windows; optional); ``spread``
    applies to every cell ``cells`` does not name.
    """
    f = Fields(data, "pilot", dialect="json")
    default = read_spread(f.table("spread")) if "spread" in f.data else None
    named: dict[str, Spread] = {}
    if "cells" in f.data:
        table = f.table("cells")
        for name in list(table.data):
            if name not in cells:
                raise table.fail(name, f"not a cell of the plan (expected one of {', '.join(cells)})")
            named[name] = read_spread(table.table(name))
        table.done()
    f.done()
    out: dict[str, Spread] = {}
    for cell in cells:
        chosen = named.get(cell, default)
        if chosen is None:
            raise FieldError("pilot.spread", f"required: no spread for cell {cell}")
        out[cell] = chosen
    return out
