"""What the ledger may sign: its tree and events, established from the events themselves.

Everything tally signs with a ledger key (a checkpoint, a receipt) rests on
``trusted_tree(ledger)``, never on a stored row it did not re-check:

- **anchor**: the newest stored checkpoint at or below the size, if any. Its note is
  verified under a log key of the key ring, and the ring itself is rebuilt from the key
  events of the prefix, each re-hashed, signature-checked (``verify.check_event``) and
  proven to be in the checkpoint's tree by an inclusion proof against its signed root.
  The frontier of the prefix comes from the stored subtree hashes only if they give that
  signed root; otherwise it is recomputed from the events. Without a stored checkpoint
  the anchor is the genesis: every event is verified (rules 1-7 and 9).
- **suffix**: every event after the anchor is verified like ``tally verify`` does (hash,
  chain, actor, signature, key events) and its leaf appended to the frontier, so the
  root at the size is computed from leaves, not read from storage.

``trusted_event(ledger, seq, tree)`` re-checks one event (its body and hash, its
signer's key and role at its seq, its signature) and proves it is in the tree;
``proven_inclusion`` returns the inclusion path only after verifying it against the
trusted root. A change to storage made without the key (an edited payload, a rebuilt
``merkle_nodes`` table, deleted checkpoint rows, an event signed with a witness-only
key) therefore yields a refusal (``VerificationError`` naming the seq and rule), never a
signature over something the events do not say.

What it costs (``bench/trusted.py``): with a stored checkpoint, one key-event inclusion
proof per key event and a full check of the events since the checkpoint; without one, a
full verification of the ledger.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import merkle
from . import note as notes
from .checkpoint import log_verifiers, open_checkpoint, parse_checkpoint
from .errors import FormatError, StorageError, TallyError, VerificationError
from .keys import KEY_EVENT_TYPES, KeyInfo, KeyRing
from .since import proven_key_ring
from .verify import VerifyStart, check_body, check_event, check_signature, verify_events

if TYPE_CHECKING:
    from .event import Event
    from .store import Ledger

__all__ = ["TrustedTree", "key_at", "proven_inclusion", "trusted_event", "trusted_tree"]


@dataclass(frozen=True)
class TrustedTree:
    """The ledger's first ``size`` events as verified: their root, head, key ring and frontier."""

    size: int
    root: bytes
    head: str
    ring: KeyRing
    frontier: merkle.Frontier
    anchor: int  # size of the stored checkpoint it was anchored on (0: the genesis)


def _fail(message: str, seq: int | None, rule: int | str) -> VerificationError:
    return VerificationError(f"refusing to sign: {message}", seq=seq, rule=rule)


def key_at(ring: KeyRing, actor: str, seq: int) -> KeyInfo:
    """The signer's key as the ring stood at ``seq`` (rule 5): added before it (or by the genesis), not revoked
    before it, and holding a role that signs events (root or signer; never a witness-only key)."""
    info = ring.keys.get(actor)
    if info is None or (info.added_seq >= seq and not (info.added_seq == 1 and seq == 1)):
        raise _fail(f"actor {actor[:16]} is not a key known at seq {seq}", seq, 5)
    if info.revoked_at_seq is not None and info.revoked_at_seq < seq:
        raise _fail(f"actor {info.name} was revoked at seq {info.revoked_at_seq}", seq, 5)
    if not info.signs_events:
        raise _fail(f"actor {info.name} has roles {list(info.roles)}: events are signed by root or signer keys only",
                    seq, 5)
    return info


def _anchor(ledger: Ledger, size: int, origin: str) -> tuple[int, bytes, str, KeyRing, merkle.Frontier] | None:
    """The newest stored checkpoint at or below ``size``, proven: (size, root, head, ring, frontier)."""
    stored = [(s, n) for s, n in ledger.checkpoint_notes() if s <= size]
    if not stored:
        return None
    cp_size, message = stored[-1]
    try:
        checkpoint = parse_checkpoint(notes.parse_note(message).text)
    except FormatError as exc:
        raise _fail(f"the stored checkpoint at size {cp_size} is malformed ({exc})", cp_size, 8) from None
    if checkpoint.size != cp_size or checkpoint.origin != origin:
        raise _fail(f"the stored checkpoint at size {cp_size} is for {checkpoint.origin!r} size {checkpoint.size}",
                    cp_size, 8)
    root = checkpoint.root
    last = ledger.get(cp_size)
    try:
        ring = proven_key_ring(ledger, cp_size, root)
        merkle.verify_inclusion(cp_size - 1, cp_size, merkle.hash_leaf(_hash_of(last)),
                                ledger.inclusion_proof(cp_size - 1, cp_size), root)
        frontier = _stored_frontier(ledger, cp_size, root)
    except (VerificationError, StorageError):
        frontier = None
    if frontier is None:
        # The stored subtree hashes do not prove the prefix: the events themselves must. Every
        # key event is checked in order, and the root of all the prefix's leaves (from their
        # recomputed hashes) must be the signed root.
        ring = _checked_key_ring(ledger, cp_size)
        frontier = _frontier_of(ledger, cp_size)
        if frontier.root() != root:
            raise _fail(f"history rewritten: the first {cp_size} events do not have the root of the checkpoint "
                        f"signed at size {cp_size}", cp_size, 8)
    try:
        open_checkpoint(message, log_verifiers(origin, ring, cp_size), threshold=0, origin=origin)
    except TallyError as exc:
        raise _fail(f"the stored checkpoint at size {cp_size} does not verify ({exc})", cp_size, 8) from None
    return cp_size, root, last.hash, ring, frontier


