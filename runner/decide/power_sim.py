"""Simulated windows for power figures: vectorised, and one by one through the rules' own ``decide``.

The noise model (``runner.decide.spread``, ``docs/power.md``) drawn for ``n`` windows:

* **win2-v1**, per decision cell: the candidate's ratio to the mean of the two bracketing
  controls in repeat ``r`` is ``(1 + E) * (1 + b + eps_r)``, so ``d_r = (1 + E)(1 + b +
  eps_r) - 1``; ``b ~ N(0, 1.5 start_sd^2)`` is shared by the window's repeats (the
  candidate's start offset less the mean of the controls'), ``eps_r ~ N(0, 1.5
  repeat_sd^2)`` is each repeat's own. Guards (accepted per round, client decode rate)
  are held equal across starts: the archive records no guard spread, and a guard can only
  turn a WIN into a LOSS.
* **pp3-v1**: block ``b`` and pair ``p`` run at ``exp(a_b + e_bp)`` (times ``1 + E`` in
  the B blocks), ``a_b ~ N(0, start_sd^2)``, ``e_bp ~ N(0, repeat_sd^2)``; one request
  of ``tokens`` tokens per block and pair; TTFT and p95 round time equal in every block.

``Win2Draws`` / ``Pp3Draws`` hold the noise of ``n`` seeded windows; ``outcomes(E)`` gives
each window's decision at true effect ``E`` computed with numpy exactly as the rule
computes it (same formulas, same bootstrap indices), ``thresholds()`` the smallest effect
at which each window decides WIN / CANDIDATE. ``rule_outcomes`` runs the same windows
through ``win2.decide`` / ``pp3.decide``: the reference the vectorised path is tested
against. Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import pp3, win2
from .paired import t_quantile
from .spread import Spread

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Array = npt.NDArray[np.float64]

__all__ = ["Pp3Design", "Pp3Draws", "Pp3Gains", "Win2Design", "Win2Draws", "left_sum", "rule_outcomes"]

_FAMILIES = ("f1", "f2")          # win2-v1 pools one wave per source family
_ROUNDS, _ACCEPTED, _DECODE_S = 200, 300, 10.0   # one simulated wave: rate (R + A) / D = 50 tok/s
_CHUNK = 256                      # pp3 windows bootstrapped at a time (memory: chunk x resamples)


@dataclass(frozen=True)
class Win2Design:
    cells: tuple[str, ...]
    params: win2.Win2Params

    @property
    def repeats(self) -> int:
        return self.params.repeats


@dataclass(frozen=True)
class Pp3Design:
    families: tuple[str, ...]
    contexts: tuple[str, ...]
    params: pp3.Pp3Params
    tokens: int = 512
    bound_s: float | None = None    # the decode bound (model 2 cuts every run there; model 1 ignores it)

    @property
    def pairs(self) -> int:
        return len(self.families) * len(self.contexts)


def _rng(seed: int, *key: int) -> np.random.Generator:
    import numpy as np

    return np.random.default_rng([seed, *key])


class Win2Draws:
    """The noise of ``n`` seeded win2-v1 windows: ``ratio[c]`` is cell c's (n, repeats) ``1 + b + eps``."""

    def __init__(self, design: Win2Design, spreads: Sequence[Spread], n: int, seed: int) -> None:
        import numpy as np

        self.design = design
        self.n = n
        reps = design.repeats
        self.ratio: list[Array] = []
        for index, spread in enumerate(spreads):
            rng = _rng(seed, 2, reps, index)
            b = rng.standard_normal((n, 1)) * (math.sqrt(1.5) * spread.start_sd)
            eps = rng.standard_normal((n, reps)) * (math.sqrt(1.5) * spread.repeat_sd)
            self.ratio.append(np.maximum(1.0 + b + eps, 1e-3))

    def _cells(self, effect: float) -> tuple[list[Array], list[Array]]:
        import numpy as np

        p = self.design.params
        reps = p.repeats
        t = t_quantile(p.confidence, reps - 1)
        wins, losses = [], []
        for ratio in self.ratio:
            d = (1.0 + effect) * ratio - 1.0
            point = d.sum(axis=1) / reps
            sd = np.sqrt(((d - point[:, None]) ** 2).sum(axis=1) / (reps - 1))
            half = t * sd / math.sqrt(reps)
            wins.append((point > p.bar) & (point - half > 0))
            losses.append((point < -p.bar) & (point + half < 0))
        return wins, losses

    def outcomes(self, effect: float) -> list[str]:
        """Each window's decision (WIN / NO_CHANGE / LOSS) at true effect ``effect``."""
        import numpy as np

        wins, losses = self._cells(effect)
        win = np.logical_and.reduce(wins)
        loss = np.logical_or.reduce(losses)
        return ["LOSS" if lo else "WIN" if w else "NO_CHANGE" for w, lo in zip(win, loss, strict=True)]

    def counts(self, effect: float) -> dict[str, int]:
        import numpy as np

        wins, losses = self._cells(effect)
        loss = np.logical_or.reduce(losses)
        win = np.logical_and.reduce(wins) & ~loss
        return {"WIN": int(win.sum()), "NO_CHANGE": int(self.n - win.sum() - loss.sum()), "LOSS": int(loss.sum())}

    def thresholds(self) -> Array:
        """Per window, the effect above which it decides WIN (``inf``: at none)."""
        import numpy as np

        p = self.design.params
        reps = p.repeats
        t = t_quantile(p.confidence, reps - 1)
        worst = np.full(self.n, -np.inf)
        for ratio in self.ratio:
            mean = ratio.sum(axis=1) / reps
            sd = np.sqrt(((ratio - mean[:, None]) ** 2).sum(axis=1) / (reps - 1))
            low = mean - t * sd / math.sqrt(reps)
            with np.errstate(divide="ignore"):
                need = np.where(low > 0, np.maximum((1.0 + p.bar) / mean, 1.0 / np.where(low > 0, low, 1.0)),
                                np.inf) - 1.0
            worst = np.maximum(worst, need)
        return worst

    def rule_input(self, index: int, effect: float) -> win2.Win2Input:
        """Window ``index`` as a win2-v1 input: controls at the base rate, the candidate at ``(1+E) * ratio``."""
        p = self.design.params
        waves: list[win2.Wave] = []
        for ci, cell in enumerate(self.design.cells):
            for r in range(1, p.repeats + 1):
                x = (1.0 + effect) * float(self.ratio[ci][index, r - 1])
                for start in win2.STARTS:
                    scale = x if start == "s2" else 1.0
                    for family in _FAMILIES:
                        waves.append(win2.Wave(len(waves), start, cell, r, family, _ROUNDS, _ACCEPTED,
                                               _DECODE_S / scale, (0.1,), _ROUNDS + _ACCEPTED, _DECODE_S))
        starts = {s: win2.StartInfo("B" if s == "s2" else "A", None) for s in win2.STARTS}
        return win2.Win2Input(p, self.design.cells, None, starts, 0, tuple(waves), ())


