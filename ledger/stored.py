"""Verifying a stored ledger: its events (every rule), checkpoints (rule 8), blobs and caches.

``verify_ledger(book)`` is what ``tally verify`` runs: ``verify_events`` over the
stored events, rule 8 for every stored checkpoint, every stored blob against its
digest and every referenced blob present, and the derived caches against the events:
every stored Merkle subtree hash is the one the verified events give (and no other is
stored), and the ``keys`` table is the key ring of the key events (rule ``cache``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from .canonical import BLOB_MARK, blob_references
from .checkpoint import rule8_hook
from .errors import PayloadError, StorageError, VerificationError
from .event import Event
from .since import since_start
from .verify import VerifiedLedger, verify_events

__all__ = ["LedgerReport", "referenced_blobs", "verify_ledger", "verify_stored_blobs"]

def referenced_blobs(event: Event) -> set[str]:
    """The blob digests an event's payload refers to (a malformed reference is refused)."""
    if BLOB_MARK not in event.payload_json:
        return set()
    try:
        return set(blob_references(event.payload))
    except PayloadError as exc:
        raise VerificationError(str(exc), seq=event.seq, rule="blob") from None


@dataclass(frozen=True)
class LedgerReport:
    """The outcome of ``verify_ledger``: what was verified, with figures for printing."""

    verified: VerifiedLedger
    blobs_checked: int
    since: int | None

    def to_json(self) -> dict[str, Any]:
        v = self.verified
        return {
            "size": v.size, "head": v.head, "ledger": v.ledger_id, "origin": v.origin,
            "root": v.root.hex(), "checkpoints": list(v.checkpoints), "blobs": self.blobs_checked,
            "verified_from": v.first_seq if self.since is None else self.since + 1,
        }

    def summary(self) -> str:
        v = self.verified
        scope = f"events {self.since + 1}..{v.size} (1..{self.since} consistent with the checkpoint)" \
            if self.since is not None else f"{v.size} events"
        return (f"OK {scope} of ledger {v.ledger_id} ({v.origin}); head {v.head[:16]}, root {v.root.hex()[:16]}, "
                f"{len(v.checkpoints)} checkpoint(s), {self.blobs_checked} blob(s)")


def verify_ledger(book: Any, *, root_key: str | None = None, jobs: int = 1, since: Any = None) -> LedgerReport:
    """Verify a stored ledger (``ledger.store.Ledger``): events, checkpoints, blobs.

    ``since`` (a checkpoint an auditor kept: its note or a path) proves the prefix by
    consistency and verifies only the events after it.
    """
    checkpoints = dict(book.checkpoint_notes())
    hook = rule8_hook(checkpoints, book.info.origin) if checkpoints else None
    since_size: int | None = None
    start = None
    if since is not None:
        start = since_start(book, since)
        since_size = start.size
    references: list[tuple[int, set[str]]] = []

    def tap(events: Iterable[Event]) -> Iterator[Event]:
        for event in events:
            if BLOB_MARK in event.payload_json:
                references.append((event.seq, referenced_blobs(event)))
            yield event

    nodes = _NodeCheck(book)
    verified = verify_events(tap(book.events(start.size if start else 0)), root_key=root_key, jobs=jobs,
                             start=start, checkpoint_sizes=checkpoints, on_size=hook, on_nodes=nodes.add)
    nodes.flush()
    if start is None:
        nodes.check_count()
    check_key_cache(book, verified)
    blobs = verify_stored_blobs(book, references)
    return LedgerReport(verified, blobs, since_size)


class _NodeCheck:
    """Compares the subtree hashes the verified events give with the stored ones, in batches."""

    BATCH = 4096

    def __init__(self, book: Any) -> None:
        self.book = book
        self.pending: dict[tuple[int, int], bytes] = {}
        self.count = 0

    def add(self, made: list[tuple[int, int, bytes]]) -> None:
        for level, index, value in made:
            self.pending[(level, index)] = value
        if len(self.pending) >= self.BATCH:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        wanted = sorted(self.pending)
        try:
            stored = self.book.fetch_nodes(wanted)
        except StorageError as exc:
            raise VerificationError(f"stored Merkle tree: {exc}", rule="cache") from None
        for node in wanted:
            if stored[node] != self.pending[node]:
                level, index = node
                raise VerificationError(
                    f"stored Merkle subtree hash (level {level}, index {index}) is not the hash of events "
                    f"{index * 2**level + 1}..{(index + 1) * 2**level}", seq=(index + 1) * 2**level, rule="cache")
        self.count += len(wanted)
        self.pending = {}

    def check_count(self) -> None:
        stored = self.book.node_count()
        if stored != self.count:
            raise VerificationError(f"{stored} Merkle subtree hashes are stored, the events give {self.count}",
                                    rule="cache")


def check_key_cache(book: Any, verified: VerifiedLedger) -> None:
    """The ``keys`` table is exactly the key ring the verified key events give (rule ``cache``)."""
    cached = book.key_ring().keys
    derived = verified.keys.keys
    for kid in sorted(set(cached) | set(derived)):
        if cached.get(kid) != derived.get(kid):
            what = "is not in the key events" if kid not in derived else \
                "is missing from the keys table" if kid not in cached else "differs from its key events"
            raise VerificationError(f"cached key {kid[:16]} {what}", rule="cache")


def verify_stored_blobs(book: Any, references: Iterable[tuple[int, set[str]]]) -> int:
    """Check every stored blob against its digest and that every referenced blob is present."""
    digests = book.blob_digests()
    for sha in sorted(digests):
        blob = book.blob(sha)
        if blob is None or hashlib.sha256(blob.data).hexdigest() != sha:
            raise VerificationError(f"blob {sha[:16]} does not match its digest", rule="blob")
    for seq, refs in references:
        missing = sorted(refs - digests)
        if missing:
            raise VerificationError(f"referenced blob {missing[0][:16]} is absent", seq=seq, rule="blob")
    return len(digests)