def _checked_key_ring(ledger: Ledger, size: int) -> KeyRing:
    """The key ring after event ``size`` from its key events, each checked (hash, signer, signature)."""
    ring = KeyRing()
    for event in ledger.events(types=sorted(KEY_EVENT_TYPES), until=size):
        try:
            check_event(ring, event)
        except VerificationError as exc:
            raise _fail(str(exc.args[0]), exc.seq, exc.rule or 7) from None
    return ring


def _hash_of(event: Event) -> bytes:
    digest = event.computed_hash()
    if digest != event.hash:
        raise _fail("recomputed hash differs from the stored hash", event.seq, 4)
    return bytes.fromhex(digest)


def _stored_frontier(ledger: Ledger, size: int, root: bytes) -> merkle.Frontier | None:
    nodes = merkle.frontier_nodes(size)
    try:
        hashes = ledger.fetch_nodes(nodes)
    except StorageError:
        return None
    frontier = merkle.Frontier(size, [(level, hashes[(level, index)]) for level, index in nodes])
    return frontier if frontier.root() == root else None


def _frontier_of(ledger: Ledger, size: int) -> merkle.Frontier:
    frontier = merkle.Frontier()
    for event in ledger.events(0, until=size):
        frontier.append(merkle.hash_leaf(_hash_of(event)))
    return frontier


def trusted_tree(ledger: Ledger, size: int | None = None) -> TrustedTree:
    """The tree of the ledger's first ``size`` events (default: all), from the events themselves."""
    current = ledger.size()
    size = current if size is None else size
    if not 1 <= size <= current:
        raise FormatError(f"size {size} is not between 1 and the ledger size {current}")
    info = ledger.info
    anchor = _anchor(ledger, size, info.origin)
    start = None
    if anchor is not None:
        cp_size, _root, head, ring, frontier = anchor
        if cp_size == size:
            return TrustedTree(size, frontier.root(), head, ring, frontier, cp_size)
        start = VerifyStart(cp_size, head, info.ledger_id, info.origin, ring, frontier)
    try:
        verified = verify_events(ledger.events(start.size if start else 0, until=size), start=start)
    except VerificationError as exc:
        raise _fail(str(exc.args[0]) if exc.args else str(exc), exc.seq, exc.rule or "verify") from None
    if verified.size != size or verified.frontier is None:
        raise _fail(f"the ledger ends at seq {verified.size}, not {size}", verified.size + 1, 1)
    return TrustedTree(size, verified.root, verified.head, verified.keys, verified.frontier,
                       start.size if start else 0)


def trusted_event(ledger: Ledger, seq: int, tree: TrustedTree) -> Event:
    """Event ``seq`` re-checked against ``tree``: hash, signer at its seq, signature, membership."""
    if not 1 <= seq <= tree.size:
        raise FormatError(f"seq {seq} is not in the verified tree of size {tree.size}")
    event = ledger.get(seq)
    try:
        digest = check_body(event)
    except VerificationError as exc:
        raise _fail(str(exc.args[0]), seq, 4) from None
    key = key_at(tree.ring, event.actor, seq)
    try:
        check_signature(event, key, digest)
    except VerificationError as exc:
        raise _fail(str(exc.args[0]), seq, 6) from None
    proven_inclusion(ledger, seq, tree.size, tree.root, digest)
    return event


def proven_inclusion(ledger: Ledger, seq: int, size: int, root: bytes, digest: bytes) -> list[bytes]:
    """The inclusion path of event ``seq`` (raw hash ``digest``) in the tree of ``size`` with ``root``,
    verified before it is returned (the stored subtree hashes are not trusted on their own)."""
    try:
        proof = ledger.inclusion_proof(seq - 1, size)
        merkle.verify_inclusion(seq - 1, size, merkle.hash_leaf(digest), proof, root)
    except (VerificationError, StorageError) as exc:
        raise _fail(f"event {seq} cannot be proved in the tree of size {size} from the stored subtree hashes "
                    f"({exc.args[0] if exc.args else exc})", seq, "cache") from None
    return proof
