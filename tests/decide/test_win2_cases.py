"""win2-v1 worked by hand, one case per outcome (docs/rules.md).

Controls pool R = 1000 rounds, A = 1000 accepted, D = 20 s per repeat: pooled_rate_tps =
(R + A) / D = 100 tok/s, accepted_per_round = 1.0, ms_per_round = 20.0, decode_tps = 2000 / 20 =
100. ``t = t.ppf(0.975, 2) = 4.302652729749462``.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from runner.decide import compute

from .builders import Rep, clone, same, win2_input

T975_2 = 4.302652729749462
CONTROL = Rep()


def rate_rep(rate: float, **kw: Any) -> Rep:
    """A repeat with rounds = 1000 and decode 20 s whose pooled rate is ``rate`` (accepted = 20 rate - 1000)."""
    return Rep(accepted=round(20 * rate) - 1000, **kw)


def one_cell(candidate: list[Rep], controls: list[Rep] | None = None, **kw: Any) -> dict[str, Any]:
    ctl = controls or same(CONTROL)
    return win2_input({"short-b1": {"s1": ctl, "s2": candidate, "s3": ctl}}, **kw)


def test_win() -> None:
    # candidate rates 110, 112.5, 107.5 -> d = .10, .125, .075; point .10; sd .025
    result = compute(one_cell([rate_rep(110), rate_rep(112.5), rate_rep(107.5)]))
    primary = result["cells"]["short-b1"]["metrics"]["pooled_rate_tps"]
    assert primary["per_repeat"]["s2"] == [110.0, 112.5, 107.5]
    assert primary["d"] == pytest.approx([0.10, 0.125, 0.075], rel=1e-15)
    half = T975_2 * 0.025 / math.sqrt(3)
    assert primary["point"] == pytest.approx(0.10, rel=1e-14)
    assert primary["low"] == pytest.approx(0.10 - half, rel=1e-12)
    assert primary["high"] == pytest.approx(0.10 + half, rel=1e-12)
    assert primary["low"] > 0 and primary["verdict"] == "WIN"
    assert result["cells"]["short-b1"]["verdict"] == "WIN"
    assert result["decision"] == "WIN"
    assert result["reasons"][-1].startswith("decision WIN")
    # the guards: accepted/round 1.1, 1.125, 1.075 beat 1.0; decode_tps ties the controls
    assert result["cells"]["short-b1"]["metrics"]["accepted_per_round"]["verdict"] == "OK"
    assert result["cells"]["short-b1"]["metrics"]["decode_tps"]["verdict"] == "OK"
    # ms_per_round is unchanged (20 ms): checklist_literal says NO_CHANGE
    assert result["checklist_literal"] == {"decision": "NO_CHANGE", "cells": {"short-b1": "NO_CHANGE"}}


def test_loss_by_primary() -> None:
    # same accepted/round, slower rounds: D = 25, 24, 26 s -> rates 80, 83.3, 76.9
    candidate = [Rep(decode_s=25.0), Rep(decode_s=24.0), Rep(decode_s=26.0)]
    result = compute(one_cell(candidate))
    metrics = result["cells"]["short-b1"]["metrics"]
    d = [2000 / 25 / 100 - 1, 2000 / 24 / 100 - 1, 2000 / 26 / 100 - 1]
    assert metrics["pooled_rate_tps"]["d"] == pytest.approx(d, rel=1e-14)
    assert metrics["pooled_rate_tps"]["verdict"] == "LOSS"
    assert metrics["accepted_per_round"]["verdict"] == "OK"
    assert metrics["decode_tps"]["verdict"] == "OK"
    # ms/round is lower-is-better: 25, 24, 26 ms vs 20 ms -> its own LOSS
    assert metrics["ms_per_round"]["verdict"] == "LOSS"
    assert result["decision"] == "LOSS"
    assert result["checklist_literal"]["decision"] == "LOSS"


def test_loss_by_guard_alone() -> None:
    # more, shorter rounds: R = 1200, A = 900, D = 20 -> rate 105 (WIN) but accepted/round .75 < 1.0
    candidate = [Rep(rounds=1200, accepted=900), Rep(rounds=1200, accepted=910), Rep(rounds=1200, accepted=890)]
    result = compute(one_cell(candidate))
    metrics = result["cells"]["short-b1"]["metrics"]
    assert metrics["pooled_rate_tps"]["verdict"] == "WIN"
    assert metrics["accepted_per_round"]["verdict"] == "LOSS"
    assert metrics["decode_tps"]["verdict"] == "OK"
    assert result["cells"]["short-b1"]["verdict"] == "LOSS"
    assert result["decision"] == "LOSS"
    assert any("LOSS by guard accepted_per_round" in r and "3 of 3" in r for r in result["reasons"])


def test_guard_needs_two_of_three_repeats() -> None:
    # accepted/round below both controls in one repeat only: the guard stays OK
    candidate = [rate_rep(110), Rep(rounds=1200, accepted=1000), rate_rep(110)]
    result = compute(one_cell(candidate))
    assert result["cells"]["short-b1"]["metrics"]["accepted_per_round"]["verdict"] == "OK"


def test_no_change_point_above_bar_interval_crossing_zero() -> None:
    # rates 110, 95, 104 -> d = .10, -.05, .04: point .03 > bar, sd .0781 -> low < 0
    result = compute(one_cell([rate_rep(110), rate_rep(95), rate_rep(104)]))
    primary = result["cells"]["short-b1"]["metrics"]["pooled_rate_tps"]
    assert primary["point"] == pytest.approx(0.03, rel=1e-13)
    sd = math.sqrt(((0.07) ** 2 + (0.08) ** 2 + (0.01) ** 2) / 2)
    assert primary["low"] == pytest.approx(0.03 - T975_2 * sd / math.sqrt(3), rel=1e-12)
    assert primary["point"] > 0.02 and primary["low"] < 0
    assert primary["verdict"] == "NO_CHANGE"
    assert result["decision"] == "NO_CHANGE"


def _win_input(**kw: Any) -> dict[str, Any]:
    return one_cell([rate_rep(110), rate_rep(112.5), rate_rep(107.5)], **kw)


def test_inconclusive_by_clock_cap_mismatch() -> None:
    result = compute(_win_input(caps=(2300, 2150, 2300)))
    assert result["decision"] == "INCONCLUSIVE"
    assert "starts ran at different clock caps: s1 2300 MHz, s2 2150 MHz, s3 2300 MHz" in result["reasons"]
    # the cell is still computed and reported
    assert result["cells"]["short-b1"]["verdict"] == "WIN"


def test_inconclusive_by_production_cap() -> None:
    result = compute(_win_input(caps=(2150, 2150, 2150), production_cap=2300))
    assert result["decision"] == "INCONCLUSIVE"
    assert not any("different clock caps" in r for r in result["reasons"])
    assert "s1 ran at 2150 MHz, s2 ran at 2150 MHz, s3 ran at 2150 MHz; production's configured clock cap is " \
           "2300 MHz" in result["reasons"]
    assert result["checklist_literal"]["decision"] == "INCONCLUSIVE"


def test_inconclusive_by_unrecorded_clock_cap() -> None:
    result = compute(_win_input(caps=(2300, None, 2300)))
    assert result["decision"] == "INCONCLUSIVE"
    assert "clock cap not recorded for s2" in result["reasons"]


def test_inconclusive_by_thermal() -> None:
    result = compute(_win_input(thermal=1))
    assert result["decision"] == "INCONCLUSIVE"
    assert "thermal dial-back inside the HOLD (1 event(s))" in result["reasons"]
    assert result["cells"]["short-b1"]["verdict"] == "WIN"


def test_inconclusive_by_missing_wave() -> None:
    data = _win_input()
    data["waves"] = [w for w in data["waves"]
                     if not (w["start"] == "s2" and w["repeat"] == 3 and w["family"] == "opinions")]
    result = compute(data)
    assert result["decision"] == "INCONCLUSIVE"
    assert "missing data: s2 short-b1 repeat 3: no wave for family opinions" in result["reasons"]
    cell = result["cells"]["short-b1"]
    assert cell["verdict"] is None
    assert cell["metrics"]["pooled_rate_tps"]["per_repeat"]["s2"][:2] == [110.0, 112.5]
    assert cell["metrics"]["pooled_rate_tps"]["per_repeat"]["s2"][2] is None
    assert cell["metrics"]["pooled_rate_tps"]["point"] is None


def test_inconclusive_by_missing_counter() -> None:
    data = _win_input()
    data["waves"][0]["decode_s"] = None
    result = compute(data)
    assert result["decision"] == "INCONCLUSIVE"
    assert "missing data: s1 short-b1 repeat 1: counter decode_s missing (family filings)" in result["reasons"]


def test_inconclusive_when_a_whole_repeat_is_missing() -> None:
    data = _win_input()
    data["waves"] = [w for w in data["waves"] if w["repeat"] != 3]
    result = compute(data)
    assert result["decision"] == "INCONCLUSIVE"
    assert sum("repeat 3: no wave" in r for r in result["reasons"]) == 6


def test_complete_cells_are_reported_beside_an_incomplete_one() -> None:
    win = [rate_rep(110), rate_rep(112.5), rate_rep(107.5)]
    data = win2_input({"short-b1": {"s1": same(CONTROL), "s2": win, "s3": same(CONTROL)},
                       "32k-b1": {"s1": same(CONTROL), "s2": win[:2], "s3": same(CONTROL)}})
    result = compute(data)
    assert result["decision"] == "INCONCLUSIVE"
    assert result["cells"]["short-b1"]["verdict"] == "WIN"
    assert result["cells"]["32k-b1"]["verdict"] is None


def test_any_cell_loss_makes_the_window_loss_and_mixed_is_no_change() -> None:
    win = [rate_rep(110), rate_rep(112.5), rate_rep(107.5)]
    loss = [Rep(decode_s=25.0), Rep(decode_s=24.0), Rep(decode_s=26.0)]
    flat = same(CONTROL)
    def two(second: list[Rep]) -> dict[str, Any]:
        return win2_input({"short-b1": {"s1": flat, "s2": win, "s3": flat},
                           "32k-b1": {"s1": flat, "s2": second, "s3": flat}})
    assert compute(two(loss))["decision"] == "LOSS"
    assert compute(two(flat))["decision"] == "NO_CHANGE"
    assert compute(two(win))["decision"] == "WIN"


def test_spreads() -> None:
    # s1 rates 100, 100, 100; s3 rates 90, 110, 100 -> |s1-s3| / mean = 10/95, 10/105, 0
    s3 = [rate_rep(90), rate_rep(110), rate_rep(100)]
    archive = [{"cell": "short-b1", "pooled_rate_tps": v} for v in (100.0, 104.0, 96.0)]
    archive.append({"cell": "32k-b1", "pooled_rate_tps": 50.0})
    data = win2_input({"short-b1": {"s1": same(CONTROL), "s2": same(CONTROL), "s3": s3}}, archive=archive)
    spread = compute(data)["spread"]["short-b1"]
    assert spread["in_window_off_off"] == pytest.approx([10 / 95, 10 / 105, 0.0], rel=1e-14)
    assert spread["archive_day_to_day"] == pytest.approx(8 / 100, rel=1e-14)
    lone = compute(win2_input({"32k-b1": {"s1": same(CONTROL), "s2": same(CONTROL), "s3": same(CONTROL)}},
                              archive=archive))
    assert lone["spread"]["32k-b1"]["archive_day_to_day"] is None


def test_bar_is_a_parameter() -> None:
    # point .10 with a 15 % bar is NO_CHANGE; the bar in the result is the one given
    data = _win_input(params={"bar": 0.15, "confidence": 0.95, "guard_min_repeats": 2})
    result = compute(data)
    assert result["decision"] == "NO_CHANGE"
    assert result["params"]["bar"] == 0.15


def test_defaults_fill_missing_params() -> None:
    data = clone(_win_input())
    del data["params"]
    assert compute(data)["params"] == {"bar": 0.02, "confidence": 0.95, "guard_min_repeats": 2, "repeats": 3}


def test_output_keys_are_the_contract() -> None:
    result = compute(_win_input())
    assert list(result) == ["rule", "decision", "reasons", "cells", "checklist_literal", "spread", "params"]
    assert set(result["cells"]["short-b1"]) == {"verdict", "metrics"}
    metric = result["cells"]["short-b1"]["metrics"]["pooled_rate_tps"]
    assert list(metric) == ["role", "direction", "per_repeat", "d", "point", "low", "high", "verdict"]
    assert {name: (m["role"], m["direction"]) for name, m in result["cells"]["short-b1"]["metrics"].items()} == {
        "pooled_rate_tps": ("primary", "higher"), "accepted_per_round": ("guard", "higher"),
        "decode_tps": ("guard", "higher"), "ms_per_round": ("reported", "lower"), "ttft_s": ("reported", "lower")}
    assert list(result["spread"]["short-b1"]) == ["in_window_off_off", "archive_day_to_day"]
