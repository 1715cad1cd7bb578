"""The report states the MDE the window actually had, from its own control starts, beside the verdict."""

from __future__ import annotations

import re
from typing import Any

from runner.decide.noise import METRICS, ControlPair, estimate_win2_noise
from runner.decide.power import design_of, power_figures
from runner.plan.parse import read_plan_file
from runner.report.document import Para
from runner.report.power import REPORT_WINDOWS, in_window_mde, power_head
from tests.runner.script import COMMIT, EXAMPLES

PLAN = read_plan_file(EXAMPLES / "seed000-production-policy.toml", overrides={"commit": COMMIT}).plan
PP3 = read_plan_file(EXAMPLES / "seed003-abba.toml", overrides={"commit": COMMIT}).plan
STILL = [2.0, 2.0, 2.0]  # a guard that reads the same in both control starts: no spread, never a LOSS


def _result(s1: list[float], s3: list[float], decision: str = "NO_CHANGE", guards: tuple[list[float], list[float]]
            | None = (STILL, STILL)) -> dict[str, Any]:
    metric: dict[str, Any] = {"pooled_rate_tps": {"per_repeat": {"s1": s1, "s2": [100.0] * len(s1), "s3": s3}}}
    if guards is not None:
        for name in METRICS[1:]:
            metric[name] = {"per_repeat": {"s1": guards[0], "s2": guards[0], "s3": guards[1]}}
    return {"decision": decision, "cells": {cell: {"metrics": metric} for cell in PLAN.decision_cells}}


def _text(sections: list[Any]) -> str:
    return " ".join(b.text for s in sections for b in s.blocks if isinstance(b, Para))


def test_the_head_states_the_mde_from_the_windows_own_control_spread() -> None:
    s1, s3 = [100.0, 103.0, 98.5], [98.0, 100.0, 96.5]  # s3 below s1 in every repeat: a start-to-start spread
    text = _text(power_head(PLAN, {}, _result(s1, s3)))
    pair = ControlPair("in-window", {m: (s1 if m == METRICS[0] else STILL) for m in METRICS},
                       {m: (s3 if m == METRICS[0] else STILL) for m in METRICS})
    _, noise = estimate_win2_noise(PLAN.decision_cells, {c: [pair] for c in PLAN.decision_cells}, source="in-window")
    assert noise is not None
    expected = power_figures(design_of(PLAN), noise, windows=REPORT_WINDOWS, seed=1, search=False,
                             analytic=False)["mde"]
    assert expected is not None
    assert f"This window could detect >= {expected:.1%} with 80% power" in text
    assert "NO_CHANGE" not in text  # the power box does not repeat the verdict
    assert noise.primary[0].start_sd > 0 and f"repeat-to-repeat {noise.primary[0].repeat_sd:.2%}" in text
    assert "One window cannot estimate a correlation (the rate across cells" in text  # assumed conservatively, and said


def test_a_noisier_window_could_detect_less() -> None:
    quiet = in_window_mde(PLAN, {}, _result([100.0, 100.5, 99.8], [100.2, 100.1, 100.0]))
    noisy = in_window_mde(PLAN, {}, _result([100.0, 106.0, 95.0], [101.0, 97.0, 104.0]))
    assert quiet is not None and noisy is not None and quiet["mde"] < noisy["mde"]


def test_noisy_guards_keep_the_mde_up_and_the_report_says_what_the_rate_alone_could_detect() -> None:
    s1, s3 = [100.0, 103.0, 98.5], [101.0, 99.0, 100.5]
    noisy = (s1, s3)  # a guard as noisy as the rate, its correlation with it unknown from one window: assumed 0
    text = _text(power_head(PLAN, {}, _result(s1, s3, guards=noisy)))
    alone = in_window_mde(PLAN, {}, _result(s1, s3, guards=noisy), guards=False)
    full = in_window_mde(PLAN, {}, _result(s1, s3, guards=noisy))
    assert alone is not None and full is not None and alone["mde"] is not None
    assert full["mde"] is None or full["mde"] > alone["mde"]
    assert f"Its rate alone (guards held neutral): this window could detect >= {alone['mde']:.1%}" in text


