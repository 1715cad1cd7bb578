"""Verifying a stored ledger: its events (every rule), its checkpoints (rule 8) and its blobs.

``verify_ledger(book)`` is what ``tally verify`` runs: ``verify_events`` over the
stored events, rule 8 for every stored checkpoint, every stored blob against its
digest and every referenced blob present.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from .checkpoint import rule8_hook
from .errors import VerificationError
from .event import Event
from .since import since_start
from .verify import VerifiedLedger, verify_events

__all__ = ["LedgerReport", "referenced_blobs", "verify_ledger", "verify_stored_blobs"]

_BLOB_MARK = '"blob":"sha256:'


def _blob_refs(value: Any, out: set[str]) -> None:
    if isinstance(value, dict):
        ref = value.get("blob")
        if isinstance(ref, str) and ref.startswith("sha256:"):
            out.add(ref[len("sha256:"):])
        for item in value.values():
            _blob_refs(item, out)
    elif isinstance(value, list):
        for item in value:
            _blob_refs(item, out)


def referenced_blobs(event: Event) -> set[str]:
    """The blob digests an event's payload refers to."""
    refs: set[str] = set()
    if _BLOB_MARK in event.payload_json:
        _blob_refs(event.payload, refs)
    return refs


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
            if _BLOB_MARK in event.payload_json:
                references.append((event.seq, referenced_blobs(event)))
            yield event

    verified = verify_events(tap(book.events(start.size if start else 0)), root_key=root_key, jobs=jobs,
                             start=start, checkpoint_sizes=checkpoints, on_size=hook)
    blobs = verify_stored_blobs(book, references)
    return LedgerReport(verified, blobs, since_size)


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
