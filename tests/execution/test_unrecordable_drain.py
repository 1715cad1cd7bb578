"""A drain that worked but whose outcome the runner cannot record: production is restored all the same.

Issue 20, failures 1 and 9. Each test is an attack on a window through the command site
(examples/site-scripts/statehost.sh behind a wrapper that adds what the attacker prints): the
drain really drains (the site's state directory is the ground truth: ``production`` says
``down``), then prints a fact line an event cannot carry, or fails with a huge stderr line, or
nests its facts 100,000 levels deep. Before the fix the runner re-probed, the probe recorded
``serving: down``, and the window closed "ABORTED before touching production: nothing to
restore" with production left down (or, for the deep nesting, died of a RecursionError).
Now the drain's outcome is recorded as a failure naming why (bounded), the drain counts as a
touch from the moment its start was recorded, and the window restores production.

The last test holds the SQLite write lock from a second process past the busy timeout while
the drain's record is due: the runner retries, restores production while the lock is still
held, and records everything once the lock is released.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

import ledger.db
from ledger.store import Ledger
from ledger.stored import verify_ledger
from runner.audit.full import run_audit
from runner.drivers.base import ActionResult, HostDriver
from runner.drivers.site import load_site
from runner.execution.window import RunResult, WindowRunner
from runner.gates.admission import admit
from tests.runner.script import EXAMPLES

from .worlds import close, gate_all, state, window, world

WINDOW = "attack"
WRAPPER = """#!/usr/bin/env bash
# statehost.sh, then what the attacker planted for this action (used once): extra stdout, extra
# stderr, another exit code
S=$1; A=$2
"$(dirname "$0")/statehost.sh" "$@"; code=$?
[ -f "$S/hostile/$A.stdout" ] && cat "$S/hostile/$A.stdout"
[ -f "$S/hostile/$A.stderr" ] && cat "$S/hostile/$A.stderr" >&2
[ -f "$S/hostile/$A.exit" ] && code=$(cat "$S/hostile/$A.exit")
rm -f "$S/hostile/$A".*
exit $code
"""
MIB = 1 << 20


@pytest.fixture
def site(tmp_path: Path) -> Iterator[tuple[Any, HostDriver, Path]]:
    """A gated window, the command site with the attacker's wrapper, and the site's state directory."""
    w = world(tmp_path, [window("seed000-controlled.toml", WINDOW, chain="none")])
    try:
        gate_all(w)
        scripts = tmp_path / "site-scripts"
        shutil.copytree(EXAMPLES / "site-scripts", scripts)
        (scripts / "hostile.sh").write_text(WRAPPER)
        (scripts / "hostile.sh").chmod(0o755)
        text = (EXAMPLES / "site-commands.toml").read_text().replace("http://127.0.0.1:8000", w.sim.url)
        (tmp_path / "site.toml").write_text(text.replace("site-scripts/statehost.sh", "site-scripts/hostile.sh"))
        state_dir = tmp_path / "site-state"
        (state_dir / "hostile").mkdir(parents=True)
        driver = load_site(tmp_path / "site.toml")
        yield w, driver, state_dir
        driver.close()
    finally:
        close(w)


def _plant(state_dir: Path, action: str, *, stdout: bytes = b"", stderr: bytes = b"", exit_code: int | None = None
           ) -> None:
    if stdout:
        (state_dir / "hostile" / f"{action}.stdout").write_bytes(stdout)
    if stderr:
        (state_dir / "hostile" / f"{action}.stderr").write_bytes(stderr)
    if exit_code is not None:
        (state_dir / "hostile" / f"{action}.exit").write_text(f"{exit_code}\n")


def _run(w: Any, driver: HostDriver, book: Ledger | None = None, **attrs: Any) -> RunResult:
    book = book or w.book
    if state(book).windows[WINDOW].admitted_seq is None:
        admit(book, w.root, WINDOW)
    runner = WindowRunner(book, w.root, WINDOW, driver, time_scale=w.time_scale)
    for name, value in attrs.items():
        setattr(runner, name, value)
    return runner.run()


def _window(w: Any, type_: str | None = None) -> list[dict[str, Any]]:
    return [e.payload for e in w.book.events(stream=f"window/{WINDOW}", types=[type_] if type_ else None)]


def _finished(w: Any, action: str) -> list[dict[str, Any]]:
    return [a for a in _window(w, "host.action") if a["action"] == action and a["phase"] == "finished"]


def _restored_and_recorded(w: Any, state_dir: Path, result: RunResult) -> dict[str, Any]:
    """Production serves (the site's own state), the ledger records the restore, verify and audit pass."""
    assert (state_dir / "production").read_text().strip() == "up"                  # ground truth
    assert (state_dir / "engine").read_text().split()[:2] == ["production", "production"]
    assert result.ending == "aborted" and result.decision == "REJECT"
    assert [r["status"] for r in _window(w, "restore.finished")] == ["ok"]
    assert [v["verdict"] for v in _window(w, "watch.result")] == ["PASS"]
    closed = _window(w, "window.closed")
    assert len(closed) == 1 and "nothing to restore" not in closed[0]["summary"]
    assert state(w.book).production != "down" and state(w.book).hold is None
    assert verify_ledger(w.book).verified.size == w.book.size()
    audit = run_audit(book=w.book)
    assert audit.ok, audit.lines()
    (drain,) = _finished(w, "drain")
    assert drain["ok"] is False
    return drain


def test_drain_printing_an_out_of_range_integer_fact_restores_production(site: Any) -> None:
    w, driver, state_dir = site
    _plant(state_dir, "drain", stdout=b'TALLY-FACTS {"drained_at_ns": 1764600000000000000}\n')
    drain = _restored_and_recorded(w, state_dir, _run(w, driver))
    assert "cannot be recorded" in drain["detail"]["error"] and "1764600000000000000" in drain["detail"]["error"]


def test_drain_printing_a_lone_surrogate_fact_restores_production(site: Any) -> None:
    w, driver, state_dir = site
    _plant(state_dir, "drain", stdout=b'TALLY-FACTS {"note": "\\ud800"}\n')
    drain = _restored_and_recorded(w, state_dir, _run(w, driver))
    assert "lone surrogate" in drain["detail"]["error"]


def test_drain_printing_a_2_mib_fact_restores_production(site: Any) -> None:
    w, driver, state_dir = site
    _plant(state_dir, "drain", stdout=b'TALLY-FACTS {"log": "' + b"x" * (2 * MIB) + b'"}\n')
    drain = _restored_and_recorded(w, state_dir, _run(w, driver))
    assert "over the 65536-byte limit" in drain["detail"]["error"]
    assert drain["detail"]["output_cut"]["stdout"] > MIB - 4096   # the blob keeps 1 MiB of the 2 MiB
    assert drain["output"]["size"] < MIB + 64 << 10


def test_drain_failing_with_a_2_mib_last_stderr_line_restores_production(site: Any) -> None:
    w, driver, state_dir = site
    _plant(state_dir, "drain", stderr=b"E" * (2 * MIB) + b"\n", exit_code=1)
    drain = _restored_and_recorded(w, state_dir, _run(w, driver))
    error = drain["detail"]["error"]
    assert error.startswith("drain failed (exit code 1): EEEE") and len(error) < 2000
    assert drain["detail"]["output_cut"]["stderr"] > MIB - 4096


def test_drain_printing_facts_nested_100000_levels_restores_production(site: Any) -> None:
    w, driver, state_dir = site
    deep = b'{"a":' * 100_000 + b"1" + b"}" * 100_000
    _plant(state_dir, "drain", stdout=b"TALLY-FACTS " + deep + b"\n")
    drain = _restored_and_recorded(w, state_dir, _run(w, driver))   # no RecursionError out of the runner
    assert "TALLY-FACTS is not JSON the runner can read" in drain["detail"]["error"]


# ---------------------------------------------------------------------- a second writer holds the lock

LOCK_HOLDER = """
import sqlite3, sys, time
from pathlib import Path
db, release = sys.argv[1], Path(sys.argv[2])
con = sqlite3.connect(db, isolation_level=None)
con.execute("BEGIN IMMEDIATE")          # the database's write lock, held until released
print("locked", flush=True)
deadline = time.monotonic() + 60
while not release.exists() and time.monotonic() < deadline:
    time.sleep(0.02)
con.execute("ROLLBACK")
"""


class _LockDuringDrain:
    """The simulator site; right after the drain, a second process takes the ledger's write lock.

    It keeps it until the watch that follows the restore has run, and notes whether each
    restore ran while the lock was still held."""

    def __init__(self, driver: HostDriver, db: Path, release: Path) -> None:
        self._driver, self._db, self._release = driver, db, release
        self.holder: subprocess.Popen[str] | None = None
        self.restores_under_lock: list[bool] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._driver, name)

    def run(self, action: str, host: str | None, params: Mapping[str, Any]) -> ActionResult:
        result = self._driver.run(action, host, params)
        if action == "drain" and self.holder is None:
            self.holder = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, str(self._db), str(self._release)],
                                           stdout=subprocess.PIPE, text=True)
            assert self.holder.stdout is not None and self.holder.stdout.readline().strip() == "locked"
        if action == "restore":
            self.restores_under_lock.append(self.holder is not None and self.holder.poll() is None)
        if action == "watch":
            self._release.touch()
        return result