def test_a_window_without_matched_control_repeats_says_no_mde_is_stated() -> None:
    text = _text(power_head(PLAN, {}, _result([None, None, None], [None, None, None], "INCONCLUSIVE")))  # type: ignore[list-item]
    assert "The window's own control spread cannot be estimated" in text and "INCONCLUSIVE" not in text
    assert not re.search(r"could detect >=", text)


def _pp3_requests(status: str) -> list[dict[str, Any]]:
    pairs = [(f, c) for f in ("opinions", "filings") for c in ("short", "32k", "150k")]
    rate = {"short": 330.0, "32k": 200.0, "150k": 100.0}
    return [{"block": b, "family": f, "context": c, "status": status,
             "delivered_tokens": round(rate[c] * 30.0 * (1 + 0.01 * i if b == "A1" else 1.0)), "decode_s": 30.0}
            for b in ("A1", "B1", "B2", "A2") for i, (f, c) in enumerate(pairs)]


def test_pp3_takes_its_spread_from_blocks_a1_and_a2() -> None:
    requests = [{"block": b, "family": f, "context": c, "status": "ok", "delivered_tokens": 500,
                 "decode_s": 10.0 * (1 + 0.01 * i) if b == "A1" else 10.0}
                for b in ("A1", "B1", "B2", "A2") for i, (f, c) in enumerate(
                    [(f, c) for f in ("opinions", "filings") for c in ("short", "32k", "150k")])]
    figures = in_window_mde(PP3, {"requests": requests}, {"decision": "CANDIDATE"})
    assert figures is not None and figures["spread"]["source"] == "in-window" and figures["spread"]["windows"] == 1
    assert figures["spread"]["repeat_sd"] > 0


def test_the_report_states_an_mde_for_a_window_whose_runs_are_all_bounded() -> None:
    # Seed 003: decode runs are bounded at 30 s; delivered tokens count without a fixed token count.
    data = {"requests": _pp3_requests("bounded")}
    text = _text(power_head(PP3, data, {"decision": "NO_PROMOTION"}))
    figures = in_window_mde(PP3, data, {"decision": "NO_PROMOTION"})
    assert figures is not None and figures["mde"] is not None and figures["spread"]["repeat_sd"] > 0
    assert f"This window could detect >= {figures['mde']:.1%} with 80% power" in text
    assert "cannot be estimated" not in text
    # the contexts' own rates (A1 and A2) weigh the simulated gain, and the design's runs are cut at the bound
    assert figures["base_rates"]["source"] == "in-window" and figures["design"]["bound_s"] == 30.0
    assert figures["base_rates"]["rates"]["short"] > figures["base_rates"]["rates"]["32k"] > \
        figures["base_rates"]["rates"]["150k"]
    assert "Per-context base rates (A1 and A2): short 33" in text


class _Gate:
    type = "gate.result"

    def __init__(self, seq: int, payload: dict[str, Any]) -> None:
        self.seq, self.payload = seq, payload


def test_the_head_also_says_what_the_power_gate_said_before_the_window() -> None:
    gate = _Gate(9, {"window": "w", "plan_sha256": "0" * 64, "gate": "power", "verdict": "PASS",
                     "summary": "PASS: P(WIN) 0.884 at a true +3.50%",
                     "evidence": {"figures": {"mde": 0.0321}}})
    text = _text(power_head(PLAN, {}, _result([100.0, 103.0, 98.5], [101.0, 99.0, 100.5]), [gate]))  # type: ignore[list-item]
    assert "Before the window, its power gate (seq 9) said PASS: P(WIN) 0.884 at a true +3.50%" in text
