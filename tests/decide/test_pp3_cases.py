"""pp3-v1 worked by hand, one case per outcome (docs/rules.md).

Two families f1, f2 x contexts short/32k/150k; every request decodes for 10 s. Arm A delivers
900 tokens per request (90 tok/s). With B at 972 tokens for f1 and 1026 for f2, the per-family
gains are 972/900 - 1 = 8 % and 1026/900 - 1 = 14 %, the pooled gain (972+1026)/1800 - 1 = 11 %.
With two clusters a resample is {f1,f1}, {f1,f2} or {f2,f2}: 3 distinct gains (8 %, 11 %, 14 %);
about a quarter of 2000 resamples are {f1,f1}, so the 5 % quantile is 8 %.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from runner.decide import compute

from .builders import CONTEXTS, find, pp3_input, pp3_request

FAILURE_KINDS = ["q_target_law", "greedy_identity", "grammar", "stop", "lifecycle", "corruption", "recovery",
                 "target_policy_mismatch", "weight_mismatch"]


def candidate_input() -> dict[str, Any]:
    return pp3_input(b_tokens_by_family={"f1": 972, "f2": 1026})


def test_candidate() -> None:
    result = compute(candidate_input())
    assert result["decision"] == "CANDIDATE"
    assert result["point_gain"] == pytest.approx(0.11, rel=1e-13)
    assert result["lower_bound"] == pytest.approx(0.08, rel=1e-12)
    assert result["distinct_resamples"] == 3
    assert result["resamples"] == 2000
    assert result["per_family"]["f1"] == {"gain": pytest.approx(0.08, rel=1e-13), "pairs": 3}
    assert result["per_family"]["f2"]["gain"] == pytest.approx(0.14, rel=1e-13)
    assert result["per_pair"]["f1/short"]["gain"] == pytest.approx(0.08, rel=1e-13)
    assert result["per_pair"]["f2/150k"] == {"gain": pytest.approx(0.14, rel=1e-13), "ttft_change": 0.0,
                                             "round_p95_change": 0.0}
    assert list(result["per_pair"]) == [f"{f}/{c}" for f in ("f1", "f2") for c in CONTEXTS]
    assert "every gate passed; CANDIDATE is not promotion" in result["reasons"]
    assert "small-family limit: 2 source families as clusters, 3 distinct values among 2000 resamples" \
        in result["reasons"]


def test_candidate_lower_bound_is_the_numpy_quantile_of_the_resamples() -> None:
    rng = np.random.default_rng(4103)
    idx = rng.integers(0, 2, size=(2000, 2))
    family_gain_tokens = np.array([972.0 * 6, 1026.0 * 6])     # B tokens per family, both B blocks
    b = family_gain_tokens[idx].sum(axis=1)
    a = np.full(2000, 900.0 * 6 * 2)
    gains = (b / 120.0) / (a / 120.0) - 1
    result = compute(candidate_input())
    assert result["lower_bound"] == pytest.approx(float(np.quantile(gains, 0.05)), rel=1e-12)
    assert (idx == 0).all(axis=1).sum() > 100  # ~a quarter of the resamples are {f1, f1}


def test_reject_by_lost_request() -> None:
    data = candidate_input()
    find(data["requests"], "B2", "f2", "32k")["status"] = "lost"
    result = compute(data)
    assert result["decision"] == "REJECT"
    assert "lost request: block B2 f2/32k" in result["reasons"]


@pytest.mark.parametrize("kind", FAILURE_KINDS)
def test_reject_by_failure_kind(kind: str) -> None:
    result = compute(pp3_input(b_tokens_by_family={"f1": 972, "f2": 1026}, failures=[kind]))
    assert result["decision"] == "REJECT"
    assert f"failure: {kind}" in result["reasons"]
    assert result["point_gain"] == pytest.approx(0.11)  # still computed and reported


def test_reject_outranks_no_promotion() -> None:
    result = compute(pp3_input(b_tokens_by_family={"f1": 900, "f2": 900}, failures=["grammar"], gates_passed=False))
    assert result["decision"] == "REJECT"


def test_no_promotion_by_gates_not_passed() -> None:
    result = compute(pp3_input(b_tokens_by_family={"f1": 972, "f2": 1026}, gates_passed=False))
    assert result["decision"] == "NO_PROMOTION"
    assert "not every gate passed" in result["reasons"]


@pytest.mark.parametrize("status", ["censored", "failed", "timeout", "cancelled"])
def test_no_promotion_by_request_not_ok(status: str) -> None:
    data = candidate_input()
    find(data["requests"], "A2", "f1", "150k")["status"] = status
    result = compute(data)
    assert result["decision"] == "NO_PROMOTION"
    assert f"request not ok: block A2 f1/150k is {status}" in result["reasons"]
    # the gain is computed over the pairs that are complete: f1/150k is left out
    assert result["per_family"]["f1"]["pairs"] == 2
    assert result["per_pair"]["f1/150k"]["gain"] is None


def test_no_promotion_by_missing_block() -> None:
    data = candidate_input()
    data["requests"] = [r for r in data["requests"] if r["block"] != "B2"]
    result = compute(data)
    assert result["decision"] == "NO_PROMOTION"
    assert "incomplete: pair f1/short missing in block B2" in result["reasons"]
    assert result["point_gain"] is None
    assert any(r.startswith("gain not computable") for r in result["reasons"])


def test_no_promotion_by_missing_pair() -> None:
    data = candidate_input()
    data["requests"] = [r for r in data["requests"]
                        if not (r["family"] == "f2" and r["context"] == "150k" and r["block"] == "A1")]
    result = compute(data)
    assert result["decision"] == "NO_PROMOTION"
    assert "incomplete: pair f2/150k missing in block A1" in result["reasons"]


def test_no_promotion_by_small_gain() -> None:
    # B 3 % faster everywhere: point .03 < .05 although the lower bound is .03 > 0
    result = compute(pp3_input(b_tokens_by_family={"f1": 927, "f2": 927}))
    assert result["decision"] == "NO_PROMOTION"
    assert result["point_gain"] == pytest.approx(0.03, rel=1e-13)
    assert result["lower_bound"] > 0
    assert "point gain +3.00% < +5.00%" in result["reasons"]


def test_no_promotion_by_lower_bound() -> None:
    # f1 -10 %, f2 +25 %: point +7.5 % but the {f1,f1} resamples put the 5 % quantile at -10 %
    result = compute(pp3_input(b_tokens_by_family={"f1": 810, "f2": 1125}))
    assert result["point_gain"] == pytest.approx(0.075, rel=1e-13)
    assert result["lower_bound"] == pytest.approx(-0.10, rel=1e-12)
    assert result["decision"] == "NO_PROMOTION"
    assert "90% bootstrap lower bound -10.00% <= 0" in result["reasons"]


@pytest.mark.parametrize(("field", "label"), [("ttft_s", "TTFT"), ("round_ms_p95", "p95 round time")])
def test_no_promotion_by_regression(field: str, label: str) -> None:
    data = candidate_input()
    base = find(data["requests"], "B1", "f2", "32k")[field]
    # B1 and B2 mean 6 % above A: 1.12 x in one block, 1.00 x in the other
    find(data["requests"], "B1", "f2", "32k")[field] = base * 1.12
    result = compute(data)
    key = "ttft_change" if field == "ttft_s" else "round_p95_change"
    assert result["per_pair"]["f2/32k"][key] == pytest.approx(0.06, rel=1e-12)
    assert result["decision"] == "NO_PROMOTION"
    assert f"regression: f2/32k {label} +6.00% > +5.00%" in result["reasons"]


def test_regression_at_the_limit_is_not_a_regression() -> None:
    data = candidate_input()
    for block in ("B1", "B2"):
        find(data["requests"], block, "f1", "short")["ttft_s"] = 0.5 * 1.04
    assert compute(data)["decision"] == "CANDIDATE"


def test_no_requests_is_no_promotion() -> None:
    result = compute({"rule": "pp3-v1", "gates_passed": True, "failures": [], "requests": []})
    assert result["decision"] == "NO_PROMOTION"
    assert "incomplete: no requests" in result["reasons"]
    assert result["point_gain"] is None and result["lower_bound"] is None and result["distinct_resamples"] is None


def test_output_keys_are_the_contract() -> None:
    result = compute(candidate_input())
    assert list(result)[:9] == ["rule", "decision", "reasons", "point_gain", "lower_bound", "distinct_resamples",
                                "resamples", "per_pair", "per_family"]
    assert set(result["per_pair"]["f1/short"]) == {"gain", "ttft_change", "round_p95_change"}


def _with_tpot(data: dict[str, Any], a_ms: float, b_ms: float) -> dict[str, Any]:
    """The candidate input with the TPOT guard registered and no p95 round time (chunks are not steps)."""
    data["params"]["guard"] = "tpot_ms"
    for r in data["requests"]:
        r["round_ms_p95"] = None
        r["tpot_ms"] = b_ms if r["arm"] == "B" else a_ms
    return data


def test_tpot_guard_decides_where_round_time_is_absent() -> None:
    result = compute(_with_tpot(candidate_input(), a_ms=10.0, b_ms=10.4))  # +4 %: inside 5 %
    assert result["decision"] == "CANDIDATE", result["reasons"]
    assert result["per_pair"]["f1/short"]["tpot_change"] == pytest.approx(0.04, rel=1e-12)
    assert result["per_pair"]["f1/short"]["round_p95_change"] is None  # recorded, not a guard here
    assert "no TTFT or TPOT regression above +5.00% in any pair" in result["reasons"]
    assert result["params"]["guard"] == "tpot_ms"


def test_tpot_guard_regression_holds_the_promotion() -> None:
    result = compute(_with_tpot(candidate_input(), a_ms=10.0, b_ms=10.6))  # +6 % > 5 %
    assert result["decision"] == "NO_PROMOTION"
    assert "regression: f1/short TPOT +6.00% > +5.00%" in result["reasons"]


def test_round_guard_without_round_times_is_not_evaluable() -> None:
    data = _with_tpot(candidate_input(), a_ms=10.0, b_ms=10.0)
    del data["params"]["guard"]
    result = compute(data)
    assert result["decision"] == "NO_PROMOTION"
    assert "guard not evaluable: f1/short p95 round time missing" in result["reasons"]
    assert "guard" not in result["params"]  # the default is not written: old results stay byte-identical


def _bounded_pair(a_tokens: int, a_decode: float, b_tokens: int, b_decode: float, status: str) -> dict[str, Any]:
    requests = [pp3_request(block, "f1", "short", tokens=b_tokens if block[0] == "B" else a_tokens,
                            decode_s=b_decode if block[0] == "B" else a_decode,
                            ttft=1.2 if block[0] == "B" else 0.9, status=status)
                for block in ("A1", "B1", "B2", "A2")]
    data = pp3_input()
    data["requests"] = requests
    return data


def test_bounded_runs_are_observations() -> None:
    """docs/rules.md's worked example: runs cut by the registered decode bound count like ok runs."""
    result = compute(_bounded_pair(300, 29.9, 360, 29.95, "bounded"))
    assert result["point_gain"] == (720 / 59.9) / (600 / 59.8) - 1 == 0.19799666110183645
    assert not any("not ok" in r or "not computable" in r for r in result["reasons"]), result["reasons"]
    # TTFT is reported apart: B's longer prefill is a TTFT regression, not a shorter decode
    assert result["per_pair"]["f1/short"]["ttft_change"] == pytest.approx(1.2 / 0.9 - 1)