class Pp3Gains:
    """pp3-v1 windows' decisions from their point gains and bootstrap lower bounds at effect 0 (``_base``): a
    true effect ``E`` scales every gain, ``1 + g -> (1 + E)(1 + g)``, so every effect is decided from one draw."""

    design: Pp3Design
    n: int

    def _base(self) -> tuple[Array, Array]:
        raise NotImplementedError

    def _candidate(self, effect: float) -> npt.NDArray[np.bool_]:
        point0, lower0 = self._base()
        p = self.design.params
        point = (1.0 + effect) * (1.0 + point0) - 1.0
        lower = (1.0 + effect) * (1.0 + lower0) - 1.0
        result: npt.NDArray[np.bool_] = (point >= p.min_gain) & (lower > 0)
        return result

    def outcomes(self, effect: float) -> list[str]:
        return ["CANDIDATE" if ok else "NO_PROMOTION" for ok in self._candidate(effect)]

    def counts(self, effect: float) -> dict[str, int]:
        ok = int(self._candidate(effect).sum())
        return {"CANDIDATE": ok, "NO_PROMOTION": self.n - ok}

    def thresholds(self) -> Array:
        """Per window, the smallest true effect at which it decides CANDIDATE (the effect scales every gain)."""
        import numpy as np

        point0, lower0 = self._base()
        p = self.design.params
        with np.errstate(divide="ignore"):
            need = np.maximum((1.0 + p.min_gain) / (1.0 + point0), np.where(lower0 > -1, 1.0 / (1.0 + lower0), np.inf))
        result: Array = need - 1.0
        return result


