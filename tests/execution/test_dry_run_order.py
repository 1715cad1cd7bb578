"""The dry run is the step machine's: its host actions are the executed window's, in the same order."""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args

import pytest

from runner.execution.dryfold import SUCCESS
from runner.execution.dryrun import dry_run_report
from runner.execution.steps import StepKind
from runner.execution.window import LOOP_KINDS

from ..runner.script import SIMPLE_PP3
from .worlds import TIME_SCALE, close, gate_all, run, window, world


def _dry(w: Any, window_id: str) -> list[tuple[str, str, str | None]]:
    size = w.book.size()
    report = dry_run_report(w.book, window_id, w.driver, TIME_SCALE)
    assert w.book.size() == size  # appended nothing
    assert report["stops"] is None and report["refusals"] == []
    assert report["actions"][-1].startswith("decide")
    return [(a["action"], a["host"], a["start"]) for a in report["host_actions"]]


def _executed(w: Any, window_id: str) -> list[tuple[str, str, str | None]]:
    return [(e.payload["action"], e.payload["host"], (e.payload.get("detail") or {}).get("start"))
            for e in w.book.events(stream=f"window/{window_id}", types=["host.action"])
            if e.payload["phase"] == "started"]


def _shorter(text: str) -> str:
    return text.replace("max_tokens = 1024", "max_tokens = 48")


@pytest.mark.parametrize(("plan", "window_id", "edit"), [
    ("seed000-production-policy.toml", "order-win2", None),
    pytest.param(str(SIMPLE_PP3), "order-pp3", _shorter, id="seed003-abba-simple"),
])
def test_dry_run_order_equals_executed_order(tmp_path: Path, plan: str, window_id: str, edit: Any) -> None:
    w = world(tmp_path, [window(plan, window_id, chain="none", **({"edit": edit} if edit else {}))])
    try:
        gate_all(w)
        planned = _dry(w, window_id)
        actions = [a for a, _, _ in planned]
        assert actions.index("snapshot") < actions.index("drain")  # the exact snapshot first, while production serves
        result = run(w, window_id)
        assert result.ending == "restored" and result.decision is not None
        assert _executed(w, window_id) == planned
        after = dry_run_report(w.book, window_id, w.driver, TIME_SCALE)  # a decided window has nothing left to do
        assert after["steps"] == [] and after["actions"] == ["nothing: the window is decided"]
    finally:
        close(w)


def test_dry_run_order_equals_executed_order_in_a_chain(tmp_path: Path) -> None:
    w = world(tmp_path, [
        window("seed000-production-policy.toml", "order-chain-a", chain="chained"),
        window("seed000-controlled.toml", "order-chain-b", chain="chained"),
        window("seed000-controlled.toml", "order-chain-c", chain="last"),
    ])
    try:
        gate_all(w)
        for window_id, ending in (("order-chain-a", "chained"), ("order-chain-b", "chained"),
                                  ("order-chain-c", "restored")):
            planned = _dry(w, window_id)  # under the previous window's marker: prev-ok not yet run
            assert run(w, window_id).ending == ending
            assert _executed(w, window_id) == planned, window_id
    finally:
        close(w)


def test_every_step_kind_has_a_dry_run_effect() -> None:
    assert set(get_args(StepKind)) - LOOP_KINDS == set(SUCCESS)


def test_dry_run_order_equals_executed_order_with_priming(tmp_path: Path) -> None:
    """Seed 003 as written (bounded runs, prefix priming): the priming step sends measurement traffic,
    no host action, so the dry run's host actions still equal the executed ones."""
    from .seed003 import WINDOW, faithful_world

    w = faithful_world(tmp_path, edit=lambda t: t.replace("decode_bound_s = 30.0", "decode_bound_s = 3.0"))
    try:
        gate_all(w)
        report = dry_run_report(w.book, WINDOW, w.driver, TIME_SCALE)
        assert [s["step"] for s in report["steps"]].count("prime") == 4  # one per block
        planned = _dry(w, WINDOW)
        assert run(w, WINDOW).ending == "restored"
        assert _executed(w, WINDOW) == planned
    finally:
        close(w)
