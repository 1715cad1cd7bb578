"""win2-v1 deciding on several primaries (docs/rules.md 2.7): Holm / Bonferroni, decide = all | any.

Controls pool to 100 for every metric (``test_win2_cases``). The candidate's pooled rate is
``(1000 + A) / 20`` (accepted ``A``), its decode_tps ``tokens / 20``, so each primary's d per
repeat is set directly. Two-sided p-values are worked by hand below from
``t = point / (sd / sqrt(3))``, ``p = 2 t.sf(|t|, 2)``.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from scipy.stats import t as student_t

from ledger.errors import FieldError
from runner.decide import compute
from runner.decide.paired import step_tests

from .builders import Rep, same, win2_input

ALPHA = 1 - 0.95
BASE = {"bar": 0.02, "confidence": 0.95, "guard_min_repeats": 2}


def _hand_p(d: list[float]) -> float:
    n = len(d)
    point = sum(d) / n
    sd = math.sqrt(sum((x - point) ** 2 for x in d) / (n - 1))
    return float(2 * student_t.sf(abs(point / (sd / math.sqrt(n))), n - 1))


def _reps(accepted: tuple[int, int, int], tokens: tuple[int, int, int] = (2000, 2000, 2000),
          ttft: tuple[float, float, float] = (0.1, 0.1, 0.1)) -> list[Rep]:
    return [Rep(accepted=a, tokens=t, ttft=(f,) * 4) for a, t, f in zip(accepted, tokens, ttft, strict=True)]


# pooled_rate_tps d = .014, .015, .016: p 0.0015, point 1.5% below the 2% bar (NO_CHANGE)
X_TINY = (1028, 1030, 1032)
# pooled_rate_tps d = .0095, .015, .0205: p 0.042, below the bar
X_MID = (1019, 1030, 1041)
# pooled_rate_tps d = .10, .125, .075: WIN (test_win2_cases.test_win)
X_WIN = (1200, 1250, 1150)
# decode_tps d = .0415, .06, .0785: p 0.030, point 6% > bar, low > 0 (WIN uncorrected)
Y_WIN = (2083, 2120, 2157)
# decode_tps d = .045, .06, .075: p 0.020 (between 0.05 / 3 and 0.05 / 2), WIN uncorrected
Y_SHARP = (2090, 2120, 2150)
# decode_tps d = .02, .06, .10: p 0.12, interval crosses 0 (NO_CHANGE)
Y_NOISY = (2040, 2120, 2200)
# decode_tps d = -.06 ...: LOSS
Y_LOSS = (1880, 1870, 1890)


def _run(accepted: tuple[int, int, int], tokens: tuple[int, int, int], ttft: tuple[float, float, float] = (0.1,) * 3,
         **extra: Any) -> dict[str, Any]:
    ctl = same(Rep())
    data = win2_input({"short-b1": {"s1": ctl, "s2": _reps(accepted, tokens, ttft), "s3": ctl}},
                      params={**BASE, **extra})
    return compute(data)


def _metrics(result: dict[str, Any]) -> dict[str, Any]:
    metrics: dict[str, Any] = result["cells"]["short-b1"]["metrics"]
    return metrics


def test_holm_rejects_two_where_bonferroni_rejects_one() -> None:
    """p = 0.01, 0.02, 0.5 at alpha 0.05: Bonferroni's alpha/3 = 0.0167 passes 0.01 only; Holm passes
    0.01 < 0.05/3 and 0.02 < 0.05/2, then stops at 0.5 >= 0.05."""
    p = [0.5, 0.01, 0.02]   # out of order: the ranks follow the p-values
    holm = step_tests(p, ALPHA, "holm")
    assert [s.rank for s in holm] == [3, 1, 2]
    assert [s.threshold for s in holm] == [ALPHA / 1, ALPHA / 3, ALPHA / 2]
    assert [s.passed for s in holm] == [False, True, True]
    bonferroni = step_tests(p, ALPHA, "bonferroni")
    assert [s.threshold for s in bonferroni] == [ALPHA / 3] * 3
    assert [s.passed for s in bonferroni] == [False, True, False]


def test_holm_stops_at_the_first_failure() -> None:
    """Step-down: once a rank fails, every larger p fails, even one below its own threshold."""
    holm = step_tests([0.03, 0.04], ALPHA, "holm")   # 0.03 >= 0.05/2: stop; 0.04 < 0.05 is not reached
    assert [s.passed for s in holm] == [False, False]
    assert [s.passed for s in step_tests([0.03, 0.04], ALPHA, "bonferroni")] == [False, False]
    assert [s.passed for s in step_tests([0.01, 0.04], ALPHA, "holm")] == [True, True]


def test_three_primaries_in_a_window() -> None:
    """pooled_rate_tps p 0.0015, decode_tps p 0.020, ttft_s p ~0.8: Holm passes two, Bonferroni one."""
    ttft = (0.095, 0.1, 0.108)
    kw: dict[str, Any] = {"primaries": ["pooled_rate_tps", "decode_tps", "ttft_s"], "decide": "any"}
    holm = _run(X_TINY, Y_SHARP, ttft, **kw, correction="holm")
    metrics = _metrics(holm)
    d = {name: metrics[name]["d"] for name in kw["primaries"]}
    hand = {name: _hand_p(v) for name, v in d.items()}
    assert hand["pooled_rate_tps"] < ALPHA / 3 < hand["decode_tps"] < ALPHA / 2 < ALPHA < hand["ttft_s"]
    for name in kw["primaries"]:
        assert metrics[name]["test"]["p"] == pytest.approx(hand[name], rel=1e-9)
    assert [metrics[n]["test"]["rank"] for n in kw["primaries"]] == [1, 2, 3]
    assert [metrics[n]["test"]["threshold"] for n in kw["primaries"]] == [ALPHA / 3, ALPHA / 2, ALPHA]
    assert [metrics[n]["test"]["passed"] for n in kw["primaries"]] == [True, True, False]
    # decode_tps passes Holm and the bar: WIN; pooled_rate_tps passes Holm, not the bar
    assert metrics["decode_tps"]["verdict"] == "WIN" and metrics["pooled_rate_tps"]["verdict"] == "NO_CHANGE"
    assert holm["decision"] == "WIN"
    assert holm["correction"] == {"primaries": kw["primaries"], "decide": "any", "registered": "holm",
                                  "applied": "holm", "alpha": ALPHA}
    bonferroni = _run(X_TINY, Y_SHARP, ttft, **kw, correction="bonferroni")
    assert [_metrics(bonferroni)[n]["test"]["passed"] for n in kw["primaries"]] == [True, False, False]
    assert bonferroni["decision"] == "NO_CHANGE"


PAIR = {"primaries": ["pooled_rate_tps", "decode_tps"]}


def test_any_wins_only_where_the_holm_passing_metric_passes_the_bar() -> None:
    any_holm = {**PAIR, "decide": "any", "correction": "holm"}
    # pooled_rate_tps passes Holm (p 0.0015) but is below the bar; decode_tps is not significant
    below_bar = _run(X_TINY, Y_NOISY, **any_holm)
    assert _metrics(below_bar)["pooled_rate_tps"]["test"]["passed"] is True
    assert _metrics(below_bar)["decode_tps"]["test"]["passed"] is False
    assert below_bar["decision"] == "NO_CHANGE"
    # decode_tps now passes the bar and, at rank 2, Holm's alpha / 1: WIN
    wins = _run(X_TINY, Y_WIN, **any_holm)
    assert _metrics(wins)["decode_tps"]["test"] == {"p": pytest.approx(0.030258834718457348), "rank": 2,
                                                    "threshold": ALPHA, "passed": True}
    assert wins["decision"] == "WIN"
    # decode_tps passes the bar uncorrected (p 0.030 < 0.05) but ranks first: 0.030 >= 0.05 / 2, no WIN
    corrected_away = _run(X_MID, Y_WIN, **any_holm)
    assert _metrics(corrected_away)["decode_tps"]["verdict"] == "WIN"
    assert _metrics(corrected_away)["decode_tps"]["test"]["passed"] is False
    assert corrected_away["decision"] == "NO_CHANGE"
    assert any("decode_tps WIN" in r and "not passed" in r for r in corrected_away["reasons"])
    # a LOSS on any primary is a LOSS (a LOSS is not corrected: it keeps production)
    assert _run(X_WIN, Y_LOSS, **any_holm)["decision"] == "LOSS"


@pytest.mark.parametrize("x", [X_TINY, X_MID, X_WIN], ids=["x-tiny", "x-mid", "x-win"])
@pytest.mark.parametrize("y", [Y_WIN, Y_NOISY, Y_LOSS], ids=["y-win", "y-noisy", "y-loss"])
def test_decide_all_is_requiring_both(x: tuple[int, int, int], y: tuple[int, int, int]) -> None:
    """decide = all WINs exactly when each primary alone would WIN; no correction is applied."""
    both = _run(x, y, **PAIR, decide="all", correction="holm")
    alone = [_run(x, y, primaries=[name])["decision"] for name in PAIR["primaries"]]
    expected = "LOSS" if "LOSS" in alone else "WIN" if alone == ["WIN", "WIN"] else "NO_CHANGE"
    assert both["decision"] == expected
    assert both["correction"]["registered"] == "holm" and both["correction"]["applied"].startswith("none needed")
    assert all(set(_metrics(both)[n]["test"]) == {"p"} for n in PAIR["primaries"])


def test_roles_follow_the_registered_primaries() -> None:
    result = _run(X_WIN, Y_WIN, **PAIR, decide="any", correction="holm")
    assert result["roles"] == {"pooled_rate_tps": "primary", "accepted_per_round": "guard",
                               "decode_tps": "primary", "ms_per_round": "reported", "ttft_s": "reported"}
    assert {n: m["role"] for n, m in _metrics(result).items()} == result["roles"]
    assert result["params"] == {**BASE, "repeats": 3, **PAIR, "decide": "any", "correction": "holm"}
    only_decode = _run(X_WIN, Y_WIN, primaries=["decode_tps"])
    assert only_decode["roles"]["pooled_rate_tps"] == "reported" and only_decode["roles"]["decode_tps"] == "primary"


def test_a_plan_without_the_members_decides_as_before() -> None:
    """No primaries, correction or decide: no new member anywhere in the result (its bytes are unchanged)."""
    old = _run(X_WIN, Y_WIN)
    assert set(old) == {"rule", "decision", "reasons", "cells", "checklist_literal", "spread", "params"}
    assert set(old["params"]) == {"bar", "confidence", "guard_min_repeats", "repeats"}
    assert all("test" not in m for m in _metrics(old).values())
    assert _metrics(old)["decode_tps"]["role"] == "guard"
    one = _run(X_WIN, Y_WIN, primaries=["pooled_rate_tps"])
    assert one["decision"] == old["decision"] and one["cells"]["short-b1"]["verdict"] == old["cells"]["short-b1"]["verdict"]
    assert one["correction"]["applied"] == "none needed: one primary"


@pytest.mark.parametrize(("extra", "message"), [
    ({"correction": "sidak"}, "params.correction: expected one of holm, bonferroni, none"),
    ({"primaries": ["pooled_rate_tps", "joules"]}, "params.primaries[1]:"),
    ({"primaries": ["decode_tps", "decode_tps"]}, "params.primaries[1]: 'decode_tps' appears twice"),
    ({"primaries": []}, "params.primaries: expected at least one metric"),
    ({**PAIR, "decide": "any", "correction": "none"}, 'params.correction: "none" with decide = "any" over 2'),
    ({**PAIR, "decide": "any"}, 'params.correction: "none" with decide = "any" over 2'),
])
def test_bad_registrations_are_refused_in_the_input(extra: dict[str, Any], message: str) -> None:
    ctl = same(Rep())
    data = win2_input({"short-b1": {"s1": ctl, "s2": ctl, "s3": ctl}}, params={**BASE, **extra})
    with pytest.raises(FieldError) as caught:
        compute(data)
    assert message in str(caught.value) and len(str(caught.value).splitlines()) == 1


def test_the_power_gate_refuses_a_plan_deciding_on_several_primaries(ledger: Any) -> None:
    """The power model covers pooled_rate_tps alone: with several primaries (and their correction) the
    gate cannot show the design detects the bar, so it fails closed before the drain, naming why."""
    import tomllib

    from runner.demo.scenarios import DATA
    from runner.gates.power import check_power
    from runner.plan.parse import read_plan_file

    path = DATA / "seed000-controlled.toml"
    decision = tomllib.loads(path.read_text())["decision"]
    several = read_plan_file(path, overrides={"decision": {**decision, "primaries": ["pooled_rate_tps", "decode_tps"],
                                                           "decide": "any", "correction": "holm"}}).plan
    checked = check_power(ledger, several)
    assert checked.verdict == "FAIL" and "covers pooled_rate_tps alone" in checked.summary
    assert "pooled_rate_tps, decode_tps (decide any, correction holm)" in checked.summary
    alone = read_plan_file(path, overrides={"decision": {**decision, "primaries": ["pooled_rate_tps"]}}).plan
    assert "covers pooled_rate_tps alone" not in check_power(ledger, alone).summary


def test_under_decide_any_a_primary_wins_only_with_its_corrected_test_recorded_as_passed() -> None:
    """Fail closed: a WIN effect whose corrected test is missing (or not passed) is no WIN of a primary."""
    from runner.decide.win2 import Win2Params, _wins

    holm = Win2Params(primaries=("pooled_rate_tps", "decode_tps"), correction="holm", decide="any")
    assert holm.applied == "holm"
    assert not _wins({"verdict": "WIN", "test": {"p": 0.001}}, holm)          # no recorded outcome
    assert not _wins({"verdict": "WIN"}, holm)
    assert not _wins({"verdict": "WIN", "test": {"p": 0.04, "passed": False}}, holm)
    assert _wins({"verdict": "WIN", "test": {"p": 0.001, "passed": True}}, holm)
    assert not _wins({"verdict": "NO_CHANGE", "test": {"p": 0.001, "passed": True}}, holm)
    single = Win2Params()   # one primary: no correction applies, the effect verdict decides
    assert single.applied == "none" and _wins({"verdict": "WIN"}, single)