def test_censored_runs_are_not_observations() -> None:
    result = compute(_bounded_pair(300, 29.9, 360, 29.95, "censored"))
    assert result["decision"] == "NO_PROMOTION" and result["point_gain"] is None
    assert "gain not computable: no pair has all four blocks ok" in result["reasons"]


def _with_clocks(caps: dict[str, int | None], production: int | None = 2300, thermal: int = 0) -> dict[str, Any]:
    data = candidate_input()
    data["clocks"] = {"production_clock_cap_mhz": production, "blocks": caps, "thermal_dialbacks_in_hold": thermal}
    return data


SAME_CAPS = {"A1": 2300, "B1": 2300, "B2": 2300, "A2": 2300}


def test_same_clock_caps_keep_the_candidate() -> None:
    assert compute(_with_clocks(SAME_CAPS))["decision"] == "CANDIDATE"


def test_different_clock_caps_are_not_candidate_with_the_reason_named() -> None:
    result = compute(_with_clocks({**SAME_CAPS, "B1": 2150}))
    assert result["decision"] == "NO_PROMOTION"
    assert "blocks ran at different clock caps: A1 2300 MHz, B1 2150 MHz, B2 2300 MHz, A2 2300 MHz" \
        in result["reasons"]
    assert "B1 ran at 2150 MHz; production's configured clock cap is 2300 MHz" in result["reasons"]


