"""Simulator arms set for a known winner, a known loser and a tie give WIN, LOSS and NO_CHANGE/INCONCLUSIVE."""

from __future__ import annotations

from pathlib import Path

import pytest

from .worlds import arms, close, gate_all, run, small, window, world

A = "{ draft_depth = 5, accept_per_pos = [0.80, 0.70, 0.60, 0.50, 0.40], step_base_ms = 9.0, step_per_token_ms = 0.12, ttft_base_ms = 60.0, ttft_per_1k_prompt_ms = 9.0 }"
BETTER = "{ draft_depth = 5, accept_per_pos = [0.95, 0.90, 0.85, 0.80, 0.75], step_base_ms = 9.0, step_per_token_ms = 0.12, ttft_base_ms = 60.0, ttft_per_1k_prompt_ms = 9.0 }"
WORSE = "{ draft_depth = 5, accept_per_pos = [0.55, 0.40, 0.30, 0.20, 0.10], step_base_ms = 9.0, step_per_token_ms = 0.12, ttft_base_ms = 60.0, ttft_per_1k_prompt_ms = 9.0 }"


@pytest.mark.parametrize(("candidate", "expected"), [
    (BETTER, {"WIN"}),
    (WORSE, {"LOSS"}),
    (A, {"NO_CHANGE", "INCONCLUSIVE"}),
])
def test_known_outcome(tmp_path: Path, candidate: str, expected: set[str]) -> None:
    """Equal arms: the same draws on every arm (common random numbers), so the starts differ only
    by their engine-session speed, which the simulator's seed fixes (seed 2: s1 0.991, s2 1.003,
    s3 1.012 with start_jitter 0.01): s2 sits between its controls, so no guard fires and the
    primary moves by -0.2%, inside the 2% bar. The time scale is long enough for the client's
    own timing noise to stay well under those differences."""
    def edit(text: str) -> str:
        return arms(small(text, max_tokens=256), A=A, B=candidate)

    w = world(tmp_path, [window("seed000-controlled.toml", "outcome", edit=edit, chain="none")],
              sim_config={"seed": 2, "start_jitter": 0.01}, time_scale=0.05)
    try:
        gate_all(w)
        result = run(w, "outcome")
        assert result.decision in expected, result.reasons
        decision = next(w.book.events(stream="window/outcome", types=["decision.recorded"]))
        primary = decision.payload["result"]["cells"]["short-b1"]["metrics"]["pooled_rate_tps"]
        if "WIN" in expected:
            assert primary["point"] > 0.02 and primary["low"] > 0
        elif "LOSS" in expected:
            assert primary["point"] < -0.02 and primary["high"] < 0
        else:
            assert abs(primary["point"]) < 0.02
    finally:
        close(w)