def test_write_lock_held_past_the_busy_timeout_during_the_drain_restores_production(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    w = world(tmp_path, [window("seed000-controlled.toml", WINDOW, chain="none")])
    holder = None
    try:
        gate_all(w)
        monkeypatch.setattr(ledger.db, "BUSY_TIMEOUT_MS", 200)    # the runner's ledger waits 0.2 s for the lock
        book = Ledger(f"sqlite:///{tmp_path / 'tally.db'}")
        site = _LockDuringDrain(w.driver, tmp_path / "tally.db", tmp_path / "release")
        try:
            result = _run(w, site, book, record_wait_s=30.0)
        finally:
            holder = site.holder
            book.close()
        sim = w.sim.state()
        assert sim["production"] == "up" and sim["engine"]["production"]           # ground truth
        assert site.restores_under_lock == [True]    # restored first, while the ledger still refused appends
        assert result.ending == "aborted" and result.decision == "REJECT"
        events = _window(w)
        interrupted = [e for e in events if e.get("reason") == "error" and "detail" in e]
        assert interrupted and interrupted[0]["detail"]["append_failed"] is True
        assert "database is locked" in interrupted[0]["detail"]["error"]
        (drain,) = _finished(w, "drain")
        assert drain["ok"] is True          # recorded late, as it happened: the drain worked
        assert [r["status"] for r in _window(w, "restore.finished")] == ["ok"]
        closed = _window(w, "window.closed")
        assert len(closed) == 1 and "nothing to restore" not in closed[0]["summary"]
        assert verify_ledger(w.book).verified.size == w.book.size()
        audit = run_audit(book=w.book)
        assert audit.ok, audit.lines()
        assert json.loads(json.dumps(state(w.book).to_json()))["hold"] is None
    finally:
        if holder is not None:
            (tmp_path / "release").touch()
            holder.wait(timeout=30)
        close(w)
