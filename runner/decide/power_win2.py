"""win2-v1 windows simulated with the data's structure (power model 2, ``docs/power.md``).

Every start of a window is drawn, not only the paired difference: for start ``s`` (s1, s2,
s3), decision cell ``c``, repeat ``r`` and metric ``m`` (``pooled_rate_tps``,
``accepted_per_round``, ``decode_tps``), ``x = base_m * exp(a_scm + e_scrm)``, with
``a_scm = start_sd_cm * z_scm`` and ``e_scrm = repeat_sd_cm * y_scrm`` and

* ``z_sc,primary = sqrt(rho_cells) w_s + sqrt(1 - rho_cells) u_sc``: a start's offset shared
  by its cells (``w_s``) and each cell's own part (``u_sc``);
* ``z_sc,g = rho_g z_sc,primary + sqrt(1 - rho_g^2) (sqrt(k) w_sg + sqrt(1 - k) u_scg)``,
  ``y_scr,g = rho_g y_scr,primary + sqrt(1 - rho_g^2) y'_scrg``: each guard correlated with
  the primary by ``rho_g`` at the start and at the repeat level, its start offsets across
  cells by ``kappa_g`` (``k``, its own part's share, ``Win2Scenario.own_cell_correlation``).

The candidate s2 runs at ``(1 + E)`` times its draw on the primary and ``(1 + E)^beta_g`` on
guard ``g`` (``Win2Scenario.beta``). Each window is then decided exactly as ``win2.decide``
decides it: per repeat the control is the mean of the two bracketing starts and ``d_r =
s2 / ((s1 + s3) / 2) - 1`` (the exact ratio), WIN when ``point > bar`` and the paired-t low
end is above 0; a guard LOSS when the candidate is below both controls in at least
``guard_min_repeats`` repeats; the decision WIN when every cell is WIN and LOSS when any is.
The values are recorded as the rule reads them from waves (``rule_input``): integer
rounds and accepted tokens, decode seconds, client tokens and seconds, so the vectorised
decisions and ``win2.decide`` on the same windows agree window by window.

Windows are drawn in chunks of ``CHUNK`` from streams keyed by (seed, chunk, cell, metric,
repeat): window ``i`` is the same whatever ``n``, and a design with one more repeat keeps
every other draw (so the repeats search compares like with like). Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import win2
from .paired import t_quantile

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from .noise import Win2Scenario
    from .power_sim import Win2Design

    Array = npt.NDArray[np.float64]

__all__ = ["CHUNK", "LOSS", "NO_CHANGE", "WIN", "Win2Sim", "decision_names"]

CHUNK = 4096                      # windows drawn (and decided) at a time
TAG = 20                          # the stream namespace of this model (model 1 used 2 and 3)
_FAMILIES = ("f1", "f2")          # a repeat pools one wave per source family
_WAVE_ROUNDS = 2**19              # rounds per wave; a repeat pools 2**20
_WAVE_TOKENS = 2**19              # client tokens after the first per wave
_BASE = (50.0, 1.5, 45.0)         # the level of rate (tok/s), accepted per round, client decode tok/s
NO_CHANGE, WIN, LOSS = 0, 1, 2
_NAMES = ("NO_CHANGE", "WIN", "LOSS")


def decision_names(codes: Sequence[int] | npt.NDArray[np.int8]) -> list[str]:
    return [_NAMES[int(c)] for c in codes]


def _rng(seed: int, *key: int) -> np.random.Generator:
    import numpy as np

    return np.random.default_rng([seed, TAG, *key])


@dataclass
class _Chunk:
    """``size`` windows' true values at effect 0: ``x[c]`` is (metric, window, start, repeat)."""

    x: list[Array]
    size: int


@dataclass(frozen=True)
class CellStatistics:
    """Per window, one cell's primary point / low / high and each guard's count of worse repeats."""

    point: Array
    low: Array
    high: Array
    worse: tuple[npt.NDArray[np.int64], ...]


