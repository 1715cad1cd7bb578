"""One runner per window at a time, and one per site host, on any machine.

The ledger shows who holds the HOLD; ``window_lock`` makes sure no two live runners act
on one window at once (the second refuses), and ``host_locks`` that no two live runners
act on one host at once, whatever their windows (the second waits, then refuses: exit 3,
try again later). Both die with their process, so a crashed runner never blocks
``tally window resume``; what the crash left (a drained host, an open HOLD) the ledger
shows, and the step machine refuses to open another window over it. PostgreSQL: session-level
advisory locks (every machine on the ledger sees them; the server drops them when the
holder's connection ends, and a machine that vanished is found by TCP keepalives within
about a minute). SQLite: an ``flock`` on a file beside the database, opened by
``ledger.strictwrite.open_lock`` (never through a symlink, never truncating a file that is
not a lock file: a planted one is refused, exit 2).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ledger.db import sqlite_path
from ledger.errors import ExternalError, PolicyError
from ledger.strictwrite import open_lock, stamp_pid

if TYPE_CHECKING:
    from ledger.store import Ledger

__all__ = ["host_locks", "window_lock"]

LOCK_CLASS = 0x7A11  # first key of pg_try_advisory_lock(int, int)
HOST_LOCK_CLASS = 0x7A12  # first key of a site host's lock
KEEPALIVE = {"tcp_keepalives_idle": 20, "tcp_keepalives_interval": 10, "tcp_keepalives_count": 3}
"""How the server finds a lock holder's machine gone (seconds): its session's locks then go with it."""
_MEMORY: dict[str, threading.Lock] = {}
_MEMORY_GUARD = threading.Lock()


def _key(window: str) -> int:
    return int.from_bytes(hashlib.sha256(window.encode()).digest()[:4], "big", signed=True)


def _refuse(window: str) -> PolicyError:
    return PolicyError(f"window {window} is being run by another runner right now (its lock is held); "
                       "wait for it, or stop it, then `tally window resume`")


def _retrying(attempt: Callable[[], bool], wait_s: float) -> bool:
    """Try ``attempt`` until it succeeds or ``wait_s`` seconds have passed."""
    deadline = time.monotonic() + wait_s
    while True:
        if attempt():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


@contextmanager
def window_lock(ledger: Ledger, window: str, *, wait_s: float = 0.0) -> Iterator[None]:
    """Hold the window's runner lock for the duration of the block, or refuse.

    ``wait_s`` waits that long for another holder to let go before refusing.
    """
    if ledger.engine.dialect.name == "postgresql":
        with _pg_lock_session(ledger, f"window {window}") as cursor:
            def take() -> bool:
                return _pg_try(cursor, LOCK_CLASS, _key(window))

            if not _retrying(take, wait_s):
                raise _refuse(window)
            yield
        return
    path = sqlite_path(ledger.url)
    if path is None:
        with _MEMORY_GUARD:
            lock = _MEMORY.setdefault(f"{id(ledger.engine)}:{window}", threading.Lock())
        if not lock.acquire(timeout=wait_s) if wait_s > 0 else not lock.acquire(blocking=False):
            raise _refuse(window)
        try:
            yield
        finally:
            lock.release()
        return
    lock_path = path.with_name(f"{path.name}.window-{hashlib.sha256(window.encode()).hexdigest()[:16]}.lock")
    fd = open_lock(lock_path, "the window's lock file")  # never through a symlink, never over a foreign file
    try:
        def take_file() -> bool:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            return True

        if not _retrying(take_file, wait_s):
            raise _refuse(window)
        stamp_pid(fd)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _busy(hosts: list[str], holders: list[str], wait_s: float) -> ExternalError:
    who = f" ({'; '.join(holders)})" if holders else ""
    waited = f"waited {wait_s:g} s; " if wait_s > 0 else ""
    return ExternalError(f"host {', '.join(hosts)} is in use by another runner right now{who}: {waited}"
                         "nothing was done; try again later, or pass --wait-hosts SECONDS to wait for it")


@contextmanager
def host_locks(ledger: Ledger, hosts: tuple[str, ...] | list[str], *, holder: str,
               wait_s: float = 0.0) -> Iterator[None]:
    """Hold a lock on every one of ``hosts`` for the duration of the block (all of them or none), or refuse
    with ``ExternalError`` (exit 3: the hosts are busy, try again later) naming the busy hosts and, where the
    database says, who holds them. ``holder`` names this runner to the others (``window w1 (user@host)``).

    Taken in sorted order, all-or-nothing, retried until ``wait_s`` has passed: two runners that want
    overlapping hosts never hold a part each.
    """
    names = sorted(set(hosts))
    if not names:
        yield
        return
    if ledger.engine.dialect.name == "postgresql":
        yield from _pg_host_locks(ledger, names, holder, wait_s)
        return
    path = sqlite_path(ledger.url)
    if path is None:
        yield from _memory_host_locks(ledger, names, wait_s)
        return
    yield from _file_host_locks(path, names, wait_s)


def _host_key(host: str) -> int:
    return _key(f"host:{host}")


def _pg_host_locks(ledger: Ledger, names: list[str], holder: str, wait_s: float) -> Iterator[None]:
    with _pg_lock_session(ledger, holder) as cursor:
        busy: list[str] = []

        def take() -> bool:
            busy.clear()
            taken: list[str] = []
            for host in names:   # every one tried, so that a refusal names every busy host
                (taken if _pg_try(cursor, HOST_LOCK_CLASS, _host_key(host)) else busy).append(host)
            if busy:   # all or nothing: let go of the ones this attempt took
                for host in taken:
                    _pg_call(cursor, "SELECT pg_advisory_unlock(%s, %s)", (HOST_LOCK_CLASS, _host_key(host)))
            return not busy

        if not _retrying(take, wait_s):
            raise _busy(busy, _pg_holders(cursor, busy), wait_s)
        yield


@contextmanager
def _pg_lock_session(ledger: Ledger, holder: str) -> Iterator[Any]:
    """A connection of its own for session advisory locks (its cursor), named ``tally HOLDER`` to the server,
    with server-side TCP keepalives (``KEEPALIVE``): a holder whose machine vanished loses its locks within
    about a minute. It is detached from the ledger's pool, so that closing it ends the session (its locks,
    its name and its keepalives go with it; none is ever handed back to the pool). At the end every lock
    is let go, and the connection closed whatever that says: the block's own outcome stands. A database
    that fails while the lock is taken is ``ExternalError`` (exit 3)."""
    raw: Any = None
    cursor: Any = None
    try:
        try:
            raw = ledger.engine.raw_connection()
            raw.detach()
            cursor = raw.cursor()
            cursor.execute("SELECT set_config('application_name', %s, false)", (f"tally {holder}"[:63],))
            for name, value in KEEPALIVE.items():
                cursor.execute("SELECT set_config(%s, %s, false)", (name, str(value)))
            raw.commit()
        except Exception as exc:
            cursor = None
            raise ExternalError(f"the database did not answer while taking a runner lock: {exc}") from None
        yield cursor
    finally:
        if cursor is not None:
            with contextlib.suppress(Exception):
                cursor.execute("SELECT pg_advisory_unlock_all()")
                raw.commit()
        if raw is not None:
            with contextlib.suppress(Exception):
                raw.close()   # detached: the session ends here


def _pg_call(cursor: Any, sql: str, args: tuple[object, ...]) -> Any:
    """One statement on a lock session and its first row's first value; ``ExternalError`` when it fails."""
    try:
        cursor.execute(sql, args)
        row = cursor.fetchone()
        cursor.connection.commit()
    except Exception as exc:
        raise ExternalError(f"the database did not answer while taking a runner lock: {exc}") from None
    return row[0] if row else None


