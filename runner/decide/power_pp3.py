"""pp3-v1 windows simulated with per-context base rates and bounded decode runs (power model 2, ``docs/power.md``).

Block ``b`` (A1 B1 B2 A2), family ``f`` and context ``c`` run at ``rate_c * exp(a_b + e_bfc)``
(times ``1 + E`` in the B blocks): ``rate_c`` the context's base rate, ``a_b ~ N(0,
start_sd^2)`` the block's engine session, shared by every pair of the block, ``e_bfc ~ N(0,
repeat_sd^2)`` the pair's own. One run per block and pair: in a design with a decode bound
(seed 003: "delivered tokens and complete target rounds are counted without requiring a
fixed token count") the run is cut at the bound and delivers ``rate * bound`` tokens; without
one it delivers ``max_tokens`` in ``max_tokens / rate`` seconds. The base rates weigh the
pooled gain: fast contexts deliver more of a bounded design's tokens, slow ones take more
of a fixed-token design's seconds. The gain, the source-cluster bootstrap (the rule's own
resample indices) and CANDIDATE are computed as ``pp3.decide`` computes them; TTFT and p95
round time are equal in every block, so the per-pair guards never refuse.

Windows are drawn in chunks of ``CHUNK`` from streams keyed by (seed, chunk, family,
context): window ``i`` is the same whatever ``n``, and a design with one more family keeps
every other draw. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from . import pp3
from .power_sim import Pp3Gains, left_sum

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from .noise import Pp3Noise
    from .power_sim import Pp3Design

    Array = npt.NDArray[np.float64]

__all__ = ["CHUNK", "Pp3Sim"]

CHUNK = 4096
TAG = 30
_BOOT = 256                 # windows bootstrapped at a time (memory: this many x resamples x families)
_TOKEN_SCALE = 2**20        # a bounded run's tokens as an integer for the rule: rate x bound x this


def _rng(seed: int, *key: int) -> np.random.Generator:
    import numpy as np

    return np.random.default_rng([seed, TAG, *key])


class Pp3Sim(Pp3Gains):
    """``n`` seeded pp3-v1 windows of ``design`` under ``noise``: gains and bootstrap bounds at effect 0."""

    def __init__(self, design: Pp3Design, noise: Pp3Noise, n: int, seed: int) -> None:
        import numpy as np

        self.design = design
        self.noise = noise
        self.n = n
        self.seed = seed
        contexts = len(design.contexts)
        self.base = np.asarray(noise.rates if noise.rates is not None else [1.0] * contexts, dtype=np.float64)
        self._point0: Array | None = None
        self._lower0: Array | None = None

    def _rates(self, chunk: int) -> Array:
        """(windows, block, family, context) rates at effect 0 of one chunk."""
        import numpy as np

        size = min(CHUNK, self.n - chunk * CHUNK)
        k, c = len(self.design.families), len(self.design.contexts)
        spread = self.noise.spread
        a = _rng(self.seed, chunk, 0).standard_normal((size, 4))
        e = np.empty((size, 4, k, c))
        for f in range(k):
            for ci in range(c):
                e[:, :, f, ci] = _rng(self.seed, chunk, 1, f, ci).standard_normal((size, 4))
        log = spread.start_sd * a[:, :, None, None] + spread.repeat_sd * e
        rates: Array = self.base[None, None, None, :] * np.exp(log)
        return rates

    def _runs(self, rates: Array) -> tuple[Array, Array]:
        """Delivered tokens and decode seconds of every run (bounded: cut at the bound)."""
        import numpy as np

        bound = self.design.bound_s
        if bound is not None:
            return rates * bound, np.full(rates.shape, float(bound))
        tokens = float(self.design.tokens)
        return np.full(rates.shape, tokens), tokens / rates

    def _base(self) -> tuple[Array, Array]:
        """Point gain and bootstrap lower bound of every window at effect 0 (the rule's formulas)."""
        import numpy as np

        if self._point0 is not None and self._lower0 is not None:
            return self._point0, self._lower0
        p = self.design.params
        k = len(self.design.families)
        idx = np.random.default_rng(p.seed).integers(0, k, size=(p.bootstrap, k))
        q = (1 - p.interval) / 2
        points, lowers = [], []
        for chunk in range((self.n + CHUNK - 1) // CHUNK):
            tokens, decode = self._runs(self._rates(chunk))
            tok_a = tokens[:, [0, 3]].sum(axis=(1, 3))       # blocks A1, A2 -> (windows, family)
            tok_b = tokens[:, [1, 2]].sum(axis=(1, 3))
            dec_a = decode[:, [0, 3]].sum(axis=(1, 3))
            dec_b = decode[:, [1, 2]].sum(axis=(1, 3))
            points.append((left_sum(tok_b) / left_sum(dec_b)) / (left_sum(tok_a) / left_sum(dec_a)) - 1.0)
            lower = np.empty(tok_a.shape[0])
            for lo in range(0, tok_a.shape[0], _BOOT):
                sums = [v[lo:lo + _BOOT] for v in (tok_b, dec_b, tok_a, dec_a)]
                acc = [s[:, idx[:, 0]] for s in sums]
                for m in range(1, k):
                    acc = [a + s[:, idx[:, m]] for a, s in zip(acc, sums, strict=True)]
                gains = (acc[0] / acc[1]) / (acc[2] / acc[3]) - 1.0
                lower[lo:lo + _BOOT] = np.quantile(gains, q, axis=1)
            lowers.append(lower)
        self._point0, self._lower0 = np.concatenate(points), np.concatenate(lowers)
        return self._point0, self._lower0

    def evaluate(self, effects: Sequence[float], *, thresholds: bool = True) -> tuple[list[dict[str, int]],
                                                                                      Array | None]:
        return [self.counts(e) for e in effects], (self.thresholds() if thresholds else None)

    def rule_input(self, index: int, effect: float) -> pp3.Pp3Input:
        """Window ``index`` as a pp3-v1 input: one run per block and pair (bounded runs: status ``bounded``)."""
        rates = self._rates(index // CHUNK)[index % CHUNK]
        bound = self.design.bound_s
        requests: list[pp3.Request] = []
        for bi, block in enumerate(pp3.BLOCKS):
            arm = block[0]
            for fi, family in enumerate(self.design.families):
                for ci, context in enumerate(self.design.contexts):
                    rate = float(rates[bi, fi, ci]) * ((1.0 + effect) if arm == "B" else 1.0)
                    if bound is not None:
                        request = pp3.Request(len(requests), block, arm, family, context, "bounded",
                                              round(rate * bound * _TOKEN_SCALE), float(bound), 0.1, 10.0)
                    else:
                        t = self.design.tokens
                        request = pp3.Request(len(requests), block, arm, family, context, "ok", t, t / rate, 0.1, 10.0)
                    requests.append(request)
        return pp3.Pp3Input(self.design.params, True, (), tuple(requests))
