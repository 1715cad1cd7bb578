"""Power model 1 (kept to replay old gate results): the Monte Carlo agrees with the analytic non-central t and the simulator."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import numpy as np
import pytest

from runner.decide import pp3, win2
from runner.decide.power_analytic import interval_probability, win2_cell, win2_outcomes
from runner.decide.power_sim import Pp3Design, Pp3Draws, Win2Design, Win2Draws, rule_outcomes
from runner.decide.power_v1 import power_figures_v1 as power_figures
from runner.decide.spread import Spread, estimate_spread, parse_pilot
from runner.sim.config import ArmConfig
from runner.sim.model import Generation, SamplingParams


def _spread(start_sd: float, repeat_sd: float) -> Spread:
    return Spread(start_sd, repeat_sd, 4, 2, "pilot")


def _win2(repeats: int = 3, cells: tuple[str, ...] = ("c1",), **params: float) -> Win2Design:
    return Win2Design(cells, win2.Win2Params(repeats=repeats, **params))  # type: ignore[arg-type]


GRID = [  # (effect, start_sd, repeat_sd, repeats)
    (0.0, 0.0, 0.02, 3), (0.03, 0.0, 0.02, 3), (0.05, 0.01, 0.02, 3), (0.04, 0.005, 0.03, 5),
    (0.03, 0.002, 0.01, 4), (0.025, 0.0, 0.015, 10), (0.06, 0.02, 0.01, 6), (-0.04, 0.005, 0.02, 4),
]


@pytest.mark.parametrize(("effect", "start_sd", "repeat_sd", "repeats"), GRID)
def test_mc_power_of_win2_agrees_with_the_analytic_non_central_t(effect: float, start_sd: float, repeat_sd: float,
                                                                 repeats: int) -> None:
    n = 20_000
    spread = _spread(start_sd, repeat_sd)
    counts = Win2Draws(_win2(repeats), [spread], n, seed=11).counts(effect)
    analytic = win2_outcomes(effect, [spread], repeats, 0.02, 0.95)
    for outcome, p in analytic.items():
        mc = counts[outcome] / n
        se = math.sqrt(max(p * (1 - p), 1 / n) / n)
        assert abs(mc - p) <= 4 * se + 1e-3, (outcome, mc, p, se)


def test_the_analytic_interval_probability_is_scipys_non_central_t_tail() -> None:
    # Without the bar, P(low > 0) is the non-central t tail: the integral over the sample sd says the same.
    for effect, start_sd, repeat_sd, repeats in [(0.0, 0.0, 0.02, 3), (0.03, 0.01, 0.02, 5), (0.02, 0.0, 0.01, 8)]:
        spread = _spread(start_sd, repeat_sd)
        tail = interval_probability(effect, spread, repeats, 0.95)
        integral, _ = win2_cell(effect, spread, repeats, 0.0, 0.95)
        assert abs(tail - integral) < 2e-4, (tail, integral)
    assert abs(interval_probability(0.0, _spread(0.0, 0.02), 3, 0.95) - 0.025) < 1e-9  # central t at 0


@pytest.mark.parametrize(("repeats", "repeat_sd", "cells"), [(3, 0.02, 1), (5, 0.01, 1), (10, 0.03, 1), (4, 0.02, 2)])
def test_the_false_win_rate_at_effect_zero_is_at_most_the_nominal_rate(repeats: int, repeat_sd: float,
                                                                       cells: int) -> None:
    n = 20_000
    design = _win2(repeats, tuple(f"c{i}" for i in range(cells)))
    figures = power_figures(design, [_spread(0.0, repeat_sd)] * cells, effect=0.03, windows=n, seed=5, search=False)
    nominal = figures["nominal_false_win_rate"]
    assert nominal == pytest.approx(0.025)
    rate = figures["false_positive_rate"]
    assert rate <= nominal + 3 * math.sqrt(nominal * (1 - nominal) / n), rate


def test_start_to_start_noise_is_what_pushes_the_false_win_rate_above_nominal() -> None:
    # A start offset is shared by every repeat: the paired t cannot see it, so the rate can exceed 2.5 %.
    design = _win2(10, bar=0.0)
    quiet = power_figures(design, [_spread(0.0, 0.01)], effect=0.0, windows=20_000, seed=3, search=False)
    loud = power_figures(design, [_spread(0.02, 0.01)], effect=0.0, windows=20_000, seed=3, search=False)
    assert quiet["false_positive_rate"] <= 0.025 + 0.004 and not quiet["false_win_above_nominal"]
    assert loud["false_positive_rate"] > 0.1 and loud["false_win_above_nominal"]


@pytest.mark.parametrize("effect", [0.0, 0.03, 0.06, -0.05])
def test_vectorised_win2_outcomes_are_the_rules_own_decisions(effect: float) -> None:
    draws = Win2Draws(_win2(4, ("short-b1", "32k-b1")), [_spread(0.01, 0.02), _spread(0.005, 0.03)], 300, seed=2)
    sample = list(range(300))
    assert draws.outcomes(effect) == rule_outcomes(draws, effect, sample)


@pytest.mark.parametrize("effect", [0.0, 0.05, 0.08])
def test_vectorised_pp3_outcomes_are_the_rules_own_decisions(effect: float) -> None:
    design = Pp3Design(("f1", "f2", "f3"), ("short", "32k"), pp3.Pp3Params(bootstrap=500))
    draws = Pp3Draws(design, _spread(0.01, 0.03), 150, seed=4)
    sample = list(range(150))
    vectorised = draws.outcomes(effect)
    assert vectorised == rule_outcomes(draws, effect, sample)
    assert len(set(vectorised)) == 2 or effect == 0.0  # the sample sees both outcomes where it matters


def test_power_figures_are_reproducible_bit_for_bit() -> None:
    design = _win2(3, ("a", "b"))
    spreads = [_spread(0.004, 0.012), _spread(0.006, 0.01)]
    one = power_figures(design, spreads, effect=0.03, windows=3000, seed=9)
    two = power_figures(design, spreads, effect=0.03, windows=3000, seed=9)
    other = power_figures(design, spreads, effect=0.03, windows=3000, seed=10)
    assert one == two
    assert one["outcomes"] != other["outcomes"]


def test_the_mde_is_the_effect_where_the_power_reaches_the_target() -> None:
    design = _win2(4)
    spread = [_spread(0.003, 0.015)]
    figures = power_figures(design, spread, effect=0.03, windows=10_000, seed=1, search=False)
    mde = figures["mde"]
    draws = Win2Draws(design, spread, 10_000, seed=1)
    assert draws.counts(mde * 1.001)["WIN"] / 10_000 >= 0.8
    assert draws.counts(mde * 0.999)["WIN"] / 10_000 < 0.8
    assert abs(figures["analytic"]["mde"] - mde) < 0.002  # the analytic MDE says the same


def test_repeats_needed_bring_the_mde_down_to_the_effect() -> None:
    design = _win2(3)
    spread = [_spread(0.002, 0.015)]
    figures = power_figures(design, spread, effect=0.035, windows=5000, seed=1)
    needed = figures["needed"]["repeats"]
    assert figures["power"] < 0.8 and needed is not None and needed > 3
    enough = power_figures(replace(design, params=replace(design.params, repeats=needed)), spread, effect=0.035,
                           windows=5000, seed=1, search=False)
    fewer = power_figures(replace(design, params=replace(design.params, repeats=needed - 1)), spread, effect=0.035,
                          windows=5000, seed=1, search=False)
    assert enough["mde"] <= 0.035 < fewer["mde"]
    assert enough["power"] >= 0.8


def test_at_the_bar_itself_no_repeats_suffice_and_the_figures_say_why() -> None:
    figures = power_figures(_win2(3), [_spread(0.0, 0.01)], windows=2000, seed=1)  # effect defaults to the bar
    assert figures["effect"] == 0.02 and figures["power"] < 0.55
    assert figures["needed"]["repeats"] is None and "near 50 %" in figures["needed"]["note"]


def test_pp3_pairs_needed_add_source_families() -> None:
    design = Pp3Design(("f1", "f2"), ("short", "32k"), pp3.Pp3Params())
    figures = power_figures(design, [_spread(0.005, 0.03)], effect=0.06, windows=2000, seed=1)
    assert figures["power"] < 0.8
    assert figures["rule"] == "pp3-v1" and set(figures["outcomes"]["at_effect"]) == {"CANDIDATE", "NO_PROMOTION"}
    needed = figures["needed"]
    assert needed["families"] is not None and needed["families"] > 2
    assert needed["pairs"] == needed["families"] * 2
    assert figures["false_positive_rate"] < 0.01


def test_the_spread_estimate_recovers_known_start_and_repeat_noise() -> None:
    rng = np.random.default_rng(0)
    pairs = []
    for _ in range(400):
        level = rng.normal(0, 0.05, 5)  # each repeat's own level, shared by both starts: cancels
        first = np.exp(level + rng.normal(0, 0.01) + rng.normal(0, 0.02, 5))
        second = np.exp(level + rng.normal(0, 0.01) + rng.normal(0, 0.02, 5))
        pairs.append((list(first), list(second)))
    spread = estimate_spread(pairs, source="pilot")
    assert spread is not None and spread.windows == 400 and spread.entries == 800
    assert spread.repeat_sd == pytest.approx(0.02, rel=0.06)
    assert spread.start_sd == pytest.approx(0.01, rel=0.2)


def test_a_pilot_file_gives_a_spread_per_cell() -> None:
    got = parse_pilot({"spread": {"start_sd": 0.01, "repeat_sd": 0.02},
                       "cells": {"b": {"windows": [{"first": [1.0, 1.1, 0.9], "second": [1.0, 1.0, 1.0]}]}}},
                      ("a", "b"))
    assert got["a"].start_sd == 0.01 and got["b"].windows == 1 and got["b"].repeat_sd > 0
    from ledger.errors import FormatError

    with pytest.raises(FormatError, match=r"pilot.cells.c"):
        parse_pilot({"cells": {"c": {"start_sd": 0.0, "repeat_sd": 0.0}}}, ("a",))
    with pytest.raises(FormatError, match=r"no spread for cell a"):
        parse_pilot({}, ("a",))


# ---------------------------------------------------------------------- brute force over the simulator

_ARM = ArmConfig("A", step_base_ms=20.0, step_per_token_ms=0.5)
_TOKENS, _REQUESTS = 40, 2


def _sim_wave(arm: ArmConfig, key: str, start_factor: float) -> tuple[int, int, float]:
    """Rounds, accepted and decode seconds of one wave of the simulator's model (steps after the first)."""
    rounds = accepted = 0
    decode_ms = 0.0
    for i in range(_REQUESTS):
        gen = Generation(arm=arm, params=SamplingParams(max_tokens=_TOKENS, ignore_eos=True), prompt_tokens=16,
                         seed_key=f"{key}|{i}", start_factor=start_factor, step_jitter=0.05)
        gen.next_step()
        while (step := gen.next_step()) is not None:
            rounds += 1
            accepted += step.accepted
            decode_ms += step.duration_ms
    return rounds, accepted, decode_ms / 1000 * 0.01  # time scale 0.01


