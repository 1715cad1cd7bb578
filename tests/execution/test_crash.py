"""Crash safety: the runner is SIGKILLed right after each of 21 event types (and mid-action); resume makes all well.

For each kill point the window runs in a real `tally window run --execute` process with
TALLY_TEST_CRASH_AFTER set, dies by SIGKILL right after appending that event, and
`tally window resume` (a new process) finishes it. Afterwards production is up (or the
chain consistent), the ledger verifies, every invariant holds, no event is duplicated
and every planned wave is recorded exactly once with all its requests.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ledger.stored import verify_ledger
from runner.audit.full import run_audit

from .worlds import close, gate_all, run, state, window, world

TALLY = str(Path(sys.executable).with_name("tally"))

FIRST_WINDOW_POINTS = [  # crash points in a window that ends with a chained close
    "host.action:1", "host.action:6",
    "host.action:11",  # warm-up started, never finished: the start's engine is re-probed and kept
    "production.state", "hold.opened", "production.snapshot", "start.began",
    "gate.result", "warmup.done", "wave.measured:3", "start.ended", "archive.control_start",
    "measurement.ended", "placeholder.up", "hold.closed", "chain.marker.set", "window.closed",
    "decision.recorded",
]
CLOSING_EVENTS = ("hold.closed", "chain.marker.set", "window.closed", "decision.recorded")
LAST_WINDOW_POINTS = [  # crash points in the chain's last window (restore, marker cleared)
    "restore.finished", "watch.result", "placeholder.down", "chain.marker.cleared",
]


def _tally(w: Any, *args: str, crash: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, TALLY_DB=str(w.directory / "tally.db"), TALLY_KEY=str(w.directory / ".tally/root.pem"))
    env.pop("TALLY_TEST_CRASH_AFTER", None)
    if crash:
        env["TALLY_TEST_CRASH_AFTER"] = crash
    return subprocess.run([TALLY, *args, "--site", str(w.directory / "site.toml"), "--json"], env=env,
                          capture_output=True, text=True, timeout=300)


def _crash_and_resume(w: Any, window_id: str, point: str, *, resume_crash: str | None = None) -> None:
    killed = _tally(w, "window", "run", window_id, "--execute", crash=point)
    assert killed.returncode == -signal.SIGKILL, (point, killed.returncode, killed.stderr[-2000:])
    if resume_crash is not None:  # the resume itself is killed too
        again = _tally(w, "window", "resume", window_id, crash=resume_crash)
        assert again.returncode == -signal.SIGKILL, (resume_crash, again.returncode, again.stderr[-2000:])
    resumed = _tally(w, "window", "resume", window_id)
    assert resumed.returncode == 0, (point, resumed.stderr[-2000:])


def _check_window(w: Any, window_id: str, ending: str, point: str) -> None:
    events = list(w.book.events(stream=f"window/{window_id}"))
    kinds = Counter(e.type for e in events)
    assert kinds["window.closed"] == 1 and kinds["decision.recorded"] == 1 and kinds["hold.opened"] == 1
    # The closing events commit together with window.closed: a crash after any of them finds
    # the window closed, with only its decision left to record; earlier crashes are recorded.
    if point not in CLOSING_EVENTS:
        assert kinds["window.interrupted"] >= 1
    waves = Counter((e.payload["start"], e.payload["cell"], e.payload["wave"]) for e in events
                    if e.type == "wave.measured")
    plan = w.plans[0].plan if w.plans[0].plan.window_id == window_id else w.plans[1].plan
    assert set(waves) == {(x.start, x.cell, x.wave) for x in plan.waves}
    assert set(waves.values()) == {1}  # nothing measured twice, nothing lost
    for event in events:
        if event.type == "wave.measured":
            assert event.payload["client"]["requests"] == 1 and event.payload["complete"]
    started = {e.payload["action_id"] for e in events if e.type == "host.action" and e.payload["phase"] == "started"}
    settled = {e.payload["action_id"] for e in events if e.type == "host.action" and e.payload["phase"] == "finished"}
    settled |= {e.payload.get("probe_of") for e in events if e.type == "host.action" and e.payload.get("probe_of")}
    assert started <= settled  # every unknown outcome was re-probed
    if point == "host.action:11":
        probes = [e for e in events if e.type == "host.action" and e.payload.get("probe_of")]
        assert probes and not any(e.type == "start.ended" and not e.payload["ok"] for e in events)
    assert state(w.book).windows[window_id].ending == ending
    assert verify_ledger(w.book).verified.size == w.book.size()
    audit = run_audit(book=w.book)
    assert audit.ok, audit.lines()


def _chain_world(tmp_path: Path) -> Any:
    w = world(tmp_path, [window("seed000-controlled.toml", "crash-a", chain="chained"),
                         window("seed000-controlled.toml", "crash-b", chain="last")])
    gate_all(w)
    return w


@pytest.mark.parametrize("point", FIRST_WINDOW_POINTS)
def test_killed_in_a_chained_window(tmp_path: Path, point: str) -> None:
    w = _chain_world(tmp_path)
    try:
        _crash_and_resume(w, "crash-a", point)
        _check_window(w, "crash-a", "chained", point)
        s = state(w.book)
        assert s.marker is not None and s.marker.window == "crash-a" and s.production == "down"
        assert set(s.placeholders) == {"sim-head", "sim-worker"} and s.hold is None
    finally:
        close(w)


@pytest.mark.parametrize("point", [*LAST_WINDOW_POINTS, "window.interrupted"])
def test_killed_in_the_chains_last_window(tmp_path: Path, point: str) -> None:
    w = _chain_world(tmp_path)
    try:
        assert run(w, "crash-a").ending == "chained"
        from runner.demo.scenarios import pass_chain_gate

        pass_chain_gate(w.book, w.root, "crash-b", lambda _t: None)
        if point == "window.interrupted":  # the resume is killed right after it records the crash
            _crash_and_resume(w, "crash-b", "wave.measured:2", resume_crash="window.interrupted")
            assert Counter(e.type for e in w.book.events(stream="window/crash-b"))["window.interrupted"] == 2
        else:
            _crash_and_resume(w, "crash-b", point)
        _check_window(w, "crash-b", "restored", point)
        s = state(w.book)
        assert s.marker is None and s.production == "up" and not s.placeholders and s.hold is None
    finally:
        close(w)