class Pp3Draws(Pp3Gains):
    """The noise of ``n`` seeded pp3-v1 windows: ``log_rate`` (n, 4 blocks, families, contexts)."""

    def __init__(self, design: Pp3Design, spread: Spread, n: int, seed: int) -> None:
        import numpy as np

        self.design = design
        self.n = n
        k, c = len(design.families), len(design.contexts)
        rng = _rng(seed, 3, k, c)
        a = rng.standard_normal((n, 4, 1, 1)) * spread.start_sd
        e = rng.standard_normal((n, 4, k, c)) * spread.repeat_sd
        self.rate = np.exp(a + e)
        self._point0: Array | None = None
        self._lower0: Array | None = None

    def _base(self) -> tuple[Array, Array]:
        """Point gain and bootstrap lower bound of every window at effect 0 (the rule's formulas)."""
        import numpy as np

        if self._point0 is not None and self._lower0 is not None:
            return self._point0, self._lower0
        p = self.design.params
        t = float(self.design.tokens)
        k, c = len(self.design.families), len(self.design.contexts)
        decode = t / self.rate                           # (n, block, family, context)
        dec_a = decode[:, [0, 3]].sum(axis=(1, 3))        # blocks A1, A2 -> (n, k)
        dec_b = decode[:, [1, 2]].sum(axis=(1, 3))
        tok = 2.0 * c * t                                 # every family's tokens per arm
        tb_all, ta_all = tok * k, tok * k
        point = (tb_all / left_sum(dec_b)) / (ta_all / left_sum(dec_a)) - 1.0
        idx = np.random.default_rng(p.seed).integers(0, k, size=(p.bootstrap, k))
        lower = np.empty(self.n)
        q = (1 - p.interval) / 2
        for lo in range(0, self.n, _CHUNK):
            da, db = dec_a[lo:lo + _CHUNK], dec_b[lo:lo + _CHUNK]
            acc_a, acc_b = da[:, idx[:, 0]], db[:, idx[:, 0]]
            for m in range(1, k):
                acc_a = acc_a + da[:, idx[:, m]]
                acc_b = acc_b + db[:, idx[:, m]]
            tot = tok * k
            gains = (tot / acc_b) / (tot / acc_a) - 1.0
            lower[lo:lo + _CHUNK] = np.quantile(gains, q, axis=1)
        self._point0, self._lower0 = point, lower
        return point, lower

    def rule_input(self, index: int, effect: float) -> pp3.Pp3Input:
        """Window ``index`` as a pp3-v1 input: one request per block and pair."""
        requests: list[pp3.Request] = []
        t = self.design.tokens
        for bi, block in enumerate(pp3.BLOCKS):
            arm = block[0]
            for fi, family in enumerate(self.design.families):
                for ci, context in enumerate(self.design.contexts):
                    rate = float(self.rate[index, bi, fi, ci]) * ((1.0 + effect) if arm == "B" else 1.0)
                    requests.append(pp3.Request(len(requests), block, arm, family, context, "ok", t, t / rate,
                                                0.1, 10.0))
        return pp3.Pp3Input(self.design.params, True, (), tuple(requests))


def left_sum(columns: Array) -> Array:
    """Left-to-right sum over the last axis (as the rule adds the families)."""
    total = columns[..., 0]
    for m in range(1, columns.shape[-1]):
        total = total + columns[..., m]
    return total


def rule_outcomes(draws: Win2Draws | Pp3Draws, effect: float, indices: Sequence[int]) -> list[str]:
    """The decisions of the given windows, each built as a rule input and decided by the rule's own ``decide``."""
    out: list[str] = []
    for i in indices:
        if isinstance(draws, Win2Draws):
            out.append(str(win2.decide(draws.rule_input(i, effect))["decision"]))
        else:
            out.append(str(pp3.decide(draws.rule_input(i, effect))["decision"]))
    return out
