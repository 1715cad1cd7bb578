"""The decision rules' distribution functions are scipy.stats's, bit for bit, without importing scipy.stats.

``scipy.special`` imports in about a third of ``scipy.stats``'s time, a cost every window's decision
step paid; the functions below are the ones scipy.stats calls, so recorded decisions recompute to the
same bits (a grid of the cases the rules meet, and beyond).
"""

from __future__ import annotations

import math
import random

from scipy.stats import norm, t

from runner.decide.paired import paired_p_value, t_quantile
from runner.decide.spending import _normal_quantile


def test_the_t_quantile_is_scipy_stats_t_ppf_to_the_bit() -> None:
    for df in range(1, 400):
        for confidence in (0.5, 0.8, 0.9, 0.95, 0.975, 0.99, 0.995, 0.999):
            assert t_quantile(confidence, df) == float(t.ppf(1 - (1 - confidence) / 2, df)), (confidence, df)


def test_the_paired_p_value_is_two_t_sf_to_the_bit() -> None:
    rng = random.Random(5)
    for _ in range(3000):
        d = [rng.gauss(rng.choice([0.0, 0.01, 0.2]), rng.choice([0.001, 0.05, 1.0])) for _ in range(rng.randint(2, 40))]
        mean = math.fsum(d) / len(d)
        sd = math.sqrt(math.fsum((x - mean) * (x - mean) for x in d) / (len(d) - 1))
        stat = mean / (sd / math.sqrt(len(d)))
        assert paired_p_value(d) == float(2 * t.sf(abs(stat), len(d) - 1))


def test_the_normal_quantile_is_scipy_stats_norm_ppf_to_the_bit() -> None:
    rng = random.Random(6)
    for p in [rng.random() for _ in range(5000)] + [1e-12, 0.025, 0.5, 0.975, 1 - 1e-12]:
        assert _normal_quantile(p) == float(norm.ppf(p))
