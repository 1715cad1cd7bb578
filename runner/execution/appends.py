"""Appending a window's events when the ledger may refuse them: bounded retries, then a backlog.

The runner appends through one :class:`Appender`. An append the database refuses for a
reason that can pass (``ExternalError``: locked by another writer past its busy timeout, or
not answering; ``StorageError``: the disk is full, the database failed) is tried again,
``attempts`` times in all, ``backoff_s`` apart. One that still fails is kept, in order, in
``unrecorded`` (the backlog) and the caller is told it was deferred; every later append
first tries the backlog and its own events in one transaction (once: the ledger is known
to refuse), and :meth:`Appender.flush` tries the backlog alone, waiting up to a given time.

An append whose failure leaves it unclear whether it committed (a commit whose answer was
lost) is looked for in the ledger before it is tried again: what landed is not appended
twice. Refusals that cannot pass (a payload the ledger rejects, a revoked key) are raised
as they are.

:func:`pending_events` gives deferred events the shape of stored ones (seq after the
ledger's, no hash, no signature), for the runner to fold them into the state it decides
from while the ledger refuses them (``docs/window.md``, when an append fails).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ledger.canonical import check_payload
from ledger.errors import ExternalError, StorageError
from ledger.event import Event, format_time

if TYPE_CHECKING:
    from ledger.keys import Signer
    from ledger.store import Ledger, NewEvent

__all__ = ["APPEND_ATTEMPTS", "APPEND_BACKOFF_S", "MAX_BACKLOG", "RECORD_WAIT_S", "Appender", "Landing",
           "pending_events"]

APPEND_ATTEMPTS = 3                # tries of one append before its events wait in the backlog
APPEND_BACKOFF_S = (0.5, 2.0)      # the waits between them (the last one repeats)
RECORD_WAIT_S = 120.0              # how long a runner holding a backlog at its end keeps trying to record it
MAX_BACKLOG = 1000                 # events a runner holds unrecorded before it stops acting (a bound, not a goal)
PASSING = (ExternalError, StorageError)   # the refusals worth trying again


@dataclass(frozen=True)
class Landing:
    """What one append did: ``stored`` (the backlog first, then the new events), or ``deferred``."""

    stored: tuple[Event, ...]
    deferred: bool


class Appender:
    """Appends for one runner: bounded retries, a backlog, and no event appended twice."""

    def __init__(self, ledger: Ledger, signer: Signer, *, floor: int = 0, attempts: int = APPEND_ATTEMPTS,
                 backoff_s: Sequence[float] = APPEND_BACKOFF_S,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.ledger = ledger
        self.signer = signer
        self.attempts = max(1, attempts)
        self.backoff_s = tuple(backoff_s) or (0.0,)
        self.sleep = sleep
        self.unrecorded: list[NewEvent] = []
        self.last_error: str | None = None
        self.refusals = 0            # failed attempts, in all (for the runner's report)
        self._floor = floor          # no event of ours is stored at or below this seq
        self._unclear = False        # the last attempt failed: it may have committed all the same

    def append(self, events: Sequence[NewEvent]) -> Landing:
        """Append the backlog and ``events`` in one transaction, or keep them all in the backlog."""
        batch = [*self.unrecorded, *events]
        stored = self._attempt(batch, 1 if self.unrecorded else self.attempts)
        if stored is None:
            self.unrecorded = batch
            return Landing((), True)
        self.unrecorded = []
        return Landing(tuple(stored), False)

    def keep(self, events: Sequence[NewEvent]) -> None:
        """Add ``events`` to the backlog without trying (the ledger is known to refuse now)."""
        self.unrecorded.extend(events)

    def flush(self, wait_s: float) -> Landing:
        """Append the backlog, trying again (backing off) for up to ``wait_s`` seconds."""
        if not self.unrecorded:
            return Landing((), False)
        deadline = time.monotonic() + max(wait_s, 0.0)
        delays = iter(self.backoff_s)
        delay = self.backoff_s[0]
        while True:
            stored = self._attempt(self.unrecorded, 1)
            if stored is not None:
                self.unrecorded = []
                return Landing(tuple(stored), False)
            delay = next(delays, delay)
            if time.monotonic() + delay > deadline:
                return Landing((), True)
            self.sleep(delay)

    # ------------------------------------------------------------------ attempts

    def _attempt(self, batch: list[NewEvent], attempts: int) -> list[Event] | None:
        for attempt in range(attempts):
            if attempt:
                self.sleep(self.backoff_s[min(attempt - 1, len(self.backoff_s) - 1)])
            try:
                landed = self._landed(batch) if self._unclear else []
                stored = self.ledger.append_many(batch[len(landed):], self.signer) if len(landed) < len(batch) \
                    else []
            except PASSING as exc:
                self.last_error = str(exc)[:500]
                self.refusals += 1
                self._unclear = True
                continue
            self._unclear = False
            out = [*landed, *stored]
            if out:
                self._floor = max(self._floor, out[-1].seq)
            return out
        return None

    def _landed(self, batch: list[NewEvent]) -> list[Event]:
        """The events of ``batch`` (a prefix of it, in order) that a failed attempt stored after all."""
        if not batch:
            return []
        wanted = [(item.stream, item.type, check_payload(item.payload).decode("utf-8")) for item in batch]
        found: list[Event] = []
        for event in self.ledger.events(self._floor):
            if len(found) < len(wanted) and (event.stream, event.type, event.payload_json) == wanted[len(found)]:
                found.append(event)
        return found


def pending_events(items: Sequence[NewEvent], after: int) -> list[Event]:
    """``items`` as the fold reads stored events: seqs from ``after + 1``, the time now, no hash or signature."""
    now = format_time()
    return [Event(ledger="", seq=after + index, prev="", stream=item.stream, type=item.type, time=now, actor="",
                  payload_json=check_payload(item.payload).decode("utf-8"), hash="", sig="")
            for index, item in enumerate(items, 1)]