def test_unrecorded_clock_cap_is_not_candidate() -> None:
    result = compute(_with_clocks({**SAME_CAPS, "A2": None}))
    assert result["decision"] == "NO_PROMOTION" and "clock cap not recorded for A2" in result["reasons"]


def test_a_dial_back_inside_the_hold_is_not_candidate() -> None:
    result = compute(_with_clocks(SAME_CAPS, thermal=1))
    assert result["decision"] == "NO_PROMOTION"
    assert "thermal dial-back inside the HOLD (1 event(s))" in result["reasons"]


def test_a_cap_recorded_where_clocks_do_not_apply_is_not_candidate() -> None:
    result = compute(_with_clocks({"A1": None, "B1": 2300, "B2": None, "A2": None}, production=None))
    assert result["decision"] == "NO_PROMOTION"
    assert "clock cap recorded for B1, but clocks do not apply on this site" in result["reasons"]
    assert compute(_with_clocks(dict.fromkeys(SAME_CAPS), production=None))["decision"] == "CANDIDATE"


def test_incomplete_priming_is_not_candidate() -> None:
    data = candidate_input()
    data["incomplete"] = ["priming in block A1: opinions/32k occupies 1000 tokens, the plan declares 1024"]
    result = compute(data)
    assert result["decision"] == "NO_PROMOTION"
    assert "incomplete: priming in block A1: opinions/32k occupies 1000 tokens, the plan declares 1024" \
        in result["reasons"]
