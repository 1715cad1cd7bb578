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
    ("negative rounds", _set(["waves", 3, "rounds"], -1), "waves[3].rounds: must be >= 0, got -1"),
    ("float rounds", _set(["waves", 3, "rounds"], 10.5), "waves[3].rounds: expected an integer, got a number"),
    ("bool accepted", _set(["waves", 0, "accepted"], True), "waves[0].accepted: expected an integer, got a boolean"),
    ("string decode", _set(["waves", 2, "decode_s"], "20"), "waves[2].decode_s: expected a number, got a string"),
    ("repeat out of range", _set(["waves", 1, "repeat"], 4), "waves[1].repeat: must be <= 3, got 4"),
    ("unknown start", _set(["waves", 1, "start"], "s4"), "waves[1].start: expected one of s1, s2, s3, got 's4'"),
    ("ttft not a list", _set(["waves", 5, "ttft_s"], 0.1), "waves[5].ttft_s: expected an array of numbers, got a number"),
    ("negative ttft", _set(["waves", 5, "ttft_s"], [0.1, -0.2]), "waves[5].ttft_s[1]: must be >= 0, got -0.2"),
    ("missing family", _del(["waves", 4, "family"]), "waves[4].family: required"),
    ("typo key", _set(["waves", 4, "decode_sec"], 1.0), "waves[4].decode_sec: unknown field"),
    ("bar typo", _set(["params", "barr"], 0.05), "params.barr: unknown field"),
    ("confidence 1", _set(["params", "confidence"], 1.0), "params.confidence: must be < 1, got 1"),
    ("guard above repeats", _set(["params", "guard_min_repeats"], 4),
     "params.guard_min_repeats: must be <= 3, got 4"),
    ("no cells", _set(["decision_cells"], []), "decision_cells: expected at least one cell"),
    ("duplicate cell", _set(["decision_cells"], ["short-b1", "short-b1"]), "decision_cells[1]: 'short-b1' appears twice"),
    ("s2 not B", _set(["starts", "s2", "role"], "A"), "starts.s2.role: expected one of B, got 'A'"),
    ("controls differ", _set(["starts", "s3", "role"], "P"), "starts.s3.role: expected the same control role"),
    ("missing start", _del(["starts", "s3"]), "starts.s3: required"),
    ("cap zero", _set(["starts", "s1", "clock_cap_mhz"], 0), "starts.s1.clock_cap_mhz: must be >= 1, got 0"),
    ("thermal negative", _set(["thermal_dialbacks_in_hold"], -1), "thermal_dialbacks_in_hold: must be >= 0, got -1"),
    ("nan", _set(["waves", 0, "decode_s"], float("nan")), "waves[0].decode_s: NaN and Infinity are not allowed"),
    ("archive cap", _set(["archive"], [{"cell": "short-b1", "pooled_rate_tps": 1.0, "clock_cap_mhz": 2150}]),
     "archive[0].clock_cap_mhz: 2150 differs from production_clock_cap_mhz 2300"),
    ("archive rate", _set(["archive"], [{"cell": "short-b1", "pooled_rate_tps": 0}]),
     "archive[0].pooled_rate_tps: must be > 0, got 0"),
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
    ("block", _set(["requests", 2, "block"], "C1"), "requests[2].block: expected one of A1, B1, B2, A2, got 'C1'"),
    ("arm", _set(["requests", 2, "arm"], "B"), "requests[2].arm: block A1 belongs to arm A"),
    ("status", _set(["requests", 7, "status"], "weird"), "requests[7].status: expected one of"),
    ("tokens", _set(["requests", 7, "delivered_tokens"], -3), "requests[7].delivered_tokens: must be >= 0, got -3"),
    ("decode", _set(["requests", 7, "decode_s"], "x"), "requests[7].decode_s: expected a number, got a string"),
    ("gates", _set(["gates_passed"], "yes"), "gates_passed: expected true or false"),
    ("failures", _set(["failures"], [""]), "failures[0]: expected a non-empty string"),
    ("bootstrap", _set(["params", "bootstrap"], 0), "params.bootstrap: must be >= 1, got 0"),
    ("seed", _set(["params", "seed"], -1), "params.seed: must be >= 0, got -1"),
    ("interval", _set(["params", "interval"], 0), "params.interval: must be > 0, got 0"),
    ("family slash", _set(["requests", 0, "family"], "a/b"), "requests[0].family: must not contain '/'"),
    ("missing", _del(["requests", 0, "ttft_s"]), "requests[0].ttft_s: required"),
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
    ({}, "rule: required (expected one of pp3-v1, win2-v1)"),
    ({"rule": "win3"}, "rule: expected one of pp3-v1, win2-v1, got 'win3'"),
])
def test_rule_dispatch(data: Any, message: str) -> None:
    with pytest.raises(FormatError) as caught:
        compute(data)
    assert str(caught.value) == message


def test_integers_beyond_json_range_are_refused() -> None:
    data = win2()
    data["waves"][0]["accepted"] = 2**53
    with pytest.raises(FormatError, match=r"^waves\[0\]\.accepted: integer 9007199254740992 is outside \+/-\(2\^53-1\)"):
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
