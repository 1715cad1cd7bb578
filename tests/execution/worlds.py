"""Small simulated worlds for window tests: example plans cut down to run in a second or two."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ledger.store import Ledger
from runner.demo.scenarios import DemoWindow, World, build_world, pass_chain_gate, pass_gates
from runner.execution.window import RunResult, WindowRunner
from runner.gates.admission import admit
from runner.plan.register import register_plan
from runner.state.fold import State
from runner.state.replay import replay

TIME_SCALE = 0.01


def small(text: str, *, max_tokens: int = 48, cells: Sequence[str] = ("short-b1",)) -> str:
    """A seed 000 plan with one prompt per family and context, short outputs, only ``cells``."""
    text = re.sub(r"max_tokens = \d+", f"max_tokens = {max_tokens}", text)
    text = re.sub(r'orders = \{ short = \["(\w+-short-\d+)"[^]]*\], 32k = \["(\w+-32k-\d+)"[^]]*\] \}',
                  r'orders = { short = ["\1"], 32k = ["\2"] }', text)

    def keep(match: re.Match[str]) -> str:
        return match.group(0) if any(f'name = "{c}"' in match.group(0) for c in cells) else ""

    return re.sub(r"\[\[cells\]\]\n(?:(?!\[).*\n)*", keep, text)


def arms(text: str, **per_role: str) -> str:
    """Replace an arm's ``sim = {...}`` table: ``arms(text, B="{ draft_depth = 5, ... }")``."""
    for role, table in per_role.items():
        text = re.sub(rf'(role = "{role}"\n(?:.*\n)*?sim = )\{{[^}}]*\}}', lambda m, t=table: m.group(1) + t, text,
                      count=1)
    return text


def window(plan_file: str, window_id: str, *, edit: Callable[[str], str] | None = small,
           **overrides: Any) -> DemoWindow:
    return DemoWindow(plan_file, window_id, overrides, edit)


def world(directory: Path, windows: Sequence[DemoWindow], **kwargs: Any) -> World:
    return build_world(directory, windows, time_scale=kwargs.pop("time_scale", TIME_SCALE), **kwargs)


def gate_all(w: World) -> None:
    """Register every plan and pass its gates (as the demo does)."""
    for item in w.plans:
        reg = register_plan(w.book, w.root, item)
        pass_gates(w.book, w.root, reg.window, repo=w.repo, qualified=w.qualified, admission=w.admission,
                   rng=w.rng, sim_url=w.sim.url, out=w.directory, say=lambda _t: None)


def run(w: World, window_id: str, **kwargs: Any) -> RunResult:
    pass_chain_gate(w.book, w.root, window_id, lambda _t: None)
    state = replay(w.book)
    if state.windows[window_id].admitted_seq is None:
        admit(w.book, w.root, window_id)
    driver = kwargs.pop("driver", None) or w.driver   # another site on the same world (a command site)
    runner = WindowRunner(w.book, w.root, window_id, driver, time_scale=w.time_scale, **kwargs)
    return runner.run()


def state(book: Ledger) -> State:
    return replay(book)


def close(w: World) -> None:
    w.driver.close()
    w.sim.stop()
    w.book.close()


STATEHOST_SIM = {"dev_mode": False}
"""The simulator behind examples/site-commands.toml (statehost.sh): the pretend hosts never switch its engine,
so it serves production's arm throughout; without /server_info (a production vLLM) it reports no speculative
config for a start's attestation to hold against the arm (``params.attested`` compares what is reported)."""
