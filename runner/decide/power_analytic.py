"""The analytic power of win2-v1 under the noise model: the cross-check of the Monte Carlo (``docs/power.md``).

Per cell, ``d_r = E + (1 + E)(b + eps_r)`` with ``b ~ N(0, sb^2)`` shared by the window's
repeats and ``eps_r ~ N(0, se^2)`` (``sb^2 = 1.5 start_sd^2``, ``se^2 = 1.5 repeat_sd^2``).
Given ``b``, the mean of the ``n`` differences is ``N(m, s^2/n)`` with ``m = E + (1+E) b``
and ``s = (1+E) se``, and the sample sd is ``s * sqrt(q / (n-1))`` with ``q ~ chi2(n-1)``,
independent of the mean. The cell is WIN when ``mean > bar`` and ``mean - t sd / sqrt(n) >
0``, so::

    P(WIN | b) = integral over q of  P(mean > max(bar, t s sqrt(q/(n-1)) / sqrt(n)))

and LOSS is the mirror image. Without the bar the inner probability is the non-central t
tail ``P(T(n-1, m sqrt(n) / s) > t)`` (``interval_probability``, scipy's ``nct``). ``q`` is
integrated at ``Q`` chi-square quantile midpoints, ``b`` by Gauss-Hermite. The decision
is WIN when every decision cell is, LOSS when any is (cells independent).

``win2_outcomes_shared`` / ``win2_mde_shared`` are model 2's check: the cells' start offsets
share a part, ``b_c = sqrt(1.5) start_sd_c (sqrt(rho) v + sqrt(1 - rho) u_c)``, so the
decision integrates over the shared ``v`` (Gauss-Hermite) the product of the cells'
probabilities given ``v``. They still take the ratio's linear approximation and hold the
guards neutral: they agree with model 2's exact simulation where the spread is small and
the guards do not move (a test checks it), and depart from it where the spread is large
(the exact ratio lowers the MDE) or the guards are noisy (they only ever add LOSSes).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .paired import t_quantile
from .spread import Spread

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["interval_probability", "win2_cell", "win2_mde", "win2_mde_shared", "win2_outcomes", "win2_outcomes_shared"]

_HERMITE = 48
_Q = 2000


def win2_cell(effect: float, spread: Spread, repeats: int, bar: float, confidence: float) -> tuple[float, float]:
    """``(P(WIN), P(LOSS))`` of one decision cell's primary."""
    import numpy as np
    from scipy.stats import chi2, norm

    n = repeats
    t = t_quantile(confidence, n - 1)
    sb = math.sqrt(1.5) * spread.start_sd * (1 + effect)
    se = math.sqrt(1.5) * spread.repeat_sd * (1 + effect)
    if sb > 0:
        nodes, weights = np.polynomial.hermite_e.hermegauss(_HERMITE)
        weights = weights / math.sqrt(2 * math.pi)
    else:
        nodes, weights = np.zeros(1), np.ones(1)
    m = effect + sb * nodes                                        # (H,) the window's mean difference
    if se == 0:
        win = (m > bar) & (m > 0)
        loss = (m < -bar) & (m < 0)
        return float(weights @ win), float(weights @ loss)
    q = chi2.ppf((np.arange(_Q) + 0.5) / _Q, n - 1)               # (Q,)
    edge = np.maximum(bar, t * se * np.sqrt(q / (n - 1)) / math.sqrt(n))   # (Q,)
    scale = se / math.sqrt(n)
    p_win = norm.sf((edge[None, :] - m[:, None]) / scale).mean(axis=1)
    p_loss = norm.cdf((-edge[None, :] - m[:, None]) / scale).mean(axis=1)
    return float(weights @ p_win), float(weights @ p_loss)


def win2_outcomes(effect: float, spreads: Sequence[Spread], repeats: int, bar: float,
                  confidence: float) -> dict[str, float]:
    """P(WIN), P(NO_CHANGE), P(LOSS) of the decision over independent decision cells."""
    p_win, p_no_loss = 1.0, 1.0
    for spread in spreads:
        w, lo = win2_cell(effect, spread, repeats, bar, confidence)
        p_win *= w
        p_no_loss *= 1 - lo
    p_loss = 1 - p_no_loss
    return {"WIN": p_win, "NO_CHANGE": max(0.0, 1 - p_win - p_loss), "LOSS": p_loss}


