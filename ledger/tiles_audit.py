"""Auditing a log from its tiles alone (``tally audit --tiles``, ``tally receipt verify --tiles``).

``audit_tiles`` checks, reading nothing but the static files:

1. the checkpoint: signed by a trusted log key (and cosigned by the policy's witnesses);
2. the tree (``full``): every full tile hashes to its hash in the level above, every
   entry bundle has exactly its tile's entries and each hashes to its level-0 hash, every
   event bundle's lines hash to their entries; then the root recomputed from the tiles is
   the checkpoint's (without ``full`` only the tiles on the right edge are read);
3. an inclusion proof (of ``seq``, default the last event) built from tiles, verified
   against the checkpoint's root by RFC 9162;
4. a consistency proof from a checkpoint saved earlier (``since``) built from tiles,
   verified from its root to the checkpoint's.

Every file is bounded (``ledger.tiles``); a tile of the wrong length, a missing one,
a bundle that does not parse or hash is a ``VerificationError`` naming it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from . import merkle
from .checkpoint import VerifiedCheckpoint, open_checkpoint
from .errors import FormatError, VerificationError
from .event import event_from_json
from .note import Verifier
from .strictjson import read_json
from .tiles import (
    HASHES_PER_TILE,
    MAX_CHECKPOINT_BYTES,
    MAX_ENTRY_BUNDLE_BYTES,
    MAX_EVENTS_BUNDLE_BYTES,
    TileReader,
    TileSource,
    entries_path,
    events_path,
    layout,
    parse_bundle,
    perfect_root,
)

__all__ = ["ReceiptInTiles", "TilesAudit", "audit_tiles", "entry_at", "receipt_in_tiles", "tiles_checkpoint"]


@dataclass(frozen=True)
class TilesAudit:
    """What an audit from tiles verified."""

    location: str
    checkpoint: VerifiedCheckpoint
    tiles: int
    bundles: int
    events: int
    inclusion: tuple[int, int] | None  # (seq, size)
    consistency: tuple[int, int] | None  # (old size, size)
    fetched: int

    def lines(self) -> list[str]:
        cp = self.checkpoint
        cosigned = f", {len(cp.witnesses)} witness cosignature(s)" if cp.witnesses else ""
        out = [f"OK tiles {self.location}: checkpoint {cp.origin} size {cp.size} signed by the log{cosigned}"]
        if self.tiles:
            out.append(f"OK tree: {self.tiles} tiles, {self.bundles} entry bundles and {self.events} events hash to "
                       "the checkpoint's root")
        if self.inclusion is not None:
            out.append(f"OK inclusion: event {self.inclusion[0]} is in the tree of size {self.inclusion[1]}")
        if self.consistency is not None:
            out.append(f"OK consistency: size {self.consistency[0]} is a prefix of size {self.consistency[1]}")
        else:
            out.append("consistency: not checked (give --since FILE, a checkpoint saved earlier)")
        return out

    def to_json(self) -> dict[str, Any]:
        return {"ok": True, "location": self.location, "checkpoint": self.checkpoint.to_json(),
                "tiles": self.tiles, "bundles": self.bundles, "events": self.events,
                "inclusion": None if self.inclusion is None else {"seq": self.inclusion[0], "size": self.inclusion[1]},
                "consistency": None if self.consistency is None else {"old": self.consistency[0],
                                                                      "new": self.consistency[1]},
                "files_read": self.fetched}


def tiles_checkpoint(source: TileSource, log_keys: Iterable[Verifier], witnesses: Iterable[Verifier] = (),
                     threshold: int | None = 0) -> VerifiedCheckpoint:
    """The checkpoint served with the tiles, verified."""
    data = source.get("checkpoint", MAX_CHECKPOINT_BYTES)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise VerificationError("tiles: the checkpoint is not UTF-8", rule="tiles") from None
    return open_checkpoint(text, list(log_keys), witnesses=list(witnesses), threshold=threshold)


def entry_at(source: TileSource, reader: TileReader, index: int) -> bytes:
    """Entry ``index`` from its bundle, checked to hash to its level-0 tile hash."""
    tile = index // HASHES_PER_TILE
    width = reader.width(0, tile)
    data = source.get(entries_path(tile, width), MAX_ENTRY_BUNDLE_BYTES)
    entries = parse_bundle(data, width)
    entry = entries[index % HASHES_PER_TILE]
    if merkle.hash_leaf(entry) != reader.tile(0, tile)[index % HASHES_PER_TILE]:
        raise VerificationError(f"tiles: entry {index} does not hash to its leaf in tile 0/{tile}", rule="tiles")
    return entry


def _check_tree(source: TileSource, reader: TileReader, with_events: bool) -> tuple[int, int, int]:
    size = reader.size
    tiles = bundles = events = 0
    for level, index, width in layout(size):
        hashes = reader.tile(level, index)
        tiles += 1
        if width == HASHES_PER_TILE and size // HASHES_PER_TILE ** (level + 1) > index:
            above = reader.tile(level + 1, index // HASHES_PER_TILE)[index % HASHES_PER_TILE]
            if perfect_root(hashes) != above:
                raise VerificationError(f"tiles: tile {level}/{index} does not hash to its entry in level "
                                        f"{level + 1}", rule="tiles")
        if level != 0:
            continue
        entries = parse_bundle(source.get(entries_path(index, width), MAX_ENTRY_BUNDLE_BYTES), width)
        for i, entry in enumerate(entries):
            if merkle.hash_leaf(entry) != hashes[i]:
                raise VerificationError(f"tiles: entry {index * HASHES_PER_TILE + i} of bundle {index} does not "
                                        "hash to its leaf", rule="tiles")
        bundles += 1
        if with_events:
            lines = parse_bundle(source.get(events_path(index, width), MAX_EVENTS_BUNDLE_BYTES), width, 4)
            for i, line in enumerate(lines):
                seq = index * HASHES_PER_TILE + i + 1
                try:
                    event = event_from_json(read_json(line, f"tiles: event {seq}"), f"tiles: event {seq}")
                except FormatError as exc:
                    raise VerificationError(str(exc), rule="tiles") from None
                if event.seq != seq or hashlib.sha256(event.body()).digest() != entries[i] or \
                        event.hash != entries[i].hex():
                    raise VerificationError(f"tiles: event {seq} does not hash to its entry", rule="tiles")
                events += 1
    return tiles, bundles, events


def audit_tiles(source: TileSource, log_keys: Iterable[Verifier], *, witnesses: Iterable[Verifier] = (),
                threshold: int | None = 0, since: str | None = None, seq: int | None = None, full: bool = True,
                with_events: bool = True) -> TilesAudit:
    """Verify the log served at ``source`` (see the module); ``VerificationError`` names the first failure."""
    keys = list(log_keys)
    checkpoint = tiles_checkpoint(source, keys, witnesses, threshold)
    size = checkpoint.size
    reader = TileReader(source, size)
    counts = (0, 0, 0)
    if full and size:
        counts = _check_tree(source, reader, with_events)
    if merkle.root_of_size(size, reader.fetch) != checkpoint.root:
        raise VerificationError("tiles: the root of the tiles is not the checkpoint's root", rule="tiles")
    inclusion = None
    if size:
        chosen = size if seq is None else seq
        if not 1 <= chosen <= size:
            raise FormatError(f"--seq {chosen} is not in the tree of size {size}")
        leaf = merkle.hash_leaf(entry_at(source, reader, chosen - 1))
        proof = merkle.inclusion_proof(chosen - 1, size, reader.fetch)
        merkle.verify_inclusion(chosen - 1, size, leaf, proof, checkpoint.root)
        inclusion = (chosen, size)
    consistency = None
    if since is not None:
        old = open_checkpoint(since, keys, threshold=0, origin=checkpoint.origin)
        if old.size > size:
            raise VerificationError(f"tiles: the saved checkpoint (size {old.size}) is larger than the served one "
                                    f"({size}): history truncated", rule="tiles")
        if old.size == size:
            if old.root != checkpoint.root:
                raise VerificationError(f"tiles: size {size} has another root than the saved checkpoint",
                                        rule="tiles")
        elif old.size:
            proof = merkle.consistency_proof(old.size, size, reader.fetch)
            merkle.verify_consistency(old.size, size, old.root, checkpoint.root, proof)
        consistency = (old.size, size)
    return TilesAudit(source.location, checkpoint, *counts, inclusion, consistency, source.fetched)


@dataclass(frozen=True)
class ReceiptInTiles:
    """A receipt's event found in the served log: its entry, an inclusion proof, a consistency proof."""

    location: str
    seq: int
    receipt_size: int
    checkpoint: VerifiedCheckpoint

    def line(self) -> str:
        return (f"OK tiles {self.location}: event {self.seq} is in the served tree of size {self.checkpoint.size}, "
                f"which extends the receipt's checkpoint (size {self.receipt_size})")


