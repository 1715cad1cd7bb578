"""Faults during a window: each ends in a recorded, audited state with the right verdict reason."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from runner.audit.full import run_audit
from runner.decide.inputs import replay_window
from runner.execution.window import WindowRunner

from .worlds import close, gate_all, run, state, window, world

WINDOW = "faults"


def _world(tmp_path: Path) -> Any:
    w = world(tmp_path, [window("seed000-controlled.toml", WINDOW, chain="none")])
    gate_all(w)
    return w


def _inject_after(label_prefix: str, inject: Callable[[], None]) -> Callable[[int, int, str], None]:
    done: list[bool] = []

    def on_wave(_count: int, _total: int, label: str) -> None:
        if label.startswith(label_prefix) and not done:
            done.append(True)
            inject()

    return on_wave


def _decided(w: Any) -> dict[str, Any]:
    audit = run_audit(book=w.book)
    assert audit.ok, audit.lines()
    assert replay_window(w.book, WINDOW).match
    s = state(w.book)
    assert s.production == "up" and s.hold is None
    event = next(w.book.events(stream=f"window/{WINDOW}", types=["decision.recorded"]))
    return dict(event.payload["result"])


def test_start_arm_fails(tmp_path: Path) -> None:
    w = _world(tmp_path)
    try:
        w.sim.set_faults(action_fail={"action": "start_arm", "count": 2, "status": 500})
        result = run(w, WINDOW)
        assert result.ending == "restored"
        failed = [e for e in w.book.events(stream=f"window/{WINDOW}", types=["host.action"])
                  if e.payload["action"] == "start_arm" and e.payload["phase"] == "finished"]
        assert [e.payload["ok"] for e in failed] == [False, False]
        ended = next(w.book.events(stream=f"window/{WINDOW}", types=["measurement.ended"]))
        assert ended.payload["reason"] == "failed"
        outcome = _decided(w)
        assert outcome["decision"] == "INCONCLUSIVE"
        assert any("missing data" in r for r in outcome["reasons"])
    finally:
        close(w)


def test_restore_fails_is_retried_then_escalated_then_resumed(tmp_path: Path) -> None:
    w = _world(tmp_path)
    try:
        w.sim.set_faults(action_fail={"action": "restore", "count": 3, "status": 500})
        first = run(w, WINDOW)
        assert first.escalated and first.ending is None
        restores = [e.payload for e in w.book.events(stream=f"window/{WINDOW}", types=["restore.finished"])]
        assert restores[-1]["status"] == "failed" and restores[-1]["attempts"] == 3
        assert restores[-1]["detail"]["escalated"] is True
        assert run_audit(book=w.book).ok  # a live window holding its HOLD is a consistent record
        assert state(w.book).hold is not None
        second = WindowRunner(w.book, w.root, WINDOW, w.driver, time_scale=w.time_scale).run(resume=True)
        assert second.ending == "restored" and second.decision is not None
        _decided(w)
    finally:
        close(w)


def _wave_fault(tmp_path: Path, inject: Callable[[Any], None], after: str = "s2 ") -> tuple[Any, dict[str, Any]]:
    w = _world(tmp_path)
    result = run(w, WINDOW, on_wave=_inject_after(after, lambda: inject(w)))
    assert result.ending == "restored"
    return w, _decided(w)


def test_5xx_burst(tmp_path: Path) -> None:
    w, outcome = _wave_fault(tmp_path, lambda w: w.sim.set_faults(http_5xx={"count": 1, "status": 503}))
    try:
        assert outcome["decision"] == "INCONCLUSIVE"
        assert any("wave not counted" in r and "failed" in r for r in outcome["reasons"]), outcome["reasons"]
    finally:
        close(w)


def test_stall_cut_by_the_request_deadline(tmp_path: Path) -> None:
    w, outcome = _wave_fault(tmp_path, lambda w: w.sim.set_faults(stall={"count": 1, "after_chunks": 3,
                                                                        "seconds": 3.0}))
    try:
        censored = [r for e in w.book.events(stream=f"window/{WINDOW}", types=["wave.measured"])
                    for r in e.payload["requests"] if r["status"] == "censored"]
        assert len(censored) == 1 and censored[0]["delivered_tokens"] > 0  # partial tokens kept
        assert any("censored" in r for r in outcome["reasons"]), outcome["reasons"]
        assert outcome["decision"] == "INCONCLUSIVE"
    finally:
        close(w)


def test_dropped_connection(tmp_path: Path) -> None:
    w, outcome = _wave_fault(tmp_path, lambda w: w.sim.set_faults(drop={"count": 1, "after_chunks": 2}))
    try:
        failed = [r for e in w.book.events(stream=f"window/{WINDOW}", types=["wave.measured"])
                  for r in e.payload["requests"] if r["status"] == "failed"]
        assert len(failed) == 1 and failed[0]["reason"]
        assert outcome["decision"] == "INCONCLUSIVE"
    finally:
        close(w)


def test_metrics_endpoint_down(tmp_path: Path) -> None:
    def down(w: Any) -> None:
        w.sim.set_faults(metrics_down=True)

    w = _world(tmp_path)
    try:
        def on_wave(count: int, _total: int, label: str) -> None:
            if label.startswith("s2 ") and count == 8:
                down(w)
            elif count == 9:
                w.sim.set_faults(metrics_down=False)

        result = run(w, WINDOW, on_wave=on_wave)
        assert result.ending == "restored"
        waves = [e.payload for e in w.book.events(stream=f"window/{WINDOW}", types=["wave.measured"])]
        broken = [p for p in waves if not p["complete"]]
        assert len(broken) == 1 and broken[0]["counters"]["rounds"] is None  # missing, never zero
        outcome = _decided(w)
        assert outcome["decision"] == "INCONCLUSIVE"
        assert any("wave not counted" in r for r in outcome["reasons"])
    finally:
        close(w)


def test_thermal_dial_back(tmp_path: Path) -> None:
    w, outcome = _wave_fault(tmp_path, lambda w: w.sim.control("thermal", cap_mhz=2000), after="s3 ")
    try:
        thermal = list(w.book.events(stream=f"window/{WINDOW}", types=["thermal.event"]))
        assert len(thermal) == 1 and thermal[0].payload["clock_cap_mhz"] == 2000
        assert outcome["decision"] == "INCONCLUSIVE"
        assert any("thermal dial-back inside the HOLD" in r for r in outcome["reasons"])
    finally:
        close(w)
