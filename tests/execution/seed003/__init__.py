"""Seed 003 run as written: its plan (``seed003-faithful.toml``) and exact-size families, on the simulator."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runner.demo.scenarios import World

from ..worlds import arms, window, world

HERE = Path(__file__).resolve().parent
PLAN = HERE / "seed003-faithful.toml"
WINDOW = "pp3-faithful"
TIME_SCALE = 0.01
A_SIM = ("{ draft_depth = 5, accept_per_pos = [0.50, 0.30, 0.20, 0.10, 0.05], step_base_ms = 1000.0, "
         "step_per_token_ms = 5.0, ttft_base_ms = 1000.0, ttft_per_1k_prompt_ms = 4000.0 }")


def faithful_world(directory: Path, *, edit: Callable[[str], str] | None = None,
                   sim_config: dict[str, Any] | None = None, time_scale: float = TIME_SCALE) -> World:
    """A world running the seed-faithful plan (``edit`` changes its text first); EOS off, so runs reach their bound."""
    copy_families(directory)
    config = {"eos_probability": 0.0, **(sim_config or {})}
    return world(directory, [window(str(PLAN), WINDOW, edit=edit)], time_scale=time_scale, sim_config=config)


def copy_families(directory: Path) -> None:
    """The plan's families where a world's plans go (so the examples' families are not copied in)."""
    families = directory / "plans" / "families"
    families.mkdir(parents=True, exist_ok=True)
    for name in ("opinions.jsonl", "filings.jsonl"):
        shutil.copy(HERE / "families" / name, families / name)


def equal_arms(text: str) -> str:
    """Arm B simulated exactly as arm A."""
    return arms(text, B=A_SIM)