def _pg_try(cursor: Any, key1: int, key2: int) -> bool:
    return bool(_pg_call(cursor, "SELECT pg_try_advisory_lock(%s, %s)", (key1, key2)))


def _pg_holders(cursor: Any, hosts: list[str]) -> list[str]:
    """Who holds the hosts' locks, as their sessions named themselves (what this role may read of them)."""
    try:
        keys = [_host_key(h) & 0xFFFFFFFF for h in hosts]   # pg_locks shows the int4 keys as oids
        cursor.execute(
            "SELECT DISTINCT a.application_name, host(a.client_addr) FROM pg_locks l "
            "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.classid::bigint = %s "
            "AND l.objid::bigint = ANY(%s) AND l.granted "
            "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            (HOST_LOCK_CLASS, keys))
        rows = cursor.fetchall()
        cursor.connection.commit()
    except Exception:   # who holds it is a courtesy: the refusal stands without it
        return []
    return [" from ".join(str(v) for v in row if v) for row in rows if any(row)][:3]


def _memory_host_locks(ledger: Ledger, names: list[str], wait_s: float) -> Iterator[None]:
    with _MEMORY_GUARD:
        locks = [_MEMORY.setdefault(f"{id(ledger.engine)}:host:{h}", threading.Lock()) for h in names]
    taken: list[threading.Lock] = []
    busy: list[str] = []

    def take() -> bool:
        busy.clear()
        for host, lock in zip(names, locks, strict=True):
            if lock.acquire(blocking=False):
                taken.append(lock)
            else:
                busy.append(host)
        if busy:   # all or nothing
            for held in taken:
                held.release()
            taken.clear()
        return not busy

    if not _retrying(take, wait_s):
        raise _busy(busy, [], wait_s)
    try:
        yield
    finally:
        for lock in taken:
            lock.release()


def _file_host_locks(path: os.PathLike[str], names: list[str], wait_s: float) -> Iterator[None]:
    base = os.fspath(path)
    fds: list[int] = []
    try:
        for host in names:
            lock_path = f"{base}.host-{hashlib.sha256(host.encode()).hexdigest()[:16]}.lock"
            fds.append(open_lock(lock_path, f"host {host}'s lock file"))
        busy: list[str] = []
        holders: list[str] = []

        def take() -> bool:
            taken: list[int] = []
            busy.clear()
            holders.clear()
            for host, fd in zip(names, fds, strict=True):
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    busy.append(host)
                    pid = os.pread(fd, 16, 0).decode("ascii", "replace").strip()
                    if pid.isdigit() and f"pid {pid} on this machine" not in holders:
                        holders.append(f"pid {pid} on this machine")
                    continue
                taken.append(fd)
            if busy:   # all or nothing
                for held in taken:
                    fcntl.flock(held, fcntl.LOCK_UN)
            return not busy

        if not _retrying(take, wait_s):
            raise _busy(busy, holders, wait_s)
        for fd in fds:
            stamp_pid(fd)
        try:
            yield
        finally:
            for fd in fds:
                fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        for fd in fds:
            os.close(fd)
