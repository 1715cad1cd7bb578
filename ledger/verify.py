"""Ledger verification: the verification rules of ``docs/format.md``, in order, per event.

1. seq is contiguous from 1;  2. ``prev`` is the previous event's hash;  3. one ledger
id throughout;  4. the body is well formed (``v`` 1; ``ledger``, ``stream``, ``type`` and
``time`` as the format writes them: ``event.body_problem``) and its recomputed hash equals
``hash``;  5. ``actor`` is a key known at that seq, not revoked at an earlier seq, and
holding a role that signs events (root or signer: a witness key only cosigns
checkpoints);  6. ``sig`` verifies under that key;
7. key events are signed by a root key;  8. every checkpoint verifies and commits to
the Merkle root of its first ``size`` events (through ``CheckpointCheck``);  9. a
pinned root key is named as root by the genesis.

``verify_events`` returns a ``VerifiedLedger`` or raises ``VerificationError`` with the
first failing seq and rule. It reads events once, in order, and keeps O(log n) state
besides the key ring; signatures can be checked on several threads (``jobs``; the
Ed25519 verifier releases the GIL), the first failure still being the lowest seq.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from json.encoder import encode_basestring
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from . import merkle
from .errors import FormatError, VerificationError
from .event import BODY_TEMPLATE, GENESIS_PREV, SIGNING_PREFIX, Event, body_problem
from .keys import KEY_EVENT_TYPES, KeyInfo, KeyRing

__all__ = ["VerifiedLedger", "VerifyStart", "check_body", "check_chain", "check_event", "check_role", "check_signature",
           "verify_events"]

CHUNK = 2048


@dataclass(frozen=True)
class VerifiedLedger:
    """What verification established about a ledger (or a suffix of it)."""

    size: int
    head: str
    ledger_id: str
    origin: str
    keys: KeyRing
    root: bytes
    first_seq: int = 1
    checkpoints: tuple[int, ...] = ()
    frontier: merkle.Frontier | None = None  # the tree's right edge after the last event


@dataclass
class VerifyStart:
    """Where to resume verification: the state after ``size`` trusted events.

    Used by ``verify --since CHECKPOINT``: the prefix is proved by a consistency proof,
    its key ring is rebuilt from its (signature-checked) key events.
    """

    size: int
    head: str
    ledger_id: str
    origin: str
    keys: KeyRing
    frontier: merkle.Frontier


# A hook called whenever the walk has verified ``size`` events; rule 8 lives there.
SizeHook = Callable[[int, merkle.Frontier, KeyRing], None]
# A hook given the complete subtrees (level >= 1, index, hash) each verified event finishes.
NodesHook = Callable[[list[tuple[int, int, bytes]]], None]


@dataclass
class _Walk:
    root_key: str | None
    jobs: int
    on_size: SizeHook | None
    checkpoint_sizes: frozenset[int]
    on_nodes: NodesHook | None = None
    expected: int = 1
    prev: str = GENESIS_PREV
    ledger_id: str | None = None
    origin: str = ""
    ring: KeyRing = field(default_factory=KeyRing)
    frontier: merkle.Frontier = field(default_factory=merkle.Frontier)
    pending: list[tuple[int, bytes, bytes, bytes]] = field(default_factory=list)
    pool: ThreadPoolExecutor | None = None
    checked: list[int] = field(default_factory=list)


def _check_signatures(batch: list[tuple[int, bytes, bytes, bytes]]) -> tuple[int, str] | None:
    """First (seq, reason) whose signature fails in ``batch``, else None."""
    keys: dict[bytes, Ed25519PublicKey] = {}
    for seq, public_raw, signature, digest in batch:
        key = keys.get(public_raw)
        if key is None:
            key = keys[public_raw] = Ed25519PublicKey.from_public_bytes(public_raw)
        try:
            key.verify(signature, SIGNING_PREFIX + digest)
        except InvalidSignature:
            return seq, "signature does not verify under the actor's key"
    return None


def _fail(seq: int, rule: int, message: str) -> VerificationError:
    return VerificationError(message, seq=seq, rule=rule)


def verify_events(
    events: Iterable[Event],
    *,
    root_key: str | None = None,
    jobs: int = 1,
    start: VerifyStart | None = None,
    checkpoint_sizes: Iterable[int] = (),
    on_size: SizeHook | None = None,
    on_nodes: NodesHook | None = None,
) -> VerifiedLedger:
    """Verify ``events`` (seq order, from 1 or from ``start``) against rules 1-7 and 9.

    ``on_size(size, frontier, ring)`` is called after event ``size`` for every size in
    ``checkpoint_sizes``; it raises ``VerificationError`` (rule 8) when a checkpoint at
    that size does not hold. ``on_nodes(nodes)`` receives the complete subtrees of the
    tree each event finishes (for checking a store's cached subtree hashes).
    """
    walk = _Walk(root_key=root_key, jobs=max(1, jobs), on_size=on_size,
                 checkpoint_sizes=frozenset(checkpoint_sizes), on_nodes=on_nodes)
    if start is not None:
        walk.expected, walk.prev = start.size + 1, start.head
        walk.ledger_id, walk.origin = start.ledger_id, start.origin
        walk.ring, walk.frontier = start.keys, start.frontier.copy()
    if walk.jobs > 1:
        walk.pool = ThreadPoolExecutor(max_workers=walk.jobs - 1)
    chain_error: VerificationError | None = None
    sig_error: VerificationError | None = None
    try:
        try:
            for event in events:
                _step(walk, event)
        except VerificationError as error:
            chain_error = error
        try:
            _flush(walk)  # signatures of events before a chain failure still count
        except VerificationError as error:
            sig_error = error
    finally:
        if walk.pool is not None:
            walk.pool.shutdown(wait=True, cancel_futures=True)
    errors = [e for e in (chain_error, sig_error) if e is not None]
    if errors:
        raise min(errors, key=lambda e: (e.seq or 0, e.rule if isinstance(e.rule, int) else 99))
    if walk.expected == 1:
        raise VerificationError("the ledger has no events", seq=1, rule=1)
    beyond = [size for size in walk.checkpoint_sizes if size >= walk.expected]
    if beyond:
        raise VerificationError(
            f"a checkpoint covers {max(beyond)} events but the ledger ends at seq {walk.expected - 1} "
            "(truncated history)", seq=walk.expected, rule=8)
    return VerifiedLedger(
        size=walk.expected - 1,
        head=walk.prev,
        ledger_id=walk.ledger_id or "",
        origin=walk.origin,
        keys=walk.ring,
        root=walk.frontier.root(),
        first_seq=start.size + 1 if start else 1,
        checkpoints=tuple(walk.checked),
        frontier=walk.frontier,
    )


def _digest(event: Event) -> bytes:
    """Rule 4: the body is well formed and its recomputed hash equals ``hash``; returns the hash."""
    if event.v != 1:
        raise _fail(event.seq, 4, f"unsupported event version {event.v}")
    problem = body_problem(event)
    if problem is not None:
        raise _fail(event.seq, 4, f"malformed body: {problem}")
    digest = hashlib.sha256(event.body()).digest()
    if digest.hex() != event.hash:
        raise _fail(event.seq, 4, "recomputed hash differs from the stored hash")
    return digest


def check_body(event: Event) -> bytes:
    """Rule 4 for one event (its body well formed, its hash recomputed); returns the raw hash."""
    return _digest(event)


def _actor_key(ring: KeyRing, event: Event) -> KeyInfo:
    """Rule 5: the actor is a key known at this seq, not revoked before it, and one that signs events."""
    seq = event.seq
    key = ring.keys.get(event.actor)
    if key is None:
        raise _fail(seq, 5, f"actor {event.actor[:16]} is not a key known at this seq")
    if key.revoked_at_seq is not None and key.revoked_at_seq < seq:
        raise _fail(seq, 5, f"actor {key.name} was revoked at seq {key.revoked_at_seq}")
    check_role(key, seq)
    return key


def check_role(key: KeyInfo, seq: int) -> None:
    """Rule 5, its role: only a root or signer key signs events (a witness key only cosigns checkpoints)."""
    if not key.signs_events:
        raise _fail(seq, 5, f"actor {key.name} has roles {list(key.roles)}: events are signed by root or signer "
                            "keys only (a witness key only cosigns checkpoints)")


def _signature(event: Event) -> bytes:
    """Rule 6, its shape: ``sig`` is the base64 of a 64-byte Ed25519 signature."""
    try:
        signature = base64.b64decode(event.sig, validate=True)
    except ValueError:
        raise _fail(event.seq, 6, "sig is not base64") from None
    if len(signature) != 64:
        raise _fail(event.seq, 6, "sig is not a 64-byte Ed25519 signature")
    return signature


def _key_event(ring: KeyRing, event: Event, key: KeyInfo) -> None:
    """Rule 7: a key event is signed by a root key; it changes the ring from the next seq on."""
    if event.type not in KEY_EVENT_TYPES:
        return
    if "root" not in key.roles:
        raise _fail(event.seq, 7, f"{event.type} signed by {key.name}, which is not a root key")
    if event.seq > 1:
        try:
            ring.apply(event.seq, event.type, _payload(event))
        except FormatError as exc:
            raise _fail(event.seq, 7, f"malformed key event: {exc}") from None


def check_signature(event: Event, key: KeyInfo, digest: bytes) -> None:
    """Rule 6 for one event whose hash is ``digest``: its signature verifies under ``key``."""
    failure = _check_signatures([(event.seq, key.public_raw, _signature(event), digest)])
    if failure:
        raise _fail(failure[0], 6, failure[1])


def check_event(ring: KeyRing, event: Event, *, root_key: str | None = None) -> bytes:
    """Rules 4-7 (and 9 at the genesis) for one event, its signature included; returns its digest.

    ``ring`` is the key ring as it stands before the event (empty before the genesis)
    and is updated by key events. This is the per-event check of ``verify_events``;
    ``verify --since`` runs it on the key events of a proven prefix.
    """
    digest = _digest(event)
    if event.seq == 1:
        _apply_genesis(ring, event, root_key)
    elif event.type == "ledger.created":
        raise _fail(event.seq, 7, "a second ledger.created event")
    key = _actor_key(ring, event)
    check_signature(event, key, digest)
    _key_event(ring, event, key)
    return digest


def _step(walk: _Walk, event: Event) -> None:
    seq = event.seq
    if seq != walk.expected:
        raise _fail(walk.expected, 1, f"expected seq {walk.expected}, found {seq}")
    if event.prev != walk.prev:
        raise _fail(seq, 2, "prev is not the hash of the previous event")
    if walk.ledger_id is None:
        walk.ledger_id = event.ledger
    elif event.ledger != walk.ledger_id:
        raise _fail(seq, 3, f"ledger id {event.ledger} differs from {walk.ledger_id}")
    digest = _digest(event)
    if seq == 1:
        walk.origin = _apply_genesis(walk.ring, event, walk.root_key)
    elif event.type == "ledger.created":
        raise _fail(seq, 7, "a second ledger.created event")
    key = _actor_key(walk.ring, event)
    item = (seq, key.public_raw, _signature(event), digest)
    if walk.pool is None:
        failure = _check_signatures([item])
        if failure:
            raise _fail(failure[0], 6, failure[1])
    else:
        walk.pending.append(item)
        if len(walk.pending) >= CHUNK:
            _flush(walk)
    _key_event(walk.ring, event, key)
    made = walk.frontier.append(merkle.hash_leaf(digest))
    if made and walk.on_nodes is not None:
        walk.on_nodes(made)
    walk.expected = seq + 1
    walk.prev = event.hash
    if seq in walk.checkpoint_sizes and walk.on_size is not None:
        _flush(walk)  # a checkpoint is trusted only over verified signatures
        walk.on_size(seq, walk.frontier, walk.ring)
        walk.checked.append(seq)


def _apply_genesis(ring: KeyRing, event: Event, root_key: str | None) -> str:
    """The genesis (rules 7 and 9): its keys enter the ring; returns the ledger's origin."""
    if event.type != "ledger.created" or event.stream != "ledger":
        raise _fail(1, 7, "seq 1 is not a ledger.created event in stream 'ledger'")
    payload = _payload(event)
    try:
        ring.apply(1, "ledger.created", payload)
    except FormatError as exc:
        raise _fail(1, 7, f"malformed genesis: {exc}") from None
    origin = payload.get("origin")
    if not isinstance(origin, str) or not origin:
        raise _fail(1, 7, "genesis has no origin")
    if root_key is not None:
        pinned = ring.keys.get(root_key)
        if pinned is None or "root" not in pinned.roles:
            raise _fail(1, 9, f"genesis does not name the pinned key {root_key[:16]} as root")
    return origin


def _payload(event: Event) -> dict[str, Any]:
    try:
        return event.payload
    except (ValueError, FormatError):
        raise _fail(event.seq, 4, "payload is not a JSON object") from None


def _flush(walk: _Walk) -> None:
    """Check the pending signatures now: ``jobs - 1`` pool threads and this one share them.

    The chain walk holds the GIL; the Ed25519 verifier releases it, so the threads run
    in parallel while they verify. Results are checked in seq order, so the failure
    raised is the lowest failing seq among everything walked so far.
    """
    if walk.pool is None or not walk.pending:
        return
    batch, walk.pending = walk.pending, []
    step = -(-len(batch) // walk.jobs)
    parts = [batch[offset:offset + step] for offset in range(0, len(batch), step)]
    futures = [walk.pool.submit(_check_signatures, part) for part in parts[1:]]
    results = [_check_signatures(parts[0])] + [future.result() for future in futures]
    for failure in results:
        if failure:
            raise _fail(failure[0], 6, failure[1])


def check_chain(
    batches: Iterable[Sequence[tuple[Any, ...]]], frontier: merkle.Frontier | None = None
) -> tuple[int, str]:
    """Replay check without signatures (rules 1-3 and rule 4's hash) over row batches from ``Ledger.rows``.

    The members' syntax (the rest of rule 4) is not checked here: this rebuilds the tree
    of a prefix already proven by a checkpoint (``verify --since``), as fast as hashing.

    Returns (size, head). Works on raw row tuples, in ``Event`` field order. With a
    ``frontier``, every event's leaf is appended to it (the Merkle tree of the events).
    """
    expected, prev, ledger_id = 1, GENESIS_PREV, None
    sha256 = hashlib.sha256
    js = encode_basestring
    template = BODY_TEMPLATE
    for rows in batches:
        for ledger, seq, prev_hash, stream, type_, time, actor, payload, hash_hex, _sig, v in rows:
            if seq != expected:
                raise _fail(expected, 1, f"expected seq {expected}, found {seq}")
            if prev_hash != prev:
                raise _fail(seq, 2, "prev is not the hash of the previous event")
            if ledger != ledger_id:
                if ledger_id is not None:
                    raise _fail(seq, 3, f"ledger id {ledger} differs from {ledger_id}")
                ledger_id = ledger
            if v != 1:
                raise _fail(seq, 4, f"unsupported event version {v!r}")
            body = template % (js(actor), js(ledger), payload, js(prev_hash), seq, js(stream), js(time), js(type_), v)
            digest = sha256(body.encode("utf-8")).digest()
            if digest.hex() != hash_hex:
                raise _fail(seq, 4, "recomputed hash differs from the stored hash")
            if frontier is not None:
                frontier.append(sha256(b"\x00" + digest).digest())
            prev = hash_hex
            expected += 1
    return expected - 1, prev
