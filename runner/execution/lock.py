"""One runner per window at a time, on any host.

The ledger shows who holds the HOLD; this lock makes sure no two live runners act on
one window at once (the second refuses). It dies with its process, so a crashed
runner never blocks ``tally window resume``. PostgreSQL: a session-level advisory
lock (every host sees it). SQLite: an ``flock`` on a file beside the database, opened
by ``ledger.strictwrite.open_lock`` (never through a symlink, never truncating a file
that is not a lock file: a planted one is refused, exit 2).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from ledger.db import sqlite_path
from ledger.errors import PolicyError
from ledger.strictwrite import open_lock, stamp_pid

if TYPE_CHECKING:
    from ledger.store import Ledger

__all__ = ["window_lock"]

LOCK_CLASS = 0x7A11  # first key of pg_try_advisory_lock(int, int)
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
        raw = ledger.engine.raw_connection()
        try:
            cursor = raw.cursor()

            def take() -> bool:
                cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", (LOCK_CLASS, _key(window)))
                row = cursor.fetchone()
                raw.commit()
                return bool(row and row[0])

            if not _retrying(take, wait_s):
                raise _refuse(window)
            try:
                yield
            finally:
                cursor.execute("SELECT pg_advisory_unlock(%s, %s)", (LOCK_CLASS, _key(window)))
                raw.commit()
        finally:
            raw.close()
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
