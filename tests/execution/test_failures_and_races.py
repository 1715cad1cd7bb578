"""Stops before the HOLD, host actions that keep failing, two windows
racing for the HOLD, errors mid-window, placeholders after an aborted chained close, partial bundles."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from ledger.bundle import export_bundle
from ledger.errors import ExternalError, PolicyError
from runner.audit.full import run_audit
from runner.drivers.sim import SimDriver
from runner.events.catalogue import bundle_companions
from runner.execution.window import WindowRunner

from .worlds import close, gate_all, run, state, window, world


def _runner(w: Any, window_id: str) -> WindowRunner:
    return WindowRunner(w.book, w.root, window_id, w.driver, time_scale=w.time_scale)


def _ok(w: Any) -> None:
    audit = run_audit(book=w.book)
    assert audit.ok, audit.lines()


@pytest.mark.parametrize("chain", ["none", "chained"])
def test_interrupted_before_the_hold_aborts_without_touching_production(tmp_path: Path, chain: str) -> None:
    w = world(tmp_path, [window("seed000-controlled.toml", "early", chain=chain)])
    try:
        gate_all(w)
        runner = _runner(w, "early")
        runner.signal_name = "SIGINT"  # as if Ctrl-C arrived before the first step
        result = runner.run()
        assert result.ending == "aborted" and result.decision == "REJECT"
        types = [e.type for e in w.book.events(stream="window/early")]
        assert "hold.opened" not in types and "placeholder.up" not in types and "restore.finished" not in types
        assert "ended before it held the hosts" in " ".join(result.reasons)
        assert state(w.book).production != "down" and state(w.book).marker is None
        assert w.driver.run("probe", None, {"window": "early"}).facts["serving"] == "up"
        _ok(w)
    finally:
        close(w)


def test_drain_fails_then_production_is_restored(tmp_path: Path) -> None:
    w = world(tmp_path, [window("seed000-controlled.toml", "no-drain", chain="chained")])
    try:
        gate_all(w)
        w.sim.set_faults(action_fail={"action": "drain", "count": 1, "status": 500})
        result = _runner(w, "no-drain").run()
        assert result.ending == "aborted" and result.decision == "REJECT"  # never chained without a HOLD
        events = [e for e in w.book.events(stream="window/no-drain")]
        assert [e.type for e in events].count("restore.finished") == 1  # the snapshot came first
        assert state(w.book).production == "up" and state(w.book).marker is None
        _ok(w)
    finally:
        close(w)


@pytest.mark.parametrize("action", ["warmup", "read_clock_cap", "snapshot"])
def test_a_host_action_that_keeps_failing_ends_the_window(tmp_path: Path, action: str) -> None:
    w = world(tmp_path, [window("seed000-controlled.toml", "flaky", chain="none")])
    try:
        gate_all(w)
        w.sim.set_faults(action_fail={"action": action, "count": 50, "status": 500})
        result = _runner(w, "flaky").run()
        w.sim.set_faults(clear=True)
        failures = [e for e in w.book.events(stream="window/flaky", types=["host.action"])
                    if e.payload["action"] == action and e.payload["phase"] == "finished" and not e.payload["ok"]]
        assert 1 <= len(failures) <= 3
        assert result.ending in ("restored", "aborted") and result.decision in ("INCONCLUSIVE", "REJECT")
        assert state(w.book).production != "down"
        assert w.driver.run("probe", None, {"window": "flaky"}).facts["serving"] == "up"
        _ok(w)
    finally:
        close(w)


def test_two_windows_race_for_the_hold(tmp_path: Path) -> None:
    w = world(tmp_path, [window("seed000-controlled.toml", "race-a", chain="none"),
                         window("seed000-controlled.toml", "race-b", chain="none")])
    results: dict[str, Any] = {}
    together = threading.Barrier(2)   # both runners built before either runs: on a loaded machine the
    try:                               # first could otherwise end its window before the second began
        gate_all(w)

        def go(window_id: str) -> None:
            driver = SimDriver.for_handle(w.sim)
            try:
                runner = WindowRunner(w.book, w.root, window_id, driver, time_scale=w.time_scale)
                together.wait(timeout=120)
                results[window_id] = runner.run()
            except PolicyError as error:
                results[window_id] = error
            finally:
                driver.close()

        threads = [threading.Thread(target=go, args=(wid,)) for wid in ("race-a", "race-b")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
        holds = [e.payload["owner"] for e in w.book.events(types=["hold.opened"])]
        assert len(holds) == 1  # exactly one window ever held the hosts
        finished = [r for r in results.values() if not isinstance(r, Exception) and r.ending == "restored"]
        waiting = [r for r in results.values() if isinstance(r, Exception) or r.blocked]
        assert len(finished) == 1 and len(waiting) == 1
        _ok(w)
    finally:
        close(w)


def test_an_error_mid_window_is_recorded_and_the_window_restored(tmp_path: Path) -> None:
    w = world(tmp_path, [window("seed000-controlled.toml", "erring", chain="none")])
    try:
        gate_all(w)
        runner = _runner(w, "erring")
        calls = {"n": 0}
        real = runner._model_name

        def flaky_model() -> str:
            calls["n"] += 1
            if calls["n"] == 1:
                raise ExternalError("http://sim/v1/models answered 503")
            return real()

        runner._model_name = flaky_model  # type: ignore[method-assign]
        result = runner.run()
        interrupted = [e.payload for e in w.book.events(stream="window/erring", types=["window.interrupted"])]
        assert interrupted and interrupted[0]["reason"] == "error" and "503" in interrupted[0]["detail"]["error"]
        assert result.ending == "restored" and result.decision == "INCONCLUSIVE"
        assert state(w.book).production == "up"
        _ok(w)
    finally:
        close(w)


def test_placeholders_come_down_after_an_aborted_chained_close(tmp_path: Path) -> None:
    w = world(tmp_path, [window("seed000-controlled.toml", "half-chained", chain="chained")])
    try:
        gate_all(w)
        w.sim.set_faults(action_fail={"action": "fence", "count": 3, "status": 500})
        first = _runner(w, "half-chained").run()
        assert first.blocked and "fence failed" in first.blocked
        assert set(state(w.book).placeholders) == {"sim-head", "sim-worker"}
        aborted = _runner(w, "half-chained").run(abort=True)
        assert aborted.ending == "aborted" and aborted.decision == "REJECT"
        assert first.exit_code() == 1 and aborted.exit_code(abort=True) == 0 and aborted.exit_code() == 1
        assert any(c.startswith("`tally window abort` at ") for c in aborted.causes), aborted.causes
        s = state(w.book)
        assert s.production == "up" and not s.placeholders and s.marker is None and s.hold is None
        _ok(w)
    finally:
        close(w)


def test_partial_export_of_a_window_carries_the_archive_it_was_decided_with(tmp_path: Path) -> None:
    w = world(tmp_path, [window("seed000-controlled.toml", "day-a", chain="none"),
                         window("seed000-controlled.toml", "day-b", chain="none")])
    try:
        gate_all(w)
        run(w, "day-a")
        run(w, "day-b")
        manifest = export_bundle(w.book, tmp_path / "b", stream="window/day-b", signer=w.root,
                                 with_streams=bundle_companions("window/day-b"))
        assert manifest["partial"]
        report = run_audit(bundle=tmp_path / "b", root_key=w.root.id)
        assert report.ok, report.lines()
        assert not report.protocol.skipped
        assert any("not that the stream is complete" in t for t in report.crypto["trust"])
    finally:
        close(w)
