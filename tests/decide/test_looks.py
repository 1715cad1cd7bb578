"""Looks and their budget: the spending functions, a look's test, and A/A chains over power model 2.

The chains are drawn by ``Win2Sim`` (``runner.decide.power_win2``) and decided as
``win2.decide`` decides them; the promotion counts a chain as promoted when any of its
looks passes its spent level (the operator presents the best one). Monte Carlo sizes are
kept to seconds; ``bench/looks.py`` runs the large study.
"""

from __future__ import annotations

import math

import pytest

from runner.decide import win2
from runner.decide.noise import Win2Scenario
from runner.decide.paired import paired_interval
from runner.decide.power_looks import chain_study
from runner.decide.power_sim import Win2Design
from runner.decide.spending import SPENDINGS, LookBudget, look_test

ALPHA = 0.05
# One decision cell whose repeats are independent (no start offset): the rule's paired-t interval is exact,
# and a window with no effect WINs about 2.4 % of the time, so looks inflate the false WINs the most.
REPEAT_NOISE = Win2Scenario(start_sd=((0.0, 0.0, 0.0),), repeat_sd=((0.05, 0.0, 0.05),), guard_correlation=(0.0, 0.95),
                            cell_correlation=0.0)
# The docs' pilot (runner.demo.scenarios.POWER_PILOT) on seed 000's two decision cells.
DOCS_NOISE = Win2Scenario(start_sd=((0.003, 0.0, 0.003),) * 2, repeat_sd=((0.012, 0.0, 0.012),) * 2,
                          guard_correlation=(0.0, 0.95), cell_correlation=0.5, guard_cell_correlation=(0.0, 0.5))


def design(repeats: int, cells: int = 1) -> Win2Design:
    return Win2Design(("short-b1", "32k-b1")[:cells], win2.Win2Params(repeats=repeats))


@pytest.mark.parametrize("spending", SPENDINGS)
def test_spending_functions_spend_the_whole_budget_by_the_last_look(spending: str) -> None:
    budget = LookBudget(ALPHA, 28, spending)
    shares = [budget.at(i) for i in range(1, 29)]
    assert all(a >= 0 for a in shares) and math.fsum(shares) == pytest.approx(ALPHA, rel=1e-12)
    assert [budget.spent(i) for i in range(29)] == sorted(budget.spent(i) for i in range(29))
    assert budget.at(29) == 0.0 and budget.confidence(29) is None
    if spending == "bonferroni":
        assert shares == pytest.approx([ALPHA / 28] * 28)
    elif spending == "pocock":
        assert shares[0] > shares[-1]    # front-loaded
    else:
        assert shares[0] < 1e-6 < shares[-1]   # almost nothing early


def test_look_test_is_the_interval_at_the_spent_confidence() -> None:
    budget = LookBudget(ALPHA, 2)     # 0.025 a look: the rule's own 95 % interval
    d = [0.08, 0.05, 0.065]
    test = look_test(budget, 1, {"c": d}, 0.02)
    interval = paired_interval(d, 0.95)
    assert test.passes and test.confidence == pytest.approx(0.95)
    assert test.cells["c"]["low"] == pytest.approx(interval.low)
    strict = look_test(LookBudget(ALPHA, 28), 1, {"c": d}, 0.02)      # alpha / 28: a 99.64 % interval
    assert not strict.passes and strict.cells["c"]["low"] < 0 < interval.low
    assert not look_test(budget, 3, {"c": d}, 0.02).passes            # past the maximum: nothing left
    assert not look_test(budget, 1, {"c": [0.08, None, 0.07]}, 0.02).passes


@pytest.mark.parametrize(("looks", "chains"), [(5, 30_000), (28, 8_000)])
def test_aa_chains_never_promote_above_the_registered_budget(looks: int, chains: int) -> None:
    """Equal arms, ``looks`` windows a chain, the budget spent over ``looks`` looks: the share of chains promoted
    is at most alpha (within three Monte Carlo standard errors), where presenting any WIN promotes far more."""
    budget = LookBudget(ALPHA, looks)
    study = chain_study(design(3), REPEAT_NOISE, budget, looks=looks, chains=chains, seed=11)
    assert study.promoted <= ALPHA + 3 * study.promoted_error, study
    assert study.naive > 1 - (1 - study.per_look_win) ** looks - 4 * study.naive_error  # the looks, independent
    assert study.naive > 2 * ALPHA      # without the budget the looks inflate the false promotions
    # the example policy's budget (28 looks): its first 5 looks spend 5/28 of it
    if looks == 5:
        early = chain_study(design(3), REPEAT_NOISE, LookBudget(ALPHA, 28), looks=5, chains=chains, seed=11)
        assert early.promoted <= ALPHA * 5 / 28 + 3 * early.promoted_error


def test_aa_chains_on_the_docs_noise_stay_within_the_budget() -> None:
    study = chain_study(design(6, cells=2), DOCS_NOISE, LookBudget(ALPHA, 28), looks=28, chains=4_000, seed=12)
    assert study.promoted <= ALPHA + 3 * study.promoted_error


def test_a_real_effect_at_the_registered_power_promotes_within_the_looks_allowed() -> None:
    """At an effect whose one-look power at the spent level is at least 0.8, a candidate is promoted within the 28
    looks the policy allows nearly always, and most often at its first look."""
    budget = LookBudget(ALPHA, 28)
    effect = 0.05   # its one-look power at the spent level (alpha / 28: a 99.64 % interval) is about 0.88
    one = chain_study(design(6, cells=2), DOCS_NOISE, budget, looks=1, chains=4_000, effect=effect, seed=13)
    assert one.promoted >= 0.8, one
    study = chain_study(design(6, cells=2), DOCS_NOISE, budget, looks=28, chains=2_000, effect=effect, seed=14)
    assert study.promoted >= 1 - (1 - 0.8) ** 28 - 3 * study.promoted_error
    assert study.first_promotion[0] >= 0.8 * study.chains - 3 * math.sqrt(study.chains)
    assert sum(study.first_promotion) == round(study.promoted * study.chains)