def receipt_in_tiles(source: TileSource, log_keys: Iterable[Verifier], *, seq: int, event_hash: str,
                     receipt_checkpoint: VerifiedCheckpoint) -> ReceiptInTiles:
    """Check a verified receipt against the served log: same origin, its checkpoint a prefix, its event there."""
    served = tiles_checkpoint(source, log_keys)
    if served.origin != receipt_checkpoint.origin:
        raise VerificationError(f"tiles: the served log is {served.origin!r}, the receipt's "
                                f"{receipt_checkpoint.origin!r}", rule="tiles")
    size, old = served.size, receipt_checkpoint.size
    if old > size:
        raise VerificationError(f"tiles: the served tree (size {size}) is smaller than the receipt's checkpoint "
                                f"(size {old}): history truncated", rule="tiles")
    reader = TileReader(source, size)
    if old == size:
        if receipt_checkpoint.root != served.root:
            raise VerificationError("tiles: the served checkpoint has another root at the receipt's size",
                                    rule="tiles")
    else:
        merkle.verify_consistency(old, size, receipt_checkpoint.root, served.root,
                                  merkle.consistency_proof(old, size, reader.fetch))
    entry = entry_at(source, reader, seq - 1)
    if entry.hex() != event_hash:
        raise VerificationError(f"tiles: entry {seq - 1} is not the receipt's event", rule="tiles")
    merkle.verify_inclusion(seq - 1, size, merkle.hash_leaf(entry), merkle.inclusion_proof(seq - 1, size, reader.fetch),
                            served.root)
    return ReceiptInTiles(source.location, seq, old, served)
