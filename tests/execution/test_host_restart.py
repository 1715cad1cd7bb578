"""A host that restarts under a window: every wave is attributed to its engine, and the window closes.

The runner is SIGKILLed mid-measurement, the simulated host reboots (it comes back serving
production, no arm running, its own snapshot record gone), and `tally window resume`
runs. No wave served by anything but its start's engine is recorded complete, the start
whose engine vanished ends as lost, production is restored from the snapshot the ledger
recorded before the drain, and the window closes in one go (a second resume appends
nothing).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx

from ledger.stored import verify_ledger
from runner.audit.full import run_audit

from .worlds import close, gate_all, state, window, world

TALLY = str(Path(sys.executable).with_name("tally"))


def _tally(w: Any, *args: str, crash: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, TALLY_DB=str(w.directory / "tally.db"), TALLY_KEY=str(w.directory / ".tally/root.pem"))
    env.pop("TALLY_TEST_CRASH_AFTER", None)
    if crash:
        env["TALLY_TEST_CRASH_AFTER"] = crash
    return subprocess.run([TALLY, *args, "--site", str(w.directory / "site.toml"), "--json"], env=env,
                          capture_output=True, text=True, timeout=300)


def _reboot(w: Any) -> None:
    response = httpx.post(f"{w.sim.url}/_sim/reboot", json={}, timeout=10)
    assert response.status_code == 200, response.text


def test_resume_after_host_restart_attributes_waves_to_their_engine(tmp_path: Path) -> None:
    w = world(tmp_path, [window("seed000-production-policy.toml", "reboot-w", chain="none")])
    try:
        gate_all(w)
        killed = _tally(w, "window", "run", "reboot-w", "--execute", crash="wave.measured:2")
        assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
        _reboot(w)
        resumed = _tally(w, "window", "resume", "reboot-w")
        assert resumed.returncode in (0, 1), resumed.stderr[-2000:]
        size = w.book.size()
        again = _tally(w, "window", "resume", "reboot-w")
        assert w.book.size() == size, again.stdout  # closed in one go: nothing left to append

        events = list(w.book.events(stream="window/reboot-w"))
        plan = w.plans[0].plan
        waves = [e.payload for e in events if e.type == "wave.measured"]
        assert len(waves) == 2  # measured before the crash; none after the reboot
        for wave in waves:
            expected = plan.arm(plan.start(wave["start"]).role).name
            assert wave["complete"] and wave["engine"]["before"]["arm"] == expected
            assert wave["engine"]["after"]["arm"] == expected and wave["engine"]["after"]["ok"]
        ended = [e.payload for e in events if e.type == "start.ended"]
        assert [(e["start"], e["ok"], e["truncated"]) for e in ended] == [("s1", False, True)]
        restores = [e.payload for e in events if e.type == "restore.finished"]
        assert restores and restores[-1]["status"] == "ok"
        s = state(w.book)
        ws = s.windows["reboot-w"]
        assert ws.ending == "restored" and ws.decision is not None and s.hold is None and s.production == "up"
        assert verify_ledger(w.book).verified.size == w.book.size()
        audit = run_audit(book=w.book)
        assert audit.ok, audit.lines()
    finally:
        close(w)


def test_a_wave_served_by_another_engine_is_not_complete(tmp_path: Path) -> None:
    """The host reboots between the attestation before a wave and the one after it."""
    from runner.execution.window import WindowRunner

    from .worlds import run

    w = world(tmp_path, [window("seed000-production-policy.toml", "swap-w", chain="none")])
    try:
        gate_all(w)
        original = WindowRunner.attest
        calls = {"n": 0}

        def attest(self: WindowRunner, start_id: str) -> dict[str, Any]:
            calls["n"] += 1
            # after the second wave (its opening attestation is the first wave's closing one):
            # the engine changed under it
            if calls["n"] == 3:
                _reboot(w)
            return original(self, start_id)

        WindowRunner.attest = attest  # type: ignore[method-assign]
        try:
            result = run(w, "swap-w")
        finally:
            WindowRunner.attest = original  # type: ignore[method-assign]
        assert result.ending == "restored"
        waves = [e.payload for e in w.book.events(stream="window/swap-w", types=["wave.measured"])]
        assert [x["complete"] for x in waves] == [True, False]
        assert any("not served by the start's engine after the wave" in r for r in waves[1]["incomplete_reasons"])
        assert result.decision == "INCONCLUSIVE"
    finally:
        close(w)


def test_a_wave_opens_on_the_previous_waves_closing_attestation(tmp_path: Path) -> None:
    """Inside a start, with nothing appended between two waves, the engine is probed once per wave
    (its close) plus once at the start's first wave; every wave still records both attestations."""
    from runner.execution.window import WindowRunner

    from .worlds import run

    w = world(tmp_path, [window("seed000-production-policy.toml", "reuse-w", chain="none")])
    try:
        gate_all(w)
        original = WindowRunner.attest
        calls = {"n": 0}

        def attest(self: WindowRunner, start_id: str) -> dict[str, Any]:
            calls["n"] += 1
            return original(self, start_id)

        WindowRunner.attest = attest  # type: ignore[method-assign]
        try:
            result = run(w, "reuse-w")
        finally:
            WindowRunner.attest = original  # type: ignore[method-assign]
        assert result.ending == "restored"
        waves = [e.payload for e in w.book.events(stream="window/reuse-w", types=["wave.measured"])]
        starts = {x["start"] for x in waves}
        smoked = {e.payload["start"] for e in w.book.events(stream="window/reuse-w", types=["smoke.result"])}
        # one per wave, one per start's first wave, and the smoke stage's own before and after
        assert len(waves) > len(starts) and calls["n"] == len(waves) + len(starts) + 2 * len(smoked)
        for prev, nxt in pairwise(waves):
            if prev["start"] == nxt["start"]:
                assert nxt["engine"]["before"] == prev["engine"]["after"]
        assert all(x["complete"] and x["engine"]["before"]["ok"] and x["engine"]["after"]["ok"] for x in waves)
    finally:
        close(w)
