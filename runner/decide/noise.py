"""The data's structure behind power figures (model 2): guards, shared start offsets, base rates (``docs/power.md``).

win2-v1: a control start ``s`` of decision cell ``c`` reads, per repeat ``r`` and metric ``m``
(the primary ``pooled_rate_tps`` and the guards ``accepted_per_round``, ``decode_tps``), on
the log scale ``mu_crm + a_scm + e_scrm``. The start offset ``a`` has a part shared by every
cell of the start (the same engine session runs them all): ``corr(a_sc, a_sc') = rho_cells``
for the rate, ``kappa_g`` for guard ``g``. A guard's noise is correlated with the primary's,
at both levels, by ``rho_g``; the guards are correlated with each other only through the
primary. Each (cell, metric) has its own ``start_sd`` and ``repeat_sd``
(``runner.decide.spread.Spread``).

Estimated from matched control pairs (two control starts of one window over the same
repeats): the spreads as ``estimate_spread`` does, per cell and metric; with
``delta = log x_first - log x_second`` per repeat::

    rho_g     = sum delta_g delta_p / sum 2 (start_sd_g start_sd_p + repeat_sd_g repeat_sd_p)
    rho_cells = sum_w sum_{c<c'} D_wc D_wc' / sum_w sum_{c<c'} 2 start_sd_c start_sd_c'

(``D_wc``: window w's mean delta of the metric in cell c; ``kappa_g`` likewise on the
guard), clipped to [-1, 1] and [0, 1]. A correlation resting on fewer than
``MIN_CORRELATION_WINDOWS`` windows is *thin*: its value is ``None`` and the power figures
assume the conservative end of [0, 1] figure by figure (``Win2Noise.scenarios``: every
figure moves one way as each correlation grows, so the two corners, all thin ones 0 and
all 1, hold the worst of each). A guard without data is assumed to spread as the primary.

pp3-v1: one spread (blocks and pairs) and the contexts' base rates. Pilot files: ``runner.decide.pilot``.

Pure: numbers in, values out.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .spread import Spread, estimate_spread

__all__ = ["GUARDS", "METRICS", "MIN_CORRELATION_WINDOWS", "NOT_NEEDED", "PRIMARY", "ControlPair", "Correlation",
           "Pp3Noise", "Win2Noise", "Win2Scenario", "estimate_win2_noise", "guard_correlation",
           "spread_of_metric"]

PRIMARY = "pooled_rate_tps"
GUARDS = ("accepted_per_round", "decode_tps")
METRICS = (PRIMARY, *GUARDS)
MIN_CORRELATION_WINDOWS = 6
"""Windows a correlation must rest on to be used as estimated; fewer: thin, the conservative value is assumed."""
CORNERS = (0.0, 1.0)
"""A thin correlation's range: a slower engine session is slower in every cell, and at the client, never faster."""


@dataclass(frozen=True)
class Correlation:
    """A correlation of the noise model and what it rests on (``value`` None: too thin to estimate)."""

    value: float | None
    windows: int
    source: str          # archive, pilot, in-window, or "not needed" (no spread it could act on)

    @property
    def thin(self) -> bool:
        return self.value is None

    def to_json(self) -> dict[str, Any]:
        return {"value": self.value, "windows": self.windows, "source": self.source, "thin": self.thin}


NOT_NEEDED = Correlation(0.0, 0, "not needed")


