"""The report states the MDE the window actually had, from its own control starts, beside the verdict."""

from __future__ import annotations

import re
from typing import Any

from runner.decide.power import design_of, power_figures
from runner.decide.spread import estimate_spread
from runner.plan.parse import read_plan_file
from runner.report.document import Para
from runner.report.power import REPORT_WINDOWS, in_window_mde, power_head
from tests.runner.script import COMMIT, EXAMPLES

PLAN = read_plan_file(EXAMPLES / "seed000-production-policy.toml", overrides={"commit": COMMIT}).plan


def _result(s1: list[float], s3: list[float], decision: str = "NO_CHANGE") -> dict[str, Any]:
    metric = {"pooled_rate_tps": {"per_repeat": {"s1": s1, "s2": [100.0] * len(s1), "s3": s3}}}
    return {"decision": decision, "cells": {cell: {"metrics": metric} for cell in PLAN.decision_cells}}


def _text(sections: list[Any]) -> str:
    return " ".join(b.text for s in sections for b in s.blocks if isinstance(b, Para))


def test_the_head_states_the_mde_from_the_windows_own_control_spread() -> None:
    s1, s3 = [100.0, 103.0, 98.5], [101.0, 99.0, 100.5]
    text = _text(power_head(PLAN, {}, _result(s1, s3)))
    spread = estimate_spread([(s1, s3)], source="in-window")
    assert spread is not None
    expected = power_figures(design_of(PLAN), [spread, spread], windows=REPORT_WINDOWS, seed=1, search=False,
                             analytic=False)["mde"]
    assert f"NO_CHANGE; this window could detect >= {expected:.1%} with 80% power" in text
    assert f"repeat-to-repeat {spread.repeat_sd:.2%}" in text


def test_a_noisier_window_could_detect_less() -> None:
    quiet = in_window_mde(PLAN, {}, _result([100.0, 100.5, 99.8], [100.2, 100.1, 100.0]))
    noisy = in_window_mde(PLAN, {}, _result([100.0, 106.0, 95.0], [101.0, 97.0, 104.0]))
    assert quiet is not None and noisy is not None and quiet["mde"] < noisy["mde"]


def test_a_window_without_matched_control_repeats_says_no_mde_is_stated() -> None:
    text = _text(power_head(PLAN, {}, _result([None, None, None], [None, None, None], "INCONCLUSIVE")))  # type: ignore[list-item]
    assert "INCONCLUSIVE; the window's own control spread cannot be estimated" in text
    assert not re.search(r"could detect >=", text)


def test_pp3_takes_its_spread_from_blocks_a1_and_a2() -> None:
    plan = read_plan_file(EXAMPLES / "seed003-abba.toml", overrides={"commit": COMMIT}).plan
    requests = [{"block": b, "family": f, "context": c, "status": "ok", "delivered_tokens": 500,
                 "decode_s": 10.0 * (1 + 0.01 * i) if b == "A1" else 10.0}
                for b in ("A1", "B1", "B2", "A2") for i, (f, c) in enumerate(
                    [(f, c) for f in ("opinions", "filings") for c in ("short", "32k", "150k")])]
    figures = in_window_mde(plan, {"requests": requests}, {"decision": "CANDIDATE"})
    assert figures is not None and figures["spread"]["source"] == "in-window" and figures["spread"]["windows"] == 1
    assert figures["spread"]["repeat_sd"] > 0


class _Gate:
    type = "gate.result"

    def __init__(self, seq: int, payload: dict[str, Any]) -> None:
        self.seq, self.payload = seq, payload


def test_the_head_also_says_what_the_power_gate_said_before_the_window() -> None:
    gate = _Gate(9, {"gate": "power", "verdict": "PASS", "summary": "PASS: P(WIN) 0.884 at a true +3.50%",
                     "evidence": {"figures": {"mde": 0.0321}}})
    text = _text(power_head(PLAN, {}, _result([100.0, 103.0, 98.5], [101.0, 99.0, 100.5]), [gate]))  # type: ignore[list-item]
    assert "Before the window, its power gate (seq 9) said PASS: P(WIN) 0.884 at a true +3.50%" in text