def _sim_window(seed: int, effect: float, repeats: int) -> win2.Win2Input:
    fast = replace(_ARM, name="B", step_base_ms=_ARM.step_base_ms / (1 + effect),
                   step_per_token_ms=_ARM.step_per_token_ms / (1 + effect))
    waves: list[win2.Wave] = []
    for number, start in enumerate(win2.STARTS):
        rng = random.Random(f"{seed}|start|{number}")  # the simulator's per-start speed, as the host draws it
        factor = max(0.5, 1.0 + rng.gauss(0.0, 0.01))
        arm = fast if start == "s2" else _ARM
        for r in range(1, repeats + 1):
            for family in ("f1", "f2"):
                rounds, acc, dec = _sim_wave(arm, f"{seed}|{start}|{r}|{family}", factor)
                waves.append(win2.Wave(len(waves), start, "c1", r, family, rounds, acc, dec, (0.01,), 1, 1.0))
    starts = {s: win2.StartInfo("B" if s == "s2" else "A", None) for s in win2.STARTS}
    return win2.Win2Input(win2.Win2Params(repeats=repeats), ("c1",), None, starts, 0, tuple(waves), ())


def test_brute_force_simulator_windows_win_as_often_as_the_power_figures_predict() -> None:
    repeats, effect, bar = 4, 0.11, 0.02
    # The spread, measured as an operator would: the two control starts of null pilot windows.
    pilot = []
    for seed in range(1000, 1120):
        inp = _sim_window(seed, 0.0, repeats)
        per_repeat = win2.decide(inp)["cells"]["c1"]["metrics"]["pooled_rate_tps"]["per_repeat"]
        pilot.append((per_repeat["s1"], per_repeat["s3"]))
    spread = estimate_spread(pilot, source="pilot")
    assert spread is not None and spread.repeat_sd > 0.005
    predicted = power_figures(_win2(repeats, bar=bar), [spread], effect=effect, windows=20_000, seed=1,
                              search=False)["power"]
    # Brute force: many seeded simulator windows at the known true effect, each decided by the rule. The
    # figures hold the guards neutral; this simulator draws acceptance per start, so its guards are noisy:
    # compare the primary's verdict, and a guard can only take WINs away.
    m = 240
    results = [win2.decide(_sim_window(seed, effect, repeats)) for seed in range(m)]
    observed = sum(r["cells"]["c1"]["metrics"]["pooled_rate_tps"]["verdict"] == "WIN" for r in results) / m
    decided = sum(r["decision"] == "WIN" for r in results) / m
    se = math.sqrt(predicted * (1 - predicted) / m)
    assert 0.2 < predicted < 0.8, predicted  # a design where power is informative
    assert abs(observed - predicted) <= 3 * se, (observed, predicted, spread)
    assert decided <= observed


def test_the_win2_repeats_search_simulates_at_most_its_cap_of_windows_per_step(monkeypatch: pytest.MonkeyPatch) -> None:
    from runner.decide import power_v1 as power

    sizes: list[tuple[int, int]] = []
    draws = power._draws

    def counted(design: Win2Design | Pp3Design, spreads: list[Spread], n: int, seed: int) -> Win2Draws | Pp3Draws:
        sizes.append((n, design.repeats if isinstance(design, Win2Design) else 0))
        return draws(design, spreads, n, seed)

    monkeypatch.setattr(power, "_draws", counted)
    spread = [_spread(0.002, 0.015)]
    needed = power._search_v1(_win2(3), spread, 0.035, 0.8, 1_000_000, 1)  # a plan may ask for 1,000,000 windows
    assert needed["windows_per_step"] == power.SEARCH_WINDOWS_WIN2 == 10_000
    assert sizes and all(n == power.SEARCH_WINDOWS_WIN2 for n, _ in sizes)
    assert needed["repeats"] is not None and needed["repeats"] > 3
    # the default window count is under the cap: its search is what it was
    assert power._search_v1(_win2(3), spread, 0.035, 0.8, 10_000, 1) == needed