@dataclass(frozen=True)
class Win2Scenario:
    """Every parameter of the win2-v1 noise model, none assumed open: what ``power_win2`` simulates."""

    start_sd: tuple[tuple[float, ...], ...]    # [cell][metric], METRICS order
    repeat_sd: tuple[tuple[float, ...], ...]
    guard_correlation: tuple[float, ...]       # per guard, with the primary
    cell_correlation: float                    # of the rate's start offsets across cells
    guard_cell_correlation: tuple[float, ...] = (0.0, 0.0)   # of each guard's start offsets across cells
    assumed: Mapping[str, float] = field(default_factory=dict)   # the thin correlations' values here

    def own_cell_correlation(self, guard: int) -> float:
        """The cross-cell correlation of the guard's own part (beside what it shares with the rate)."""
        rho = self.guard_correlation[guard]
        if rho * rho >= 1:
            return 0.0
        own = (self.guard_cell_correlation[guard] - rho * rho * self.cell_correlation) / (1 - rho * rho)
        return min(1.0, max(0.0, own))

    def beta(self, cell: int, guard: int) -> float:
        """How a true effect on the primary moves guard ``guard`` of ``cell``: its log change per log change.

        The guard's regression on the primary over control-start noise, clipped to [0, 1]:
        a faster candidate is assumed to move a guard with it as a faster start does, at most
        one for one, and never to worsen it (a candidate that worsens a guard is what the
        guard is there to catch, not a question of power).
        """
        m = 1 + guard
        sd_g = math.hypot(self.start_sd[cell][m], self.repeat_sd[cell][m])
        sd_p = math.hypot(self.start_sd[cell][0], self.repeat_sd[cell][0])
        ratio = sd_g / sd_p if sd_p > 0 else 1.0
        return min(1.0, max(0.0, self.guard_correlation[guard] * ratio))


@dataclass(frozen=True)
class Win2Noise:
    """What is known of the win2-v1 noise model per decision cell, and what is not."""

    cells: tuple[str, ...]
    primary: tuple[Spread, ...]                        # per cell
    guards: tuple[tuple[Spread | None, ...], ...]      # per cell, GUARDS order; None: no data
    guard_correlation: tuple[Correlation, ...]         # per guard (pooled over cells)
    cell_correlation: Correlation                      # the rate's start offsets across cells
    guard_cell_correlation: tuple[Correlation, ...] = (NOT_NEEDED, NOT_NEEDED)   # each guard's

    @classmethod
    def of(cls, spreads: Sequence[Spread], *, cells: Sequence[str] | None = None,
           guards: Sequence[Sequence[Spread | None]] | None = None,
           guard_correlation: Sequence[float | None] = (1.0, 1.0),
           cell_correlation: float | None = 1.0,
           guard_cell_correlation: Sequence[float | None] | None = None) -> Win2Noise:
        """A noise model from its parts (guards default: neutral, a zero spread; correlations: given values).

        ``guard_cell_correlation`` defaults to ``cell_correlation`` for both guards.
        """
        names = tuple(cells) if cells is not None else tuple(f"c{i + 1}" for i in range(len(spreads)))
        zero = Spread(0.0, 0.0, 0, 0, "pilot")
        held = tuple(tuple(g) for g in guards) if guards is not None else tuple((zero, zero) for _ in spreads)
        corr = tuple(Correlation(v, 0, "pilot") for v in guard_correlation)
        across = (cell_correlation, cell_correlation) if guard_cell_correlation is None else guard_cell_correlation
        return cls(names, tuple(spreads), held, corr, Correlation(cell_correlation, 0, "pilot"),
                   tuple(Correlation(v, 0, "pilot") for v in across)).settled()

    def guard_spread(self, cell: int, guard: int) -> Spread:
        """The guard's spread (a guard without data is assumed to spread as the primary)."""
        own = self.guards[cell][guard]
        return own if own is not None else self.primary[cell]

    def settled(self) -> Win2Noise:
        """The same model with the correlations no spread can act on marked "not needed"."""
        def moving(sd: Spread) -> bool:
            return sd.start_sd > 0 or sd.repeat_sd > 0

        cells = range(len(self.cells))
        guard_corr = tuple(c if any(moving(self.guard_spread(i, g)) for i in cells) else NOT_NEEDED
                           for g, c in enumerate(self.guard_correlation))
        cell_corr = self.cell_correlation if sum(self.primary[i].start_sd > 0 for i in cells) >= 2 else NOT_NEEDED
        guard_cells = tuple(c if sum(self.guard_spread(i, g).start_sd > 0 for i in cells) >= 2 else NOT_NEEDED
                            for g, c in enumerate(self.guard_cell_correlation))
        return Win2Noise(self.cells, self.primary, self.guards, guard_corr, cell_corr, guard_cells)

    def _named(self) -> list[tuple[str, Correlation]]:
        return [("cells", self.cell_correlation), *zip(GUARDS, self.guard_correlation, strict=True),
                *((f"cells_{g}", c) for g, c in zip(GUARDS, self.guard_cell_correlation, strict=True))]

    def thin(self) -> list[str]:
        """The names of the correlations assumed, not estimated: ``cells`` (the rate's across cells), each
        guard's with the rate, ``cells_<guard>`` (the guard's across cells)."""
        return [name for name, c in self._named() if c.thin]

    def scenarios(self) -> list[Win2Scenario]:
        """The scenarios to simulate: one, or when a correlation is thin the two corners (every thin one 0, then 1).

        Each figure moves one way as any correlation grows (P(WIN) and the false-WIN rate up:
        cells win together and guards follow the rate; the false-LOSS rate and the MDE down:
        LOSSes overlap), so the worst of each figure is at one of the two corners.
        """
        thin = self.thin()
        corners = [dict.fromkeys(thin, v) for v in CORNERS] if thin else [{}]
        sd = [[self.primary[i]] + [self.guard_spread(i, g) for g in range(len(GUARDS))]
              for i in range(len(self.cells))]

        def value(name: str, c: Correlation, assumed: Mapping[str, float]) -> float:
            return assumed.get(name, c.value if c.value is not None else 0.0)

        return [Win2Scenario(
            tuple(tuple(s.start_sd for s in row) for row in sd),
            tuple(tuple(s.repeat_sd for s in row) for row in sd),
            tuple(value(g, c, assumed) for g, c in zip(GUARDS, self.guard_correlation, strict=True)),
            value("cells", self.cell_correlation, assumed),
            tuple(value(f"cells_{g}", c, assumed) for g, c in zip(GUARDS, self.guard_cell_correlation, strict=True)),
            assumed) for assumed in corners]

    def to_json(self) -> dict[str, Any]:
        return {
            "guards": {cell: {g: (None if s is None else s.to_json()) for g, s in zip(GUARDS, row, strict=True)}
                       for cell, row in zip(self.cells, self.guards, strict=True)},
            "correlations": {name: c.to_json() for name, c in self._named()},
        }


