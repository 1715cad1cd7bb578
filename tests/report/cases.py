"""One input per outcome of each rule (shared by the report tests)."""

from __future__ import annotations

from typing import Any

from tests.decide.builders import Rep, find, pp3_input, same, win2_input
from tests.decide.test_pp3_cases import candidate_input
from tests.decide.test_win2_cases import one_cell, rate_rep

ARCHIVE = [{"cell": "short-b1", "pooled_rate_tps": v} for v in (100.0, 104.0, 96.0)]


def _missing_wave() -> dict[str, Any]:
    data = one_cell([rate_rep(110), rate_rep(112.5), rate_rep(107.5)], archive=ARCHIVE)
    data["waves"] = [w for w in data["waves"] if not (w["start"] == "s2" and w["repeat"] == 3)]
    return data


def _lost() -> dict[str, Any]:
    data = candidate_input()
    find(data["requests"], "B2", "f2", "32k")["status"] = "lost"
    return data


def _missing_block() -> dict[str, Any]:
    data = candidate_input()
    data["requests"] = [r for r in data["requests"] if r["block"] != "B2"]
    return data


WIN = [rate_rep(110), rate_rep(112.5), rate_rep(107.5)]
CASES: dict[str, tuple[Any, str]] = {
    "win2_win": (lambda: win2_input({"short-b1": {"s1": same(Rep()), "s2": WIN, "s3": same(Rep())},
                                     "32k-b1": {"s1": same(Rep()), "s2": WIN, "s3": same(Rep())}}, archive=ARCHIVE),
                 "WIN"),
    "win2_loss": (lambda: one_cell([Rep(decode_s=25.0), Rep(decode_s=24.0), Rep(decode_s=26.0)]), "LOSS"),
    "win2_no_change": (lambda: one_cell([rate_rep(110), rate_rep(95), rate_rep(104)]), "NO_CHANGE"),
    "win2_inconclusive_clock": (lambda: one_cell(WIN, caps=(2300, 2150, 2300)), "INCONCLUSIVE"),
    "win2_inconclusive_missing_wave": (_missing_wave, "INCONCLUSIVE"),
    "pp3_candidate": (candidate_input, "CANDIDATE"),
    "pp3_reject": (_lost, "REJECT"),
    "pp3_no_promotion_lower_bound": (lambda: pp3_input(b_tokens_by_family={"f1": 810, "f2": 1125}), "NO_PROMOTION"),
    "pp3_no_promotion_missing_block": (_missing_block, "NO_PROMOTION"),
    "pp3_no_requests": (lambda: {"rule": "pp3-v1", "gates_passed": True, "failures": [], "requests": []},
                        "NO_PROMOTION"),
}