def interval_probability(effect: float, spread: Spread, repeats: int, confidence: float) -> float:
    """P(the interval's low end > 0) for one cell: the non-central t tail, averaged over the start offset."""
    import numpy as np
    from scipy.stats import nct

    n = repeats
    t = t_quantile(confidence, n - 1)
    sb = math.sqrt(1.5) * spread.start_sd * (1 + effect)
    se = math.sqrt(1.5) * spread.repeat_sd * (1 + effect)
    nodes, weights = np.polynomial.hermite_e.hermegauss(_HERMITE)
    weights = weights / math.sqrt(2 * math.pi)
    delta = (effect + sb * nodes) * math.sqrt(n) / se
    return float(weights @ nct.sf(t, n - 1, delta))


def win2_mde(target: float, spreads: Sequence[Spread], repeats: int, bar: float, confidence: float) -> float | None:
    """The true effect at which the analytic P(WIN) reaches ``target`` (``None``: not below +100 %)."""
    from scipy.optimize import brentq

    def gap(effect: float) -> float:
        return win2_outcomes(effect, spreads, repeats, bar, confidence)["WIN"] - target

    if gap(1.0) < 0:
        return None
    if gap(0.0) >= 0:
        return 0.0
    return float(brentq(gap, 0.0, 1.0, xtol=1e-6))


def _cell_given(effect: float, spread: Spread, repeats: int, bar: float, confidence: float, rho: float,
                shared: npt.NDArray[np.float64]) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """One cell's ``(P(WIN | v), P(LOSS | v))`` at each value ``shared`` of the standard shared start factor.

    Given ``v`` the cell's own start part and the mean of its repeat noise add up to one
    normal, ``N(E + sb sqrt(rho) v, sb^2 (1 - rho) + s^2 / n)``, independent of the sample sd.
    """
    import numpy as np
    from scipy.stats import chi2, norm

    n = repeats
    t = t_quantile(confidence, n - 1)
    sb = math.sqrt(1.5) * spread.start_sd * (1 + effect)
    se = math.sqrt(1.5) * spread.repeat_sd * (1 + effect)
    m = effect + sb * math.sqrt(rho) * shared                          # (V,)
    scale = math.sqrt(sb * sb * (1 - rho) + se * se / n)
    if se == 0:
        edge = np.full(1, bar)
    else:
        q = chi2.ppf((np.arange(_Q) + 0.5) / _Q, n - 1)
        edge = np.maximum(bar, t * se * np.sqrt(q / (n - 1)) / math.sqrt(n))
    if scale == 0:
        win = (m[:, None] > edge[None, :]).mean(axis=1)
        loss = (m[:, None] < -edge[None, :]).mean(axis=1)
        return win.astype(np.float64), loss.astype(np.float64)
    p_win = norm.sf((edge[None, :] - m[:, None]) / scale).mean(axis=1)
    p_loss = norm.cdf((-edge[None, :] - m[:, None]) / scale).mean(axis=1)
    return p_win, p_loss


def win2_outcomes_shared(effect: float, spreads: Sequence[Spread], repeats: int, bar: float, confidence: float,
                         cell_correlation: float) -> dict[str, float]:
    """P(WIN), P(NO_CHANGE), P(LOSS) when the cells' start offsets are correlated by ``cell_correlation``."""
    import numpy as np

    nodes, weights = np.polynomial.hermite_e.hermegauss(_HERMITE)
    weights = weights / math.sqrt(2 * math.pi)
    win = np.ones(len(nodes))
    no_loss = np.ones(len(nodes))
    for spread in spreads:
        w, lo = _cell_given(effect, spread, repeats, bar, confidence, cell_correlation, nodes)
        win = win * w
        no_loss = no_loss * (1 - lo)
    p_win = float(weights @ win)
    p_loss = 1 - float(weights @ no_loss)
    return {"WIN": p_win, "NO_CHANGE": max(0.0, 1 - p_win - p_loss), "LOSS": p_loss}


def win2_mde_shared(target: float, spreads: Sequence[Spread], repeats: int, bar: float, confidence: float,
                    cell_correlation: float) -> float | None:
    """The true effect at which ``win2_outcomes_shared``'s P(WIN) reaches ``target`` (``None``: not below +100 %)."""
    from scipy.optimize import brentq

    def gap(effect: float) -> float:
        return win2_outcomes_shared(effect, spreads, repeats, bar, confidence, cell_correlation)["WIN"] - target

    if gap(1.0) < 0:
        return None
    if gap(0.0) >= 0:
        return 0.0
    return float(brentq(gap, 0.0, 1.0, xtol=1e-6))