@dataclass(frozen=True)
class Pp3Noise:
    """The pp3-v1 noise model: one spread, and the contexts' base rates (``None``: not known, equal assumed)."""

    spread: Spread
    rates: tuple[float, ...] | None = None     # per design context
    rates_source: str = "assumed equal"

    def to_json(self, contexts: Sequence[str]) -> dict[str, Any]:
        return {"rates": None if self.rates is None else dict(zip(contexts, self.rates, strict=True)),
                "source": self.rates_source}


# --------------------------------------------------------------------------- estimation

@dataclass(frozen=True)
class ControlPair:
    """One window's two control starts of one cell: per metric, their per-repeat values (None: missing)."""

    window: str
    first: Mapping[str, Sequence[float | None]]
    second: Mapping[str, Sequence[float | None]]

    def matched(self, *metrics: str) -> list[int]:
        """The repeats every named metric has, positive, in both starts."""
        units = min(len(self.first.get(m) or ()) for m in metrics) if metrics else 0
        units = min(units, *(len(self.second.get(m) or ()) for m in metrics))
        return [u for u in range(units)
                if all(_positive(self.first[m][u]) and _positive(self.second[m][u]) for m in metrics)]

    def deltas(self, metric: str, units: Sequence[int]) -> list[float]:
        return [math.log(float(self.first[metric][u] or 0.0)) - math.log(float(self.second[metric][u] or 0.0))
                for u in units]


def _positive(value: float | None) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0 and math.isfinite(value)


