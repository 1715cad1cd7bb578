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
from dataclasses import dataclass
from pathlib import Path
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


def _busy(hosts: list[str], holders: list[str], wait_s: float) -> ExternalError:
    who = f" ({'; '.join(holders)})" if holders else ""
    waited = f"waited {wait_s:g} s; " if wait_s > 0 else ""
    return ExternalError(f"host {', '.join(hosts)} is in use by another runner right now{who}: {waited}"
                         "nothing was done; try again later, or pass --wait-hosts SECONDS to wait for it")


def _retrying(attempt: Callable[[], bool], wait_s: float) -> bool:
    """Try ``attempt`` until it succeeds or ``wait_s`` seconds have passed."""
    deadline = time.monotonic() + wait_s
    while True:
        if attempt():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


@dataclass(frozen=True)
class _Kind:
    """What a lock of one kind is called in each backend (these names are shared by every tally version on
    a ledger: changing one would let an older runner and a newer one hold the same thing at once)."""

    pg_class: int                      # the first key of pg_try_advisory_lock(int, int)
    pg_key: Callable[[str], int]       # the second, from the lock's name
    file_tag: str                      # the lock file beside a SQLite database: ``tally.db.<tag>-<hash>.lock``
    memory_tag: str                    # the in-memory lock's name, after the engine's id
    what: Callable[[str], str]         # how a refusal names the lock file


_WINDOW = _Kind(LOCK_CLASS, _key, "window", "", lambda _name: "the window's lock file")
_HOST = _Kind(HOST_LOCK_CLASS, lambda host: _key(f"host:{host}"), "host", "host:",
              lambda host: f"host {host}'s lock file")


@contextmanager
def window_lock(ledger: Ledger, window: str, *, wait_s: float = 0.0) -> Iterator[None]:
    """Hold the window's runner lock for the duration of the block, or refuse.

    ``wait_s`` waits that long for another holder to let go before refusing.
    """
    with _locks(ledger, _WINDOW, [window], f"window {window}", wait_s) as busy:
        if busy is not None:
            raise _refuse(window)
        yield


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
    with _locks(ledger, _HOST, names, holder, wait_s) as busy:
        if busy is not None:
            raise _busy(busy[0], busy[1], wait_s)
        yield


_Busy = tuple[list[str], list[str]]
"""What an attempt that did not get its locks found: the busy names, and who holds them where the backend says."""


@contextmanager
def _locks(ledger: Ledger, kind: _Kind, names: list[str], holder: str, wait_s: float) -> Iterator[_Busy | None]:
    """Every lock of ``names`` held for the block (all or none, retried for ``wait_s``), the block told
    ``None``; or, when they could not all be had, what was busy (and nothing held)."""
    if ledger.engine.dialect.name == "postgresql":
        backend: Callable[..., contextlib.AbstractContextManager[_Attempt]] = _pg_locks
        args: tuple[Any, ...] = (ledger, holder)
    elif (path := sqlite_path(ledger.url)) is None:
        backend, args = _memory_locks, (ledger,)
    else:
        backend, args = _file_locks, (path,)
    with backend(*args, kind, names) as attempt:
        if not _retrying(attempt.take, wait_s):
            yield attempt.busy, attempt.holders()
            return
        attempt.hold()
        try:
            yield None
        finally:
            attempt.release()


