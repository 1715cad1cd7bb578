"""diff(recorded, recomputed): exact but for a float's last bits, field-level; a decision recorded in a real ledger reads back as a MATCH."""

from __future__ import annotations

from typing import Any

from ledger.keys import Signer
from ledger.store import Ledger
from runner.decide import compute, diff, inputs_digest

from .test_pp3_cases import candidate_input
from .test_win2_cases import _win_input


def test_identical_results_have_no_difference() -> None:
    assert diff(compute(_win_input()), compute(_win_input())) == []


def test_int_and_float_of_the_same_value_match_but_bools_do_not() -> None:
    assert diff({"a": 100}, {"a": 100.0}) == []
    assert [str(d) for d in diff({"a": 1}, {"a": True})] == ["a: recorded 1, recomputed true"]


def test_a_float_that_differs_in_its_last_bits_matches_and_one_that_differs_more_does_not() -> None:
    """Another machine's maths library may round an exp/log an ulp apart (seen: the model-1 power
    figure 0.002307708408862985 recomputed as 0.0023077084088629846): that is a MATCH; a difference
    a rule could act on, an integer off by one, or a verdict are not."""
    assert diff({"p": 0.002307708408862985}, {"p": 0.0023077084088629846}) == []
    assert diff({"p": 1e-300}, {"p": 0.0}) == []
    assert [d.path for d in diff({"p": 0.0231}, {"p": 0.02310001})] == ["p"]
    assert [d.path for d in diff({"n": 2**60}, {"n": 2**60 + 1})] == ["n"]
    assert [d.path for d in diff({"x": float("nan")}, {"x": float("nan")})] == ["x"]
    assert [d.path for d in diff({"x": float("inf")}, {"x": 1e308})] == ["x"]


def test_differences_name_the_field() -> None:
    recorded = compute(_win_input())
    recomputed = compute(_win_input(params={"bar": 0.15, "confidence": 0.95, "guard_min_repeats": 2}))
    paths = [d.path for d in diff(recorded, recomputed)]
    assert "decision" in paths
    assert "cells.short-b1.verdict" in paths
    assert "cells.short-b1.metrics.pooled_rate_tps.verdict" in paths
    assert "params.bar" in paths
    assert "cells.short-b1.metrics.pooled_rate_tps.point" not in paths  # the numbers do not depend on the bar
    line = next(str(d) for d in diff(recorded, recomputed) if d.path == "decision")
    assert line == 'decision: recorded "WIN", recomputed "NO_CHANGE"'


def test_absent_and_extra_fields() -> None:
    found = diff({"a": [1, 2], "b": 1}, {"a": [1], "c": 2})
    assert [(d.path, d.to_json()["missing"]) for d in found] == [("a[1]", "recomputed"), ("b", "recomputed"),
                                                                 ("c", "recorded")]


def _record(ledger: Ledger, root: Signer, data: dict[str, Any], result: dict[str, Any]) -> tuple[str, int]:
    waves = [ledger.append("window/w1", "wave.measured", {"window": "w1", "n": i}, root) for i in range(3)]
    digest = inputs_digest([e.hash for e in waves])
    event = ledger.append("window/w1", "decision.recorded",
                          {"window": "w1", "rule": result["rule"], "params": result["params"],
                           "inputs_digest": digest, "input": data, "result": result}, root)
    return digest, event.seq


def test_recorded_decision_reads_back_as_a_match(ledger: Ledger, root: Signer) -> None:
    for data in (_win_input(), candidate_input()):
        _, seq = _record(ledger, root, data, compute(data))
        payload = ledger.get(seq).payload
        assert diff(payload["result"], compute(payload["input"])) == []


def test_decision_from_other_params_is_a_mismatch(ledger: Ledger, root: Signer) -> None:
    data = candidate_input()
    tampered = {**data, "params": {**data["params"], "min_gain": 0.20}}   # recorded with a raised bar
    _, seq = _record(ledger, root, data, compute(tampered))
    payload = ledger.get(seq).payload
    found = {d.path: d for d in diff(payload["result"], compute(payload["input"]))}
    assert set(found) >= {"decision", "params.min_gain"}
    assert (found["decision"].recorded, found["decision"].recomputed) == ("NO_PROMOTION", "CANDIDATE")
