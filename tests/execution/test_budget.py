"""The budget clock: blocks that overrun are truncated (censored partials kept); the restore still fits."""

from __future__ import annotations

import re
from pathlib import Path

from runner.audit.full import run_audit
from runner.execution.clock import parse_time

from ..runner.script import SIMPLE_PP3
from .worlds import arms, close, gate_all, run, state, window, world

SLOW = "{ draft_depth = 5, accept_per_pos = [0.80, 0.62, 0.47, 0.35, 0.25], step_base_ms = 900.0, step_per_token_ms = 0.12, ttft_base_ms = 60.0, ttft_per_1k_prompt_ms = 9.0 }"


def overrunning(text: str) -> str:
    """Seed 003's ABBA window with 1.5-minute blocks, a 2-minute block limit, stop admitting at 7."""
    text = text.replace("per_block_limit_min = 11.0", "per_block_limit_min = 2.0")
    text = text.replace("stop_admitting_min = 50.0", "stop_admitting_min = 7.0")
    text = re.sub(r"minutes = 11\.0", "minutes = 1.5", text)
    return arms(text, A=SLOW, B=SLOW)


def test_blocks_overrun_truncated_and_restore_fits(tmp_path: Path) -> None:
    w = world(tmp_path, [window(str(SIMPLE_PP3), "overrun", edit=overrunning)], time_scale=0.01)
    try:
        gate_all(w)
        result = run(w, "overrun")
        assert result.ending == "restored" and result.decision == "NO_PROMOTION"
        events = list(w.book.events(stream="window/overrun"))
        budget = [e.payload for e in events if e.type == "budget.decision"]
        assert any(b["action"] == "truncate_block" for b in budget), budget
        assert any(b["action"] == "stop_admitting" for b in budget), budget
        ended = [e.payload for e in events if e.type == "start.ended"]
        assert any(p["truncated"] for p in ended)
        censored = [r for e in events if e.type == "wave.measured" for r in e.payload["requests"]
                    if r["status"] == "censored"]
        assert censored and all(r["delivered_tokens"] > 0 for r in censored)  # partials kept
        measurement = next(e.payload for e in events if e.type == "measurement.ended")
        assert measurement["reason"] in ("stop_admitting", "complete")
        first = next(e for e in events if e.type == "host.action")
        closed = next(e for e in events if e.type == "window.closed")
        minutes = (parse_time(closed.time) - parse_time(first.time)).total_seconds() / 60 / w.time_scale
        assert minutes < 75.0, minutes  # inside the hard ceiling, restore included
        decision = next(e.payload for e in events if e.type == "decision.recorded")
        assert any("censored" in r or "cancelled" in r for r in decision["result"]["reasons"])
        assert run_audit(book=w.book).ok
        assert state(w.book).production == "up"
    finally:
        close(w)