class _Attempt:
    """One backend's way to take a set of locks all or nothing (``take``), say who holds the busy ones,
    mark them held (``hold``) and let go (``release``)."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.busy: list[str] = []

    def take(self) -> bool:
        """Try every lock (so that a refusal names every busy one); keep none unless all were had."""
        self.busy.clear()
        taken: list[str] = []
        for name in self.names:
            (taken if self._try(name) else self.busy).append(name)
        if self.busy:
            for name in taken:
                self._let_go(name)
        return not self.busy

    def holders(self) -> list[str]:
        return []

    def hold(self) -> None:
        return None

    def release(self) -> None:
        for name in self.names:
            self._let_go(name)

    def _try(self, name: str) -> bool:
        raise NotImplementedError

    def _let_go(self, name: str) -> None:
        raise NotImplementedError


class _PgAttempt(_Attempt):
    def __init__(self, cursor: Any, kind: _Kind, names: list[str]) -> None:
        super().__init__(names)
        self.cursor, self.kind = cursor, kind

    def _try(self, name: str) -> bool:
        return bool(_pg_call(self.cursor, "SELECT pg_try_advisory_lock(%s, %s)",
                             (self.kind.pg_class, self.kind.pg_key(name))))

    def _let_go(self, name: str) -> None:
        _pg_call(self.cursor, "SELECT pg_advisory_unlock(%s, %s)", (self.kind.pg_class, self.kind.pg_key(name)))

    def holders(self) -> list[str]:
        return _pg_holders(self.cursor, self.kind, self.busy)

    def release(self) -> None:
        return None   # the session's end lets go of every lock it holds (``_pg_lock_session``)


@contextmanager
def _pg_locks(ledger: Ledger, holder: str, kind: _Kind, names: list[str]) -> Iterator[_Attempt]:
    with _pg_lock_session(ledger, holder) as cursor:
        yield _PgAttempt(cursor, kind, names)


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


def _pg_holders(cursor: Any, kind: _Kind, names: list[str]) -> list[str]:
    """Who holds the locks, as their sessions named themselves (what this role may read of them; three at most)."""
    try:
        keys = [kind.pg_key(name) & 0xFFFFFFFF for name in names]   # pg_locks shows the int4 keys as oids
        cursor.execute(
            "SELECT DISTINCT a.application_name, host(a.client_addr) FROM pg_locks l "
            "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.classid::bigint = %s "
            "AND l.objid::bigint = ANY(%s) AND l.granted "
            "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) LIMIT 3",
            (kind.pg_class, keys))
        rows = cursor.fetchall()
        cursor.connection.commit()
    except Exception:   # who holds it is a courtesy: the refusal stands without it
        return []
    return [" from ".join(str(v) for v in row if v) for row in rows if any(row)]


class _MemoryAttempt(_Attempt):
    def __init__(self, locks: dict[str, threading.Lock], names: list[str]) -> None:
        super().__init__(names)
        self.locks = locks

    def _try(self, name: str) -> bool:
        return self.locks[name].acquire(blocking=False)

    def _let_go(self, name: str) -> None:
        self.locks[name].release()


@contextmanager
def _memory_locks(ledger: Ledger, kind: _Kind, names: list[str]) -> Iterator[_Attempt]:
    with _MEMORY_GUARD:
        locks = {name: _MEMORY.setdefault(f"{id(ledger.engine)}:{kind.memory_tag}{name}", threading.Lock())
                 for name in names}
    yield _MemoryAttempt(locks, names)


class _FileAttempt(_Attempt):
    def __init__(self, fds: dict[str, int], names: list[str]) -> None:
        super().__init__(names)
        self.fds = fds

    def _try(self, name: str) -> bool:
        try:
            fcntl.flock(self.fds[name], fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def _let_go(self, name: str) -> None:
        fcntl.flock(self.fds[name], fcntl.LOCK_UN)

    def holders(self) -> list[str]:
        """The pids the busy lock files name (each holder stamps its own)."""
        pids = (os.pread(self.fds[name], 16, 0).decode("ascii", "replace").strip() for name in self.busy)
        return list(dict.fromkeys(f"pid {pid} on this machine" for pid in pids if pid.isdigit()))

    def hold(self) -> None:
        for name in self.names:
            stamp_pid(self.fds[name])


@contextmanager
def _file_locks(path: os.PathLike[str], kind: _Kind, names: list[str]) -> Iterator[_Attempt]:
    """Lock files beside the database, opened never through a symlink, never over a foreign file."""
    base = Path(path)
    fds: dict[str, int] = {}
    try:
        for name in names:
            digest = hashlib.sha256(name.encode()).hexdigest()[:16]
            fds[name] = open_lock(base.with_name(f"{base.name}.{kind.file_tag}-{digest}.lock"), kind.what(name))
        yield _FileAttempt(fds, names)
    finally:
        for fd in fds.values():
            os.close(fd)
