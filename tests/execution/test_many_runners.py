"""Many runners, one ledger: a lock per site host, and no window opening over another that is acting.

Two ``tally window run`` processes on one PostgreSQL ledger and one host pair: the second is
refused with one line (exit 3: retry) or, with ``--wait-hosts``, waits for the first to end;
a window that acted and crashed keeps every other window from opening until it is resumed.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledger.db import sqlite_path
from ledger.errors import ExternalError, PolicyError
from ledger.store import Ledger
from runner.audit.full import run_audit
from runner.execution.lock import host_locks
from runner.execution.steps import Step, next_step
from runner.execution.window import RunResult, WindowRunner

from .worlds import World, close, gate_all, run, state, window, world

TALLY = str(Path(sys.executable).with_name("tally"))


@pytest.fixture(params=["sqlite-memory", "sqlite-file", "postgres"])
def book(request: pytest.FixtureRequest, tmp_path: Path) -> Ledger:
    url = {"sqlite-memory": "sqlite://", "sqlite-file": f"sqlite:///{tmp_path / 'tally.db'}"}.get(request.param)
    return Ledger(url or str(request.getfixturevalue("pg_url")))


def test_host_locks_are_all_or_nothing_and_name_who_holds_them(book: Ledger) -> None:
    with host_locks(book, ("gpu-a", "gpu-b"), holder="window w1 (ops@runner-1)"):
        with pytest.raises(ExternalError, match="host gpu-a, gpu-b is in use by another runner") as refused, \
                host_locks(book, ["gpu-c", "gpu-b", "gpu-a"], holder="window w2 (ops@runner-2)"):
            pass
        message = str(refused.value)
        assert "\n" not in message
        if book.engine.dialect.name == "postgresql":
            assert "tally window w1 (ops@runner-1)" in message   # the holder's session, as it named itself
        elif sqlite_path(book.url) is not None:   # a file: the lock file names the holder's pid
            assert f"pid {os.getpid()} on this machine" in message
        with host_locks(book, ["gpu-c"], holder="window w3"):   # the refused attempt left gpu-c free
            pass
    with host_locks(book, ["gpu-b", "gpu-c"], holder="window w2"):
        pass
    book.close()


def test_a_runner_waiting_for_a_busy_host_holds_none_of_the_others(book: Ledger) -> None:
    """All or nothing while it waits: a runner wanting gpu-0 and gpu-b, gpu-b busy, leaves gpu-0 free for
    others the whole time (it takes gpu-0 first, by name, and lets go of it at each refused attempt)."""
    errors: list[BaseException] = []

    def want_both() -> None:
        try:
            with host_locks(book, ["gpu-0", "gpu-b"], holder="window w2", wait_s=1.5):
                pass
        except ExternalError as exc:
            errors.append(exc)

    with host_locks(book, ["gpu-b"], holder="window w1"):
        waiter = threading.Thread(target=want_both)
        waiter.start()
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:   # gpu-0 stays free while the other waits
            with host_locks(book, ["gpu-0"], holder="window w3", wait_s=0.5):
                pass
            time.sleep(0.02)
        waiter.join()
    assert errors and "host gpu-b is in use" in str(errors[0]) and "waited 1.5 s" in str(errors[0])
    book.close()


def test_a_second_runner_waits_for_the_hosts(book: Ledger) -> None:
    released = threading.Event()

    def hold() -> None:
        with host_locks(book, ["gpu-a"], holder="window w1"):
            time.sleep(0.4)
            released.set()

    holder = threading.Thread(target=hold)
    holder.start()
    time.sleep(0.1)
    began = time.monotonic()
    with host_locks(book, ["gpu-a"], holder="window w2", wait_s=30):
        assert released.is_set()   # it waited for the holder to let go, and no longer
    assert time.monotonic() - began < 20
    holder.join()
    with pytest.raises(ExternalError, match=r"waited 0\.2 s"), \
            host_locks(book, ["gpu-b"], holder="window w3"), host_locks(book, ["gpu-b"], holder="w4", wait_s=0.2):
        pass   # a wait that ends refused says so
    book.close()


def _stop_after(w: World, window_id: str, kind: str) -> None:
    """Take the window's steps up to and including the first ``kind`` step, then stop, as a runner that
    crashed there would leave it."""
    runner = WindowRunner(w.book, w.root, window_id, w.driver, time_scale=w.time_scale)
    from runner.gates import admit

    admit(w.book, w.root, window_id)
    for _ in range(12):
        runner.refresh()
        step = next_step(runner._context(runner.ws))
        runner.perform(step, RunResult(window_id, None, None, []))
        if step.kind == kind:
            return
    raise AssertionError(f"no {kind} step")


@contextlib.contextmanager
def _first_stopped_after(tmp_path: Path, kind: str) -> Iterator[World]:
    """Two windows on one site, gated; the first has taken its steps up to ``kind`` and stopped there (as a
    runner that crashed would leave it)."""
    w = world(tmp_path, [window("seed000-controlled.toml", "first", chain="none"),
                         window("seed000-controlled.toml", "second", chain="none")])
    try:
        gate_all(w)
        _stop_after(w, "first", kind)
        yield w
    finally:
        close(w)


def test_a_window_that_acted_and_crashed_before_its_hold_keeps_others_from_opening(tmp_path: Path) -> None:
    """The drain is recorded, the HOLD not yet: production is down and no HOLD says whose. Another window
    must not snapshot the drained hosts as production, nor drain them again."""
    with _first_stopped_after(tmp_path, "drain") as w:
        before = state(w.book)
        assert before.production == "down" and before.hold is None
        with pytest.raises(PolicyError, match=r"window first is acting on the site .*tally window resume first"):
            run(w, "second")
        after = state(w.book)
        assert after.windows["second"].actions == 0 and after.size == before.size   # nothing appended
        resumed = WindowRunner(w.book, w.root, "first", w.driver, time_scale=w.time_scale).run(resume=True)
        assert resumed.decision is not None
        assert run(w, "second").ending == "restored"   # decided: the site is the next window's
        assert run_audit(book=w.book).ok


def test_the_step_machine_blocks_an_opening_while_another_window_acts(tmp_path: Path) -> None:
    with _first_stopped_after(tmp_path, "preflight") as w:
        # even a read-only action: its runner may be about to drain
        from runner.gates import admit

        admit(w.book, w.root, "second")
        runner = WindowRunner(w.book, w.root, "second", w.driver, time_scale=w.time_scale)
        step = next_step(runner._context(runner.ws))
        assert step.kind == "blocked" and "window first is acting on the site" in (step.reason or "")


def test_a_window_that_raced_another_never_opens_a_hold_and_the_other_goes_on_after(tmp_path: Path) -> None:
    """A ledger an older runner raced on: the first window drained, then the second took its preflight, its
    snapshot (of the drained hosts) and a drain, and neither opened a HOLD. The second raced the first
    (``raced_with``): it never goes on to a HOLD, whoever is run first, and ends restoring what it touched;
    the first waits for that, then goes on with its own snapshot (taken while production served)."""
    with _first_stopped_after(tmp_path, "drain") as w:
        from runner.gates import admit

        admit(w.book, w.root, "second")
        runner = WindowRunner(w.book, w.root, "second", w.driver, time_scale=w.time_scale)
        for kind in ("preflight", "snapshot", "drain"):   # as the old runner let it
            runner.perform(Step(kind, args={"from_marker": False}), RunResult("second", None, None, []))
            runner.refresh()
        assert state(w.book).windows["second"].raced_with == "first"
        assert state(w.book).windows["first"].raced_with is None
        waiting = WindowRunner(w.book, w.root, "first", w.driver, time_scale=w.time_scale).run(resume=True)
        assert waiting.decision is None and "window second is acting on the site" in (waiting.blocked or "")
        step = next_step(runner._context(runner.ws))
        assert step.kind == "measurement_end" and "window first was acting" in (step.reason or "")
        ended = WindowRunner(w.book, w.root, "second", w.driver, time_scale=w.time_scale).run(resume=True)
        second = state(w.book).windows["second"]
        assert ended.decision is not None and second.ending is not None and second.restore is not None
        assert not list(w.book.events(stream="window/second", types=["hold.opened"]))   # never a HOLD
        done = WindowRunner(w.book, w.root, "first", w.driver, time_scale=w.time_scale).run(resume=True)
        final = state(w.book)
        assert done.decision is not None and final.windows["first"].ending == "restored"
        assert final.production == "up" and final.hold is None
        protocol = run_audit(book=w.book).protocol
        assert protocol is not None   # the raced window is on record as such, and nothing else is wrong
        assert [(v.invariant, v.window) for v in protocol.violations] == [("one-window-on-site", "second")]


def test_a_window_that_never_acted_can_be_aborted_while_another_acts(tmp_path: Path) -> None:
    with _first_stopped_after(tmp_path, "drain") as w:
        aborted = WindowRunner(w.book, w.root, "second", w.driver, time_scale=w.time_scale).run(abort=True)
        assert aborted.blocked is None and aborted.ending == "aborted"
        after = state(w.book)
        assert after.windows["second"].actions == 0   # closed as never touched: no host action taken
        assert after.windows["first"].ending is None and after.production == "down"   # the other's, untouched


def test_a_postgres_lock_session_is_named_kept_alive_and_ends_with_its_connection(pg_url: str) -> None:
    from runner.execution.lock import KEEPALIVE, _pg_lock_session

    book = Ledger(pg_url)
    other = Ledger(pg_url)
    try:
        with _pg_lock_session(book, "window w1 (ops@runner-1)") as cursor:
            for name, value in KEEPALIVE.items():   # over TCP the server reads them back as set
                cursor.execute("SELECT current_setting(%s)", (name,))
                assert cursor.fetchone()[0] == str(value)
            cursor.execute("SELECT pg_backend_pid()")
            pid = cursor.fetchone()[0]
        with other.engine.connect() as conn:   # closed with the block: the session is gone, not pooled
            from sqlalchemy import text

            alive = conn.execute(text("SELECT count(*) FROM pg_stat_activity WHERE pid = :pid"), {"pid": pid})
            assert alive.scalar() == 0
    finally:
        book.close()
        other.close()


def test_a_lock_session_the_server_ends_lets_go_and_a_waiter_it_ends_is_external_error(pg_url: str) -> None:
    from sqlalchemy import text

    book = Ledger(pg_url)

    def terminate(name: str) -> int:
        with book.engine.connect() as conn:
            done = conn.execute(text("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                                     "WHERE application_name = :name"), {"name": f"tally {name}"})
            conn.commit()
            return int(done.scalar() or 0)

    try:
        with host_locks(book, ["gpu-a"], holder="window w1"):   # the holder's session ends under it
            assert terminate("window w1") == 1
            time.sleep(0.2)
        with host_locks(book, ["gpu-a"], holder="window w2"):   # its lock went with the session
            pass
        errors: list[BaseException] = []

        def wait_for_it() -> None:
            try:
                with host_locks(book, ["gpu-b"], holder="window w4", wait_s=10):
                    pass
            except BaseException as exc:   # what the waiter's caller would see
                errors.append(exc)

        with host_locks(book, ["gpu-b"], holder="window w3"):
            waiter = threading.Thread(target=wait_for_it)
            waiter.start()
            deadline = time.monotonic() + 10
            while terminate("window w4") == 0:   # the waiter's session, once it is up
                assert time.monotonic() < deadline
                time.sleep(0.05)
            waiter.join(timeout=20)
        assert len(errors) == 1 and isinstance(errors[0], ExternalError), errors
        assert "the database did not answer while taking a runner lock" in str(errors[0])
    finally:
        book.close()


def _cli(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([TALLY, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_two_runner_processes_one_postgres_ledger_one_host_pair(tmp_path: Path, pg_url: str) -> None:
    w = world(tmp_path, [window("seed000-controlled.toml", "job-0", chain="none"),
                         window("seed000-controlled.toml", "job-1", chain="none")], db_url=pg_url)
    env = dict(os.environ, TALLY_DB=pg_url, TALLY_KEY=str(tmp_path / ".tally/root.pem"))
    site = str(tmp_path / "site.toml")
    try:
        gate_all(w)
        for window_id in ("job-0", "job-1"):
            from runner.gates import admit

            admit(w.book, w.root, window_id)
        first = _cli(env, "window", "run", "job-0", "--site", site, "--execute", "--quiet")
        deadline = time.monotonic() + 120
        while state(w.book).windows["job-0"].waves < 1:   # it holds the hosts now
            assert time.monotonic() < deadline and first.poll() is None
            time.sleep(0.05)
        size = state(w.book).size
        job_1 = len(list(w.book.events(stream="window/job-1")))
        refused = subprocess.run([TALLY, "window", "run", "job-1", "--site", site, "--execute"], env=env,
                                 capture_output=True, text=True, timeout=120)
        assert refused.returncode == 3, refused.stderr   # busy: a job system retries it
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1 and "is in use by another runner" in lines[0] and "tally window job-0" in lines[0]
        assert state(w.book).windows["job-1"].actions == 0   # nothing was done for it
        assert len(list(w.book.events(stream="window/job-1"))) == job_1   # and nothing appended
        # the job system's command: resume starts a window not yet run, and waits for the hosts
        waiting = _cli(env, "window", "resume", "job-1", "--site", site, "--quiet", "--wait-hosts", "300")
        _, first_err = first.communicate(timeout=300)
        assert first.returncode == 0, first_err
        _, second_err = waiting.communicate(timeout=300)
        assert waiting.returncode == 0, second_err
        final = state(w.book)
        assert size < final.size
        zero, one = final.windows["job-0"], final.windows["job-1"]
        assert zero.decision is not None and one.decision is not None and final.hold is None
        assert final.production == "up"
        seqs = {wid: [e.seq for e in w.book.events(stream=f"window/{wid}", types=["host.action"])]
                for wid in ("job-0", "job-1")}
        decided = next(iter(w.book.events(stream="window/job-0", types=["decision.recorded"]))).seq
        assert min(seqs["job-1"]) > decided   # it waited for the whole first window, not for its HOLD alone
        with host_locks(w.book, w.driver.hosts, holder="window another"):   # the hosts busy again
            again = subprocess.run([TALLY, "window", "resume", "job-1", "--site", site, "--quiet"], env=env,
                                   capture_output=True, text=True, timeout=120)
        assert again.returncode == 0, again.stderr   # a decided window: left as it is, no host waited for
        assert state(w.book).size == final.size
        verified = subprocess.run([TALLY, "verify"], env=env, capture_output=True, text=True, timeout=120)
        assert verified.returncode == 0, verified.stdout + verified.stderr
        assert run_audit(book=w.book).ok
    finally:
        close(w)
