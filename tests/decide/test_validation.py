"""Bad inputs are refused with one line naming the field (FormatError -> exit 2)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ledger.errors import FormatError
from runner.decide import compute, validate

from .builders import Rep, same, win2_input
from .test_pp3_cases import candidate_input

Edit = Callable[[dict[str, Any]], None]


def win2() -> dict[str, Any]:
    return win2_input({"short-b1": {"s1": same(Rep()), "s2": same(Rep()), "s3": same(Rep())}})


def _set(path: list[Any], value: Any) -> Edit:
    def edit(data: dict[str, Any]) -> None:
        target: Any = data
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return edit


def _del(path: list[Any]) -> Edit:
    def edit(data: dict[str, Any]) -> None:
        target: Any = data
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]
    return edit


WIN2_CASES: list[tuple[str, Edit, str]] = [
    ("negative rounds", _set(["waves", 3, "rounds"], -1), "waves[3].rounds: expected a non-negative integer or null"),
    ("float rounds", _set(["waves", 3, "rounds"], 10.5), "waves[3].rounds: expected a non-negative integer or null"),
    ("bool accepted", _set(["waves", 0, "accepted"], True), "waves[0].accepted: expected a non-negative integer"),
    ("string decode", _set(["waves", 2, "decode_s"], "20"), "waves[2].decode_s: expected a non-negative number"),
    ("repeat out of range", _set(["waves", 1, "repeat"], 4), "waves[1].repeat: expected an integer from 1 to 3"),
    ("unknown start", _set(["waves", 1, "start"], "s4"), "waves[1].start: expected one of 's1', 's2', 's3'"),
    ("ttft not a list", _set(["waves", 5, "ttft_s"], 0.1), "waves[5].ttft_s: expected a list"),
    ("negative ttft", _set(["waves", 5, "ttft_s"], [0.1, -0.2]), "waves[5].ttft_s[1]: expected a non-negative"),
    ("missing family", _del(["waves", 4, "family"]), "waves[4].family: missing"),
    ("typo key", _set(["waves", 4, "decode_sec"], 1.0), "waves[4].decode_sec: unknown field"),
    ("bar typo", _set(["params", "barr"], 0.05), "params.barr: unknown field"),
    ("confidence 1", _set(["params", "confidence"], 1.0), "params.confidence: expected a number strictly between"),
    ("guard above repeats", _set(["params", "guard_min_repeats"], 4),
     "params.guard_min_repeats: expected an integer from 1 to 3"),
    ("no cells", _set(["decision_cells"], []), "decision_cells: expected at least one cell"),
    ("duplicate cell", _set(["decision_cells"], ["short-b1", "short-b1"]), "decision_cells[1]: duplicate cell"),
    ("s2 not B", _set(["starts", "s2", "role"], "A"), "starts.s2.role: expected one of 'B'"),
    ("controls differ", _set(["starts", "s3", "role"], "P"), "starts.s3.role: expected the same control role"),
    ("missing start", _del(["starts", "s3"]), "starts.s3: missing"),
    ("cap zero", _set(["starts", "s1", "clock_cap_mhz"], 0), "starts.s1.clock_cap_mhz: expected an integer >= 1"),
    ("thermal negative", _set(["thermal_dialbacks_in_hold"], -1), "thermal_dialbacks_in_hold: expected a non-neg"),
    ("nan", _set(["waves", 0, "decode_s"], float("nan")), "waves[0].decode_s: expected a non-negative number"),
    ("archive cap", _set(["archive"], [{"cell": "short-b1", "pooled_rate_tps": 1.0, "clock_cap_mhz": 2150}]),
     "archive[0].clock_cap_mhz: 2150 differs from production_clock_cap_mhz 2300"),
    ("archive rate", _set(["archive"], [{"cell": "short-b1", "pooled_rate_tps": 0}]),
     "archive[0].pooled_rate_tps: expected a number > 0"),
    ("unknown top", _set(["extra"], 1), "extra: unknown field"),
]


@pytest.mark.parametrize(("name", "edit", "message"), WIN2_CASES, ids=[c[0] for c in WIN2_CASES])
def test_win2_bad_input_names_the_field(name: str, edit: Edit, message: str) -> None:
    data = win2()
    edit(data)
    with pytest.raises(FormatError) as caught:
        compute(data)
    assert str(caught.value).startswith(message), str(caught.value)
    assert "\n" not in str(caught.value)
    with pytest.raises(FormatError):
        validate(data)


def test_win2_duplicate_wave() -> None:
    data = win2()
    data["waves"].append(dict(data["waves"][2]))
    with pytest.raises(FormatError, match=r"^waves\[18\]: duplicate of waves\[2\] \(s1 short-b1 repeat 2 family "
                                          r"filings\)$"):
        compute(data)


PP3_CASES: list[tuple[str, Edit, str]] = [
    ("block", _set(["requests", 2, "block"], "C1"), "requests[2].block: expected one of 'A1', 'B1', 'B2', 'A2'"),
    ("arm", _set(["requests", 2, "arm"], "B"), "requests[2].arm: block A1 belongs to arm A"),
    ("status", _set(["requests", 7, "status"], "weird"), "requests[7].status: expected one of"),
    ("tokens", _set(["requests", 7, "delivered_tokens"], -3), "requests[7].delivered_tokens: expected a non-negative"),
    ("decode", _set(["requests", 7, "decode_s"], "x"), "requests[7].decode_s: expected a non-negative number"),
    ("gates", _set(["gates_passed"], "yes"), "gates_passed: expected true or false"),
    ("failures", _set(["failures"], [""]), "failures[0]: expected a non-empty string"),
    ("bootstrap", _set(["params", "bootstrap"], 0), "params.bootstrap: expected an integer from 1 to"),
    ("seed", _set(["params", "seed"], -1), "params.seed: expected an integer from 0 to"),
    ("interval", _set(["params", "interval"], 0), "params.interval: expected a number strictly between 0 and 1"),
    ("family slash", _set(["requests", 0, "family"], "a/b"), "requests[0].family: must not contain '/'"),
    ("missing", _del(["requests", 0, "ttft_s"]), "requests[0].ttft_s: missing"),
]


@pytest.mark.parametrize(("name", "edit", "message"), PP3_CASES, ids=[c[0] for c in PP3_CASES])
def test_pp3_bad_input_names_the_field(name: str, edit: Edit, message: str) -> None:
    data = candidate_input()
    edit(data)
    with pytest.raises(FormatError) as caught:
        compute(data)
    assert str(caught.value).startswith(message), str(caught.value)


def test_pp3_duplicate_request() -> None:
    data = candidate_input()
    data["requests"].append(dict(data["requests"][4]))
    with pytest.raises(FormatError, match=r"^requests\[24\]: duplicate of requests\[4\] \(block A1, f2/32k\)$"):
        compute(data)


@pytest.mark.parametrize(("data", "message"), [
    ([], "input: expected an object"),
    ({}, "rule: missing (expected one of pp3-v1, win2-v1)"),
    ({"rule": "win3"}, "rule: expected one of 'pp3-v1', 'win2-v1', got 'win3'"),
])
def test_rule_dispatch(data: Any, message: str) -> None:
    with pytest.raises(FormatError) as caught:
        compute(data)
    assert str(caught.value) == message


def test_integers_beyond_json_range_are_refused() -> None:
    data = win2()
    data["waves"][0]["accepted"] = 2**53
    with pytest.raises(FormatError, match=r"^waves\[0\]\.accepted: integer beyond \+/-\(2\^53-1\)"):
        compute(data)


@pytest.mark.parametrize("value", [1e308, 5e-324])
def test_values_that_overflow_the_arithmetic_are_bad_input(value: float) -> None:
    data = win2()
    for wave in data["waves"]:
        wave["decode_s"] = value
        wave["client_decode_s"] = value
    with pytest.raises(FormatError, match=r"^input: values out of range"):
        compute(data)


def test_pp3_values_that_overflow_are_bad_input() -> None:
    data = candidate_input()
    for r in data["requests"]:
        r["decode_s"] = 5e-324
    with pytest.raises(FormatError, match=r"^input: values out of range"):
        compute(data)


def test_no_waves_at_all_is_inconclusive() -> None:
    data = win2()
    data["waves"] = []
    result = compute(data)
    assert result["decision"] == "INCONCLUSIVE"
    assert "missing data: s1 short-b1 repeat 1: no waves" in result["reasons"]
