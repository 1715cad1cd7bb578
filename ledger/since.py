"""``tally verify --since CHECKPOINT``: the current ledger extends a checkpoint an auditor saved.

``prove_since`` proves that the ledger's first ``size`` events are the saved tree (else
"truncated" or "rewritten" history, rule 8); ``since_start`` then rebuilds the key
ring of that prefix from its key events, each proven to be in the saved tree and
checked with the same per-event rules as every other event (``verify.check_event``),
so that ``verify_events`` can resume after it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from . import merkle
from . import note as notes
from .checkpoint import Checkpoint, KeySpec, _reason, log_verifiers, open_checkpoint, parse_checkpoint
from .errors import FormatError, StorageError, VerificationError
from .event import GENESIS_PREV
from .keys import KEY_EVENT_TYPES, KeyRing
from .strictfile import read_limited
from .verify import VerifyStart, check_chain, check_event

if TYPE_CHECKING:
    from .store import Ledger

__all__ = ["SincePoint", "prove_since", "proven_key_ring", "since_start"]

MAX_SAVED_CHECKPOINT_BYTES = 1 << 20  # a checkpoint note, with every cosignature a witness set adds


@dataclass(frozen=True)
class SincePoint:
    """What ``prove_since`` established: the ledger's first ``size`` events are the saved tree.

    ``head`` is the hash of event ``size`` and ``frontier`` the tree's right edge at
    ``size`` (its root is the saved root): verification resumes at ``size + 1``.
    """

    size: int
    root: bytes
    head: str
    frontier: merkle.Frontier
    checkpoint: Checkpoint
    current_size: int


def prove_since(ledger: Ledger, saved: str, keys: Iterable[KeySpec] | None = None) -> SincePoint:
    """Prove that ``ledger`` extends the checkpoint an auditor saved earlier.

    The saved note must be a checkpoint of this ledger's origin, signed by one of
    ``keys`` (default: the ledger's ``root``/``signer`` keys, from its key events proven
    in the saved tree). Raises
    ``VerificationError(rule=8)`` naming "truncated" history when the ledger is now
    smaller than the saved tree, and "rewritten" history when its first ``size`` events
    no longer give the saved root (the stored tree at that size, the saved tree's last
    leaf against the stored event, and a consistency proof to the current size).
    """
    origin = ledger.info.origin
    parsed = notes.parse_note(saved)
    saved_cp = parse_checkpoint(parsed.text)
    if saved_cp.origin != origin:
        raise VerificationError(f"the saved checkpoint is for {saved_cp.origin!r}, this ledger is {origin!r}", rule=8)
    size, root = saved_cp.size, saved_cp.root
    current = ledger.size()
    if keys is not None:
        trusted: list[KeySpec] = list(keys)
    else:  # the ledger's log keys, from its key events (never from the keys cache)
        ring = proven_key_ring(ledger, size, root) if 0 < size <= current else _checked_key_ring(ledger)
        trusted = list(log_verifiers(origin, ring))
    open_checkpoint(saved, trusted, threshold=0, origin=origin)
    if current < size:
        raise VerificationError(
            f"history truncated: the ledger has {current} events, the saved checkpoint covers {size}",
            seq=current + 1, rule=8,
        )
    if size == 0:
        return SincePoint(0, merkle.EMPTY_ROOT, GENESIS_PREV, merkle.Frontier(), saved_cp, current)

    def rewritten(detail: str) -> VerificationError:
        return VerificationError(f"history rewritten: {detail}", seq=size, rule=8)

    nodes = merkle.frontier_nodes(size)
    try:
        hashes = ledger.fetch_nodes(nodes)
    except StorageError as exc:
        raise rewritten(f"the tree at size {size} cannot be rebuilt ({exc})") from None
    frontier = merkle.Frontier(size, [(level, hashes[(level, index)]) for level, index in nodes])
    if frontier.root() != root:
        raise rewritten(f"the first {size} events no longer have the saved root")
    # The stored tree agrees; now the events themselves: re-hash every one of them
    # (no signatures: that is what the saved checkpoint vouches for) and rebuild the root.
    rebuilt = merkle.Frontier()
    try:
        check_chain(ledger.rows(0, until=size), rebuilt)
    except VerificationError as exc:
        raise VerificationError(f"history rewritten: {exc.args[0]}", seq=exc.seq, rule=exc.rule) from None
    if rebuilt.size != size or rebuilt.root() != root:
        raise rewritten(f"the first {size} stored events do not hash to the saved root")
    last = ledger.get(size)
    if last.computed_hash() != last.hash:
        raise rewritten(f"event {size} does not hash to its stored hash")
    try:
        merkle.verify_inclusion(size - 1, size, merkle.hash_leaf(last.raw_hash),
                                ledger.inclusion_proof(size - 1, size), root)
        if current > size:
            merkle.verify_consistency(size, current, root, ledger.root(current),
                                      ledger.consistency_proof(size, current))
    except (VerificationError, StorageError) as exc:
        raise rewritten(_reason(exc)) from None
    return SincePoint(size, root, last.hash, frontier, saved_cp, current)


def _checked_key_ring(ledger: Ledger) -> KeyRing:
    """The key ring of every key event, each checked (hash, signer, signature), none proven in a tree."""
    ring = KeyRing()
    for event in ledger.events(types=sorted(KEY_EVENT_TYPES)):
        check_event(ring, event)
    return ring


def proven_key_ring(ledger: Ledger, size: int, root: bytes) -> KeyRing:
    """The key ring after event ``size``, from key events proven to be in the tree of ``size`` with ``root``.

    Each key event is checked like every event (``verify.check_event``: its hash, its
    signer known and not revoked before it, its signature, root keys for key events)
    and must be included under ``root`` (its leaf from its recomputed hash). The ring
    never comes from the ``keys`` cache.
    """
    ring = KeyRing()
    for event in ledger.events(types=sorted(KEY_EVENT_TYPES), until=size):
        seq = event.seq
        digest = check_event(ring, event)
        try:
            proof = ledger.inclusion_proof(seq - 1, size)
            merkle.verify_inclusion(seq - 1, size, merkle.hash_leaf(digest), proof, root)
        except (VerificationError, StorageError, ValueError) as exc:
            raise VerificationError(f"history rewritten: key event {seq} is not in the tree of size {size} "
                                    f"({_reason(exc)})", seq=seq, rule=8) from None
    return ring


def since_start(ledger: Ledger, saved: str | Path, keys: Iterable[KeySpec] | None = None) -> VerifyStart:
    """``verify --since``: where ``verify_events`` resumes after an auditor's saved checkpoint.

    ``saved`` is the checkpoint note (or a path to it). Runs ``prove_since`` (raising
    "truncated" or "rewritten" history), then rebuilds the key ring of the first
    ``size`` events from their key events, each proven to be in the saved tree.
    """
    if isinstance(saved, Path):  # bounded, a regular file, never through a symlink
        data = read_limited(saved, "the saved checkpoint", MAX_SAVED_CHECKPOINT_BYTES)
        try:
            saved = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FormatError(f"cannot read the saved checkpoint: {exc}") from None
    point = prove_since(ledger, saved, keys)
    info = ledger.info
    if point.size == 0:
        return VerifyStart(0, GENESIS_PREV, info.ledger_id, info.origin, KeyRing(), merkle.Frontier())
    ring = proven_key_ring(ledger, point.size, point.root)
    return VerifyStart(point.size, point.head, info.ledger_id, info.origin, ring, point.frontier)