def spread_of_metric(pairs: Sequence[ControlPair], metric: str, source: str, entries: int | None) -> Spread | None:
    matched = []
    for pair in pairs:
        units = pair.matched(metric)
        if units:
            matched.append(([float(pair.first[metric][u] or 0.0) for u in units],
                            [float(pair.second[metric][u] or 0.0) for u in units]))
    return estimate_spread(matched, source=source, entries=entries) if matched else None


def guard_correlation(pairs: Mapping[str, Sequence[ControlPair]], primary: Mapping[str, Spread | None],
                       guards: Mapping[str, Spread | None], guard: str, source: str) -> Correlation:
    num = den = 0.0
    windows: set[str] = set()
    for cell, cell_pairs in pairs.items():
        sp, sg = primary.get(cell), guards.get(cell)
        if sp is None or sg is None:
            continue
        scale = 2 * (sp.start_sd * sg.start_sd + sp.repeat_sd * sg.repeat_sd)
        for pair in cell_pairs:
            units = pair.matched(PRIMARY, guard)
            if not units:
                continue
            num += math.fsum(x * y for x, y in zip(pair.deltas(PRIMARY, units), pair.deltas(guard, units),
                                                   strict=True))
            den += scale * len(units)
            windows.add(pair.window)
    if den <= 0:
        return Correlation(None, len(windows), source) if not windows else NOT_NEEDED
    if len(windows) < MIN_CORRELATION_WINDOWS:
        return Correlation(None, len(windows), source)
    return Correlation(min(1.0, max(-1.0, num / den)), len(windows), source)


def _cell_correlation(pairs: Mapping[str, Sequence[ControlPair]], spreads: Mapping[str, Spread | None],
                      source: str, metric: str = PRIMARY) -> Correlation:
    """The correlation of ``metric``'s start offsets across cells (windows with both control starts in two cells)."""
    by_window: dict[str, dict[str, float]] = {}
    for cell, cell_pairs in pairs.items():
        if spreads.get(cell) is None:
            continue
        for pair in cell_pairs:
            units = pair.matched(metric)
            if units:
                by_window.setdefault(pair.window, {})[cell] = math.fsum(pair.deltas(metric, units)) / len(units)
    num = den = 0.0
    windows = 0
    for means in by_window.values():
        cells = sorted(means)
        if len(cells) < 2:
            continue
        windows += 1
        for a, b in itertools.combinations(cells, 2):
            sa, sb = spreads.get(a), spreads.get(b)
            if sa is None or sb is None:
                continue
            num += means[a] * means[b]
            den += 2 * sa.start_sd * sb.start_sd
    if windows < MIN_CORRELATION_WINDOWS:
        return Correlation(None, windows, source)
    if den <= 0:
        return Correlation(0.0, windows, source)   # no start-to-start spread: the value cannot matter
    return Correlation(min(1.0, max(0.0, num / den)), windows, source)


def estimate_win2_noise(cells: Sequence[str], pairs: Mapping[str, Sequence[ControlPair]], *, source: str,
                        entries: Mapping[str, int] | None = None) -> tuple[dict[str, Spread | None], Win2Noise | None]:
    """Per cell the primary's spread (``None``: none), and the whole noise model (``None`` if a cell has none)."""
    primary = {c: spread_of_metric(pairs.get(c, ()), PRIMARY, source, None if entries is None else entries[c])
               for c in cells}
    guards = {g: {c: spread_of_metric(pairs.get(c, ()), g, source, None if entries is None else entries[c])
                  for c in cells} for g in GUARDS}
    chosen = [primary[c] for c in cells]
    if any(s is None for s in chosen):
        return primary, None
    noise = Win2Noise(
        tuple(cells), tuple(s for s in chosen if s is not None),
        tuple(tuple(guards[g][c] for g in GUARDS) for c in cells),
        tuple(guard_correlation(pairs, primary, guards[g], g, source) for g in GUARDS),
        _cell_correlation(pairs, primary, source) if len(cells) > 1 else NOT_NEEDED,
        tuple(_cell_correlation(pairs, guards[g], source, g) if len(cells) > 1 else NOT_NEEDED for g in GUARDS),
    )
    return primary, noise.settled()