class Win2Sim:
    """``n`` seeded win2-v1 windows of ``design`` under ``scenario``, decided as ``win2.decide`` decides them."""

    def __init__(self, design: Win2Design, scenario: Win2Scenario, n: int, seed: int) -> None:
        self.design = design
        self.scenario = scenario
        self.n = n
        self.seed = seed
        cells = len(design.cells)
        self.beta = [[scenario.beta(c, g) for g in range(2)] for c in range(cells)]
        self._last: tuple[int, _Chunk] | None = None   # the chunk rule_input drew last

    # ------------------------------------------------------------------ drawing

    def _draw(self, chunk: int) -> _Chunk:
        import numpy as np

        size = min(CHUNK, self.n - chunk * CHUNK)
        reps = self.design.repeats
        sc = self.scenario
        rc = sc.cell_correlation
        shared = [_rng(self.seed, chunk, 0, m).standard_normal((size, 3)) for m in range(3)]
        out = []
        for c in range(len(self.design.cells)):
            own = [_rng(self.seed, chunk, 1, c, m).standard_normal((size, 3)) for m in range(3)]
            rep = [np.stack([_rng(self.seed, chunk, 2, c, m, r).standard_normal((size, 3)) for r in range(reps)],
                            axis=2) for m in range(3)]
            across = [rc, sc.own_cell_correlation(0), sc.own_cell_correlation(1)]
            z = [math.sqrt(across[m]) * shared[m] + math.sqrt(1 - across[m]) * own[m] for m in range(3)]
            x = np.empty((3, size, 3, reps))
            for m in range(3):
                start, noise = z[0], rep[0]
                if m > 0:
                    rho = sc.guard_correlation[m - 1]
                    rest = math.sqrt(max(0.0, 1 - rho * rho))
                    start, noise = rho * z[0] + rest * z[m], rho * rep[0] + rest * rep[m]
                x[m] = _BASE[m] * np.exp(sc.start_sd[c][m] * start[:, :, None] + sc.repeat_sd[c][m] * noise)
            out.append(x)
        return _Chunk(out, size)

    def _chunks(self) -> Iterator[_Chunk]:
        for chunk in range((self.n + CHUNK - 1) // CHUNK):
            yield self._draw(chunk)

    # ------------------------------------------------------------------ as the rule reads them

    def _counters(self, x: Array, cell: int, effect: float) -> tuple[Array, Array, Array]:
        """Accepted tokens, decode seconds and client decode seconds per (window, start, repeat) at ``effect``.

        A repeat's two waves pool ``2**20`` rounds and ``2**20`` client tokens after the first;
        the candidate (s2) at ``(1 + E)`` times its rate and ``(1 + E)^beta`` times its guards.
        """
        import numpy as np

        rate, apr, dtps = x[0], x[1], x[2]
        if effect != 0.0:
            rate, apr, dtps = rate.copy(), apr.copy(), dtps.copy()
            rate[:, 1] *= 1.0 + effect
            apr[:, 1] *= (1.0 + effect) ** self.beta[cell][0]
            dtps[:, 1] *= (1.0 + effect) ** self.beta[cell][1]
        rounds = float(2 * _WAVE_ROUNDS)
        accepted = np.rint(rounds * apr)
        return accepted, (rounds + accepted) / rate, float(2 * _WAVE_TOKENS) / dtps

    def _recorded(self, x: Array, cell: int, effect: float) -> tuple[Array, Array, Array]:
        """Rate, accepted per round and client decode rate as ``win2.pooled_values`` computes them from the waves."""
        accepted, decode, client = self._counters(x, cell, effect)
        rounds = float(2 * _WAVE_ROUNDS)
        return (rounds + accepted) / decode, accepted / rounds, float(2 * _WAVE_TOKENS) / client

    def _cell_statistics(self, chunk: _Chunk, cell: int, effect: float) -> CellStatistics:
        import numpy as np

        p = self.design.params
        reps = p.repeats
        t = t_quantile(p.confidence, reps - 1)
        rate, apr, dtps = self._recorded(chunk.x[cell], cell, effect)
        d = rate[:, 1] / ((rate[:, 0] + rate[:, 2]) / 2) - 1.0
        point = d.sum(axis=1) / reps
        sd = np.sqrt(((d - point[:, None]) * (d - point[:, None])).sum(axis=1) / (reps - 1))
        half = t * sd / math.sqrt(reps)
        worse = tuple((g[:, 1] < np.minimum(g[:, 0], g[:, 2])).sum(axis=1) for g in (apr, dtps))
        return CellStatistics(point, point - half, point + half, worse)

    def _decide(self, chunk: _Chunk, effect: float) -> npt.NDArray[np.int8]:
        import numpy as np

        p = self.design.params
        win = np.ones(chunk.size, dtype=bool)
        loss = np.zeros(chunk.size, dtype=bool)
        for cell in range(len(self.design.cells)):
            s = self._cell_statistics(chunk, cell, effect)
            guard = np.logical_or.reduce([w >= p.guard_min_repeats for w in s.worse])
            primary_win = (s.point > p.bar) & (s.low > 0)
            primary_loss = (s.point < -p.bar) & (s.high < 0)
            loss |= guard | primary_loss
            win &= primary_win & ~guard
        codes = np.where(loss, LOSS, np.where(win, WIN, NO_CHANGE)).astype(np.int8)
        return codes

    def _thresholds(self, chunk: _Chunk) -> Array:
        """Per window, the smallest true effect at which it decides WIN (``inf``: none)."""
        import numpy as np

        p = self.design.params
        reps = p.repeats
        t = t_quantile(p.confidence, reps - 1)
        worst = np.full(chunk.size, -np.inf)
        k = p.guard_min_repeats
        for cell, x in enumerate(chunk.x):
            ratio = x[0][:, 1] / ((x[0][:, 0] + x[0][:, 2]) / 2)
            mean = ratio.sum(axis=1) / reps
            sd = np.sqrt(((ratio - mean[:, None]) ** 2).sum(axis=1) / (reps - 1))
            low = mean - t * sd / math.sqrt(reps)
            with np.errstate(divide="ignore"):
                need = np.where(low > 0, np.maximum((1.0 + p.bar) / mean, 1.0 / np.where(low > 0, low, 1.0)),
                                np.inf) - 1.0
            worst = np.maximum(worst, need)
            if k > reps:
                continue
            for g in range(2):
                values = x[1 + g]
                floor = np.minimum(values[:, 0], values[:, 2])
                below = values[:, 1] < floor
                beta = self.beta[cell][g]
                if beta > 0:
                    with np.errstate(all="ignore"):   # a tiny beta: the crossing is far off (inf)
                        cross = np.where(below, (floor / values[:, 1]) ** (1.0 / beta) - 1.0, -np.inf)
                else:
                    cross = np.where(below, np.inf, -np.inf)
                # LOSS while at least k repeats are still below both controls: up to the k-th largest crossing
                worst = np.maximum(worst, np.sort(cross, axis=1)[:, reps - k])
        return worst

    # ------------------------------------------------------------------ the whole sample

    def decisions(self, effect: float) -> npt.NDArray[np.int8]:
        """Each window's decision at true effect ``effect``: ``WIN``, ``NO_CHANGE`` or ``LOSS`` codes."""
        import numpy as np

        return np.concatenate([self._decide(chunk, effect) for chunk in self._chunks()])

    def evaluate(self, effects: Sequence[float], *, thresholds: bool = True) -> tuple[list[dict[str, int]],
                                                                                      Array | None]:
        """One pass: the outcome counts at each effect, and (optionally) every window's WIN threshold."""
        import numpy as np

        totals = [{"WIN": 0, "NO_CHANGE": 0, "LOSS": 0} for _ in effects]
        found: list[Array] = []
        for chunk in self._chunks():
            for total, effect in zip(totals, effects, strict=True):
                codes = self._decide(chunk, effect)
                for code, name in enumerate(_NAMES):
                    total[name] += int((codes == code).sum())
            if thresholds:
                found.append(self._thresholds(chunk))
        return totals, (np.concatenate(found) if thresholds else None)

    def thresholds(self) -> Array:
        _, found = self.evaluate((), thresholds=True)
        assert found is not None
        return found

    def counts(self, effect: float) -> dict[str, int]:
        return self.evaluate((effect,), thresholds=False)[0][0]

    def outcomes(self, effect: float) -> list[str]:
        return decision_names(self.decisions(effect))

    def cell_statistics(self, effect: float) -> list[CellStatistics]:
        """Per cell, every window's primary point / low / high and guard counts (for studies over many windows)."""
        import numpy as np

        parts = [[self._cell_statistics(chunk, c, effect) for c in range(len(self.design.cells))]
                 for chunk in self._chunks()]
        out = []
        for c in range(len(self.design.cells)):
            chosen = [part[c] for part in parts]
            out.append(CellStatistics(np.concatenate([s.point for s in chosen]),
                                      np.concatenate([s.low for s in chosen]),
                                      np.concatenate([s.high for s in chosen]),
                                      tuple(np.concatenate([s.worse[g] for s in chosen]) for g in range(2))))
        return out

    def rule_input(self, index: int, effect: float) -> win2.Win2Input:
        """Window ``index`` as a win2-v1 input: per start, cell, repeat and family one wave, counters as recorded."""
        if self._last is None or self._last[0] != index // CHUNK:
            self._last = (index // CHUNK, self._draw(index // CHUNK))
        chunk = self._last[1]
        i = index % CHUNK
        p = self.design.params
        waves: list[win2.Wave] = []
        for c, cell in enumerate(self.design.cells):
            accepted, decode, client = self._counters(chunk.x[c][:, i:i + 1], c, effect)
            for r in range(p.repeats):
                for si, start in enumerate(win2.STARTS):
                    total = int(accepted[0, si, r])
                    first = total // 2
                    seconds, waiting = float(decode[0, si, r]), float(client[0, si, r])
                    for family, share in zip(_FAMILIES, (first, total - first), strict=True):
                        waves.append(win2.Wave(len(waves), start, cell, r + 1, family, _WAVE_ROUNDS, share,
                                               seconds / 2, (0.1,), _WAVE_TOKENS, waiting / 2))
        starts = {s: win2.StartInfo("B" if s == "s2" else "A", None) for s in win2.STARTS}
        return win2.Win2Input(p, self.design.cells, None, starts, 0, tuple(waves), ())
