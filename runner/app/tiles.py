"""Static tiles: publish the ledger's tree as C2SP tlog-tiles, audit a log and check a receipt from tiles alone."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ledger import FormatError

from .files import read_text
from .session import Session

if TYPE_CHECKING:
    from ledger.checkpoint import VerifiedCheckpoint
    from ledger.note import Verifier
    from ledger.tiles import Published
    from ledger.tiles_audit import ReceiptInTiles, TilesAudit

__all__ = ["audit_from_tiles", "publish_tiles", "receipt_in_served_tiles"]


def publish_tiles(session: Session, out: Path, *, checkpoint_file: Path | None = None,
                  events: bool = True) -> Published:
    """Write the tiles of the newest stored checkpoint (or ``checkpoint_file``, e.g. cosigned) into ``out``."""
    from ledger import merkle
    from ledger.checkpoint import stored_checkpoints
    from ledger.tiles import publish

    from .receipts import _cosigned_checkpoint

    book = session.ledger()
    if checkpoint_file is not None:
        note = _cosigned_checkpoint(book, checkpoint_file, 1).note
    else:
        stored = stored_checkpoints(book)
        if not stored:
            raise FormatError("no checkpoint stored yet; run `tally checkpoint` first")
        note = stored[-1].note
    from ledger.checkpoint import parse_checkpoint
    from ledger.note import parse_note

    size = parse_checkpoint(parse_note(note).text).size
    raw: list[bytes] = []
    for rows in book.rows(0, until=size, batch=20_000):
        raw += [bytes.fromhex(row[8]) for row in rows]  # Event field order: ledger, seq, prev, ..., hash, sig
    leaves = [merkle.hash_leaf(h) for h in raw]

    def entries(start: int, end: int) -> list[bytes]:
        return raw[start:end]

    def lines(start: int, end: int) -> list[bytes]:
        return [e.line().encode("utf-8") for e in book.events(start, until=end, batch=end - start)]

    return publish(out, leaves, note, entries, lines if events else None)


def _keys(vkeys: list[str]) -> tuple[list[Verifier], list[Verifier]]:
    from .files import read_vkeys

    parsed = read_vkeys(vkeys)  # inline vkeys or files of them
    log = [k for k in parsed if not k.is_cosigner]
    if not log:
        raise FormatError("--tiles needs the log's vkey (--vkey)")
    return log, [k for k in parsed if k.is_cosigner]


def audit_from_tiles(location: str, vkeys: list[str], *, witness_threshold: int = 0, since: Path | None = None,
                     seq: int | None = None, full: bool = True, timeout: float = 10.0) -> TilesAudit:
    """Audit the log served at ``location`` (a URL or a directory) from its tiles alone."""
    from ledger.tiles import MAX_CHECKPOINT_BYTES, TileSource
    from ledger.tiles_audit import audit_tiles

    log, witnesses = _keys(vkeys)
    saved = read_text(since, "checkpoint", MAX_CHECKPOINT_BYTES) if since is not None else None
    source = TileSource(location, timeout=timeout)
    try:
        return audit_tiles(source, log, witnesses=witnesses, threshold=witness_threshold, since=saved, seq=seq,
                           full=full)
    finally:
        source.close()


def receipt_in_served_tiles(location: str, vkeys: list[str], *, seq: int, event_hash: str,
                            receipt_checkpoint: VerifiedCheckpoint, timeout: float = 10.0) -> ReceiptInTiles:
    """A verified receipt's event in the log served at ``location``, proven from tiles alone."""
    from ledger.tiles import TileSource
    from ledger.tiles_audit import receipt_in_tiles

    log, _ = _keys(vkeys)
    source = TileSource(location, timeout=timeout)
    try:
        return receipt_in_tiles(source, log, seq=seq, event_hash=event_hash, receipt_checkpoint=receipt_checkpoint)
    finally:
        source.close()
