"""pp3-v1 takes clock caps and thermal dial-backs into account as win2-v1 does (input builder 3)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runner.decide.inputs import build_input, replay_window
from runner.plan.register import registered_plan

from ..worlds import close, gate_all, run
from . import WINDOW, faithful_world


def _short_runs(text: str) -> str:
    return text.replace("decode_bound_s = 30.0", "decode_bound_s = 6.0")


def _b_at_2150(text: str) -> str:
    marker = 'ttft_base_ms = 700.0, ttft_per_1k_prompt_ms = 2800.0 }'
    assert marker in text
    return _short_runs(text).replace(marker, marker[:-2] + ", clock_cap_mhz = 2150 }")


def _decision(w: Any) -> dict[str, Any]:
    return next(e.payload for e in w.book.events(stream=f"window/{WINDOW}", types=["decision.recorded"]))


def test_blocks_at_different_clock_caps_are_not_candidate(tmp_path: Path) -> None:
    w = faithful_world(tmp_path, edit=_b_at_2150)
    try:
        gate_all(w)
        run(w, WINDOW)
        decision = _decision(w)
        reasons = decision["result"]["reasons"]
        assert decision["result"]["decision"] == "NO_PROMOTION"
        assert "blocks ran at different clock caps: A1 2300 MHz, B1 2150 MHz, B2 2150 MHz, A2 2300 MHz" in reasons
        assert "B1 ran at 2150 MHz, B2 ran at 2150 MHz; production's configured clock cap is 2300 MHz" in reasons
        assert replay_window(w.book, WINDOW).match
    finally:
        close(w)


def test_a_dial_back_inside_the_hold_is_not_candidate(tmp_path: Path) -> None:
    w = faithful_world(tmp_path, edit=_short_runs)
    try:
        gate_all(w)
        dialled: list[str] = []

        def on_wave(_count: int, _total: int, label: str) -> None:
            if label.startswith("B1 ") and not dialled:
                dialled.append(label)
                w.sim.control("thermal", cap_mhz=2000)

        run(w, WINDOW, on_wave=on_wave)
        decision = _decision(w)
        assert decision["result"]["decision"] == "NO_PROMOTION"
        assert any(r.startswith("thermal dial-back inside the HOLD") for r in decision["result"]["reasons"])
        assert decision["input"]["clocks"]["thermal_dialbacks_in_hold"] >= 1
        assert replay_window(w.book, WINDOW).match
        # a decision recorded by input builder 2 rebuilds as it was: no clocks in its input
        events = list(w.book.events(stream=f"window/{WINDOW}"))
        old = build_input(registered_plan(w.book, WINDOW).plan, events, builder=2).input
        assert "clocks" not in old and old["requests"] == decision["input"]["requests"]
    finally:
        close(w)
