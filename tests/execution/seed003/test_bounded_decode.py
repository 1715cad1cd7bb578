"""Bounded decode runs (seed 003): a run cut by the plan's decode bound is an observation, not a loss."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runner.audit.full import run_audit
from runner.decide.inputs import replay_window

from ..worlds import close, gate_all, run
from . import TIME_SCALE, WINDOW, equal_arms, faithful_world


def _events(w: Any, kind: str) -> list[dict[str, Any]]:
    return [e.payload for e in w.book.events(stream=f"window/{WINDOW}", types=[kind])]


def test_a_truly_faster_candidate_with_bounded_runs_reaches_candidate(tmp_path: Path) -> None:
    w = faithful_world(tmp_path)
    try:
        gate_all(w)
        result = run(w, WINDOW)
        assert result.ending == "restored"
        requests = [r for p in _events(w, "wave.measured") for r in p["requests"]]
        assert len(requests) == 24 and all(r["status"] == "bounded" for r in requests), \
            [(r["status"], r["reason"]) for r in requests]
        bound = 30.0 * TIME_SCALE
        for r in requests:  # cut at the bound counted from the first token: decode time is the bound
            assert bound * 0.9 <= r["decode_s"] <= bound * 1.25, r
            assert r["delivered_tokens"] > 20 and r["ttft_s"] is not None
        client = [p["client"] for p in _events(w, "wave.measured")]
        assert all(c["bounded"] == c["requests"] == 1 and c["censored"] == 0 for c in client)
        decision = _events(w, "decision.recorded")[0]
        outcome = decision["result"]
        assert outcome["decision"] == "CANDIDATE", outcome["reasons"]
        assert outcome["point_gain"] > 0.5 and outcome["lower_bound"] > 0
        assert decision["input_builder"] == 5
        assert decision["input"]["clocks"]["blocks"] == {"A1": 2300, "B1": 2300, "B2": 2300, "A2": 2300}
        assert replay_window(w.book, WINDOW).match
        assert run_audit(book=w.book).ok
    finally:
        close(w)


def test_equal_arms_with_bounded_runs_are_no_promotion(tmp_path: Path) -> None:
    w = faithful_world(tmp_path, edit=equal_arms)
    try:
        gate_all(w)
        result = run(w, WINDOW)
        assert result.ending == "restored"
        outcome = _events(w, "decision.recorded")[0]["result"]
        assert outcome["decision"] == "NO_PROMOTION", outcome["reasons"]
        assert abs(outcome["point_gain"]) < 0.05, outcome["point_gain"]
        assert not any("not computable" in r or "not ok" in r for r in outcome["reasons"]), outcome["reasons"]
        assert any(r.startswith("point gain") and "<" in r for r in outcome["reasons"]), outcome["reasons"]
    finally:
        close(w)
