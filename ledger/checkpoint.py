"""C2SP checkpoints of the ledger's Merkle tree (``docs/format.md``: rule 8, checkpoints).

A checkpoint is a signed note whose text is::

    <origin>\\n<tree size>\\n<base64 root hash>\\n[<extension line>\\n]*

signed by a ledger key (role ``root`` or ``signer``) under the key name = the ledger's
origin. What lives here:

- ``Checkpoint`` / ``parse_checkpoint``: the note text, parsed strictly;
- ``open_checkpoint`` / ``verify_checkpoint``: verify a checkpoint note against log
  keys (vkeys or raw public keys) and a k-of-n witness policy, offline;
- ``verify_ledger_checkpoint`` / ``rule8_hook``: rule 8 of ``tally verify`` and
  ``tally audit`` (the checkpoint verifies under a key known at its size and commits
  to the Merkle root the verifier computed);
- ``ConsistencyProof``: the text form of ``tally prove consistency`` (the body of a
  C2SP tlog-witness ``add-checkpoint`` request) and its JSON form.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import b64, merkle
from . import note as notes
from .errors import FormatError, StorageError, TallyError, VerificationError
from .keys import EVENT_ROLES, KeyRing

if TYPE_CHECKING:
    from .store import Ledger

__all__ = [
    "LOG_ROLES",
    "Checkpoint",
    "ConsistencyProof",
    "SignedCheckpoint",
    "VerifiedCheckpoint",
    "as_verifier",
    "checkpoint_at",
    "checkpoint_covering",
    "consistency_proof",
    "log_verifiers",
    "open_checkpoint",
    "parse_checkpoint",
    "parse_consistency_proof",
    "rule8_hook",
    "stored_checkpoints",
    "verify_checkpoint",
    "verify_ledger_checkpoint",
    "witness_verifiers",
]

LOG_ROLES = EVENT_ROLES  # keys that may sign checkpoints (the roles that append)
MAX_SIZE = (1 << 63) - 1
MAX_PROOF_HASHES = 128

KeySpec = str | bytes | notes.Verifier  # a vkey, a raw 32-byte Ed25519 public key, or a parsed verifier


def _reason(exc: BaseException) -> str:
    """An error's own message, without the ``seq``/``rule`` prefix ``VerificationError`` adds."""
    return str(exc.args[0]) if exc.args else str(exc)


# ---------------------------------------------------------------------------
# The checkpoint text.


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint body: origin, tree size, root hash, optional extension lines."""

    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = ()

    def text(self) -> str:
        lines = [self.origin, str(self.size), b64.encode(self.root), *self.extensions]
        return "\n".join(lines) + "\n"

    def to_json(self) -> dict[str, Any]:
        return {"origin": self.origin, "size": self.size, "root": self.root.hex()}


def parse_checkpoint(text: str) -> Checkpoint:
    """Parse checkpoint note text (the part before the signatures); ``FormatError`` if malformed."""
    if not text.endswith("\n"):
        raise FormatError("checkpoint text must end with a newline")
    lines = text[:-1].split("\n")
    if len(lines) < 3:
        raise FormatError("checkpoint needs an origin, a size and a root hash line")
    origin, size_text, root_text, *extensions = lines
    if not origin:
        raise FormatError("checkpoint origin is empty")
    if not size_text.isdigit() or not size_text.isascii() or (size_text != "0" and size_text.startswith("0")):
        raise FormatError(f"checkpoint size {size_text[:30]!r} is not a decimal without leading zeros")
    size = int(size_text)
    if size > MAX_SIZE:
        raise FormatError("checkpoint size is too large")
    root = b64.decode(root_text, "checkpoint root hash")
    if len(root) != 32:
        raise FormatError(f"checkpoint root hash is {len(root)} bytes, not 32")
    if any(not line for line in extensions):
        raise FormatError("checkpoint extension lines must not be empty")
    return Checkpoint(origin, size, root, tuple(extensions))


@dataclass(frozen=True)
class VerifiedCheckpoint:
    """A checkpoint whose log signature (and witness policy) verified."""

    checkpoint: Checkpoint
    note: str
    log_signers: tuple[notes.Verifier, ...]
    witnesses: tuple[notes.VerifiedSignature, ...]

    @property
    def origin(self) -> str:
        return self.checkpoint.origin

    @property
    def size(self) -> int:
        return self.checkpoint.size

    @property
    def root(self) -> bytes:
        return self.checkpoint.root

    def to_json(self) -> dict[str, Any]:
        return {
            **self.checkpoint.to_json(),
            "log_keys": [v.vkey() for v in self.log_signers],
            "witnesses": [{"name": w.verifier.name, "time": w.timestamp} for w in self.witnesses],
        }


def as_verifier(spec: KeySpec, default_name: str) -> notes.Verifier:
    """A key spec as a verifier: a vkey parsed, a raw Ed25519 key named ``default_name`` (type 0x01)."""
    if isinstance(spec, notes.Verifier):
        return spec
    if isinstance(spec, bytes):
        return notes.Verifier(default_name, notes.SIG_ED25519, spec)
    return notes.parse_vkey(spec)


def _distinct_keys(signatures: Iterable[notes.VerifiedSignature]) -> list[notes.VerifiedSignature]:
    """One verified signature per public key (a key under two names counts once)."""
    seen: dict[bytes, notes.VerifiedSignature] = {}
    for sig in signatures:
        seen.setdefault(sig.verifier.public_raw, sig)
    return list(seen.values())


def open_checkpoint(
    message: str,
    keys: Iterable[KeySpec],
    *,
    witnesses: Iterable[str | notes.Verifier] = (),
    threshold: int | None = None,
    origin: str | None = None,
) -> VerifiedCheckpoint:
    """Verify a checkpoint note offline; return it with who signed it.

    ``keys`` are the log's keys: vkeys (``name+hex8+base64``), parsed verifiers, or raw
    32-byte Ed25519 public keys (named after the checkpoint's origin, as tally signs).
    At least one must have signed. ``witnesses`` are cosigner vkeys (type 0x04); at
    least ``threshold`` distinct ones must have cosigned (default: all of them).
    Signatures from unknown keys are ignored; a known key whose signature does not
    verify rejects the note. Raises ``VerificationError`` (``FormatError`` for bad keys).
    """
    try:
        parsed = notes.parse_note(message)
        checkpoint = parse_checkpoint(parsed.text)
    except FormatError as exc:
        raise VerificationError(f"checkpoint is malformed: {exc}", rule="checkpoint") from None
    log: list[notes.Verifier] = []
    for spec in keys:
        if isinstance(spec, bytes) and not notes.is_valid_name(checkpoint.origin):
            raise VerificationError(
                f"checkpoint origin {checkpoint.origin!r} is not a valid key name; pass the log key as a vkey",
                rule="checkpoint",
            )
        log.append(as_verifier(spec, checkpoint.origin))
    if not log:
        raise FormatError("no log key given to verify the checkpoint with")
    if any(v.is_cosigner for v in log):
        raise FormatError("a cosignature (type 0x04) vkey was given as a log key; pass it as a witness")
    cosigners = [w if isinstance(w, notes.Verifier) else notes.parse_vkey(w) for w in witnesses]
    if any(not w.is_cosigner for w in cosigners):
        raise FormatError("a witness vkey must have signature type 0x04 (cosignature/v1)")
    distinct_witnesses = len({w.public_raw for w in cosigners})
    needed = distinct_witnesses if threshold is None else threshold
    if needed < 0 or needed > distinct_witnesses:
        raise FormatError(f"witness threshold {needed} is not between 0 and the {distinct_witnesses} witness keys")
    if origin is not None and checkpoint.origin != origin:
        raise VerificationError(f"checkpoint origin {checkpoint.origin!r} is not {origin!r}", rule="checkpoint")
    try:
        opened = notes.open_note(parsed, [*log, *cosigners])
    except VerificationError as exc:
        raise VerificationError(f"checkpoint signature: {exc}", rule="checkpoint") from None
    signers = tuple(v.verifier for v in opened.signers(notes.SIG_ED25519))
    if not signers:
        raise VerificationError("checkpoint is not signed by any of the log keys", rule="checkpoint")
    cosigned = _distinct_keys(opened.signers(notes.SIG_COSIGNATURE))
    if len(cosigned) < needed:
        raise VerificationError(
            f"checkpoint has {len(cosigned)} valid witness cosignature(s); the policy needs {needed}",
            rule="checkpoint",
        )
    return VerifiedCheckpoint(checkpoint, message, signers, tuple(cosigned))


def verify_checkpoint(
    message: str,
    keys: Iterable[KeySpec],
    *,
    witnesses: Iterable[str | notes.Verifier] = (),
    threshold: int | None = None,
    origin: str | None = None,
) -> Checkpoint:
    """``open_checkpoint`` returning only the verified ``Checkpoint(origin, size, root)``."""
    return open_checkpoint(message, keys, witnesses=witnesses, threshold=threshold, origin=origin).checkpoint


# ---------------------------------------------------------------------------
# Rule 8: checkpoints verified against the key ring and the recomputed root.


def log_verifiers(origin: str, ring: KeyRing, size: int | None = None) -> list[notes.Verifier]:
    """Verifiers for the ledger keys that may sign checkpoints (active at ``size`` if given)."""
    out = []
    for info in ring.keys.values():
        if not set(info.roles) & set(LOG_ROLES):
            continue
        if size is not None and info.revoked_at_seq is not None and info.revoked_at_seq <= size:
            continue
        out.append(notes.Verifier(origin, notes.SIG_ED25519, info.public_raw))
    return out


def witness_verifiers(ring: KeyRing) -> list[notes.Verifier]:
    """Cosigner verifiers for the ledger's ``witness`` keys (their note name = the key's name)."""
    return [
        notes.Verifier(info.name, notes.SIG_COSIGNATURE, info.public_raw)
        for info in ring.keys.values()
        if "witness" in info.roles and notes.is_valid_name(info.name)
    ]


def verify_ledger_checkpoint(
    message: str, *, origin: str, keys: KeyRing, root: bytes, size: int
) -> VerifiedCheckpoint:
    """Rule 8 for one checkpoint: raise ``VerificationError(seq=size, rule=8)`` unless it holds.

    The note must be a checkpoint of ``origin`` at ``size``, signed under the name
    ``origin`` by a ``root``/``signer`` key of ``keys`` (the ring as it stands after
    event ``size``) not revoked by then, and its root hash must equal ``root``, the
    Merkle root the verifier computed over the first ``size`` events. Cosignatures by
    the ledger's ``witness`` keys, when present, must verify.
    """

    def fail(message_: str) -> VerificationError:
        return VerificationError(f"checkpoint at size {size}: {message_}", seq=size, rule=8)

    try:
        log = log_verifiers(origin, keys, size)
        witnesses = witness_verifiers(keys)
    except FormatError as exc:  # an origin that cannot be a key name
        raise fail(_reason(exc)) from None
    if not log:
        raise fail(f"no key of this ledger may sign checkpoints under {origin!r}")
    try:
        verified = open_checkpoint(message, log, witnesses=witnesses, threshold=0, origin=origin)
    except TallyError as exc:
        raise fail(_reason(exc)) from None
    if verified.size != size:
        raise fail(f"the note says size {verified.size}")
    if verified.root != root:
        raise fail("its root hash is not the Merkle root of the events")
    return verified


def rule8_hook(
    checkpoint_notes: Mapping[int, str], origin: str | None = None
) -> Callable[[int, merkle.Frontier, KeyRing], None]:
    """An ``on_size`` hook for ``verify_events``: rule 8 for every note in ``checkpoint_notes`` (size -> note).

    Pass the ledger's ``origin`` (the genesis payload's): without it, the origin a note
    names is taken, and all notes must name the same one.
    """
    seen: list[str] = []

    def hook(size: int, frontier: merkle.Frontier, ring: KeyRing) -> None:
        claimed = origin
        if claimed is None:
            try:
                claimed = parse_checkpoint(notes.parse_note(checkpoint_notes[size]).text).origin
            except FormatError as exc:
                raise VerificationError(f"checkpoint at size {size} is malformed: {exc}", seq=size, rule=8) from None
            if seen and claimed != seen[0]:
                raise VerificationError(f"checkpoint at size {size} names origin {claimed!r}, not {seen[0]!r}",
                                        seq=size, rule=8)
            seen.append(claimed)
        verify_ledger_checkpoint(checkpoint_notes[size], origin=claimed, keys=ring, root=frontier.root(), size=size)

    return hook


# ---------------------------------------------------------------------------
# The checkpoints the ledger stored (``ledger.signing`` signs them).


@dataclass(frozen=True)
class SignedCheckpoint:
    """A checkpoint the ledger signed, and its note as stored."""

    checkpoint: Checkpoint
    note: str

    @property
    def size(self) -> int:
        return self.checkpoint.size


def _stored(ledger: Ledger, origin: str) -> list[SignedCheckpoint]:
    out = []
    for size, message in ledger.checkpoint_notes():
        try:
            checkpoint = parse_checkpoint(notes.parse_note(message).text)
        except FormatError as exc:
            raise StorageError(f"stored checkpoint at size {size} is malformed: {exc}") from None
        if checkpoint.size != size or checkpoint.origin != origin:
            raise StorageError(f"stored checkpoint at size {size} is for {checkpoint.origin!r} size {checkpoint.size}")
        out.append(SignedCheckpoint(checkpoint, message))
    return out


def stored_checkpoints(ledger: Ledger) -> list[SignedCheckpoint]:
    """Every checkpoint the ledger stored, by size."""
    return _stored(ledger, ledger.info.origin)


def checkpoint_at(ledger: Ledger, size: int) -> SignedCheckpoint | None:
    return next((c for c in stored_checkpoints(ledger) if c.size == size), None)


def checkpoint_covering(ledger: Ledger, seq: int = 1) -> SignedCheckpoint | None:
    """The newest stored checkpoint whose tree includes event ``seq``."""
    found = [c for c in stored_checkpoints(ledger) if c.size >= seq]
    return found[-1] if found else None


# ---------------------------------------------------------------------------
# Consistency proofs as files (``tally prove consistency`` -> ``tally witness cosign``).


@dataclass(frozen=True)
class ConsistencyProof:
    """A consistency proof from size ``old`` to ``new`` (``new`` None when only the checkpoint says)."""

    old: int
    hashes: tuple[bytes, ...]
    new: int | None = None
    old_root: bytes | None = None
    new_root: bytes | None = None
    checkpoint: str | None = None

    def text(self) -> str:
        """The C2SP tlog-witness ``add-checkpoint`` body: ``old N``, base64 hashes, blank line, checkpoint."""
        lines = [f"old {self.old}", *(b64.encode(h) for h in self.hashes)]
        return "\n".join(lines) + "\n\n" + (self.checkpoint or "")

    def to_json(self) -> dict[str, Any]:
        return {
            "old": self.old,
            "new": self.new,
            "hashes": [h.hex() for h in self.hashes],
            "old_root": self.old_root.hex() if self.old_root is not None else None,
            "new_root": self.new_root.hex() if self.new_root is not None else None,
        }


def _hex32(value: Any, what: str) -> bytes:
    try:
        raw = bytes.fromhex(value)
    except (TypeError, ValueError):
        raise FormatError(f"{what} is not hex") from None
    if len(raw) != 32:
        raise FormatError(f"{what} is not 32 bytes")
    return raw


def parse_consistency_proof(text: str) -> ConsistencyProof:
    """Read a consistency proof: the text form above, or the JSON of ``prove consistency --json``."""
    if text.lstrip().startswith("{"):
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise FormatError(f"consistency proof is not valid JSON: {exc.msg}") from None
        if not isinstance(obj, dict) or type(obj.get("old")) is not int or not isinstance(obj.get("hashes"), list):
            raise FormatError('consistency proof JSON needs "old" and "hashes"')
        new = obj.get("new")
        if new is not None and type(new) is not int:
            raise FormatError('consistency proof "new" must be an integer')
        old_root = _hex32(obj["old_root"], "old_root") if obj.get("old_root") else None
        new_root = _hex32(obj["new_root"], "new_root") if obj.get("new_root") else None
        return ConsistencyProof(obj["old"], tuple(_hex32(h, "consistency proof hash") for h in obj["hashes"]),
                                new, old_root, new_root)
    head, sep, rest = text.partition("\n\n")
    if not sep and not text.endswith("\n"):
        raise FormatError("consistency proof must end with a blank line")
    lines = head.rstrip("\n").split("\n") if head.strip() else []
    if not lines or not lines[0].startswith("old "):
        raise FormatError("consistency proof must start with 'old <size>'")
    old_text = lines[0][4:]
    if not old_text.isdigit() or not old_text.isascii():
        raise FormatError(f"consistency proof size {old_text[:20]!r} is not a decimal")
    if len(lines) - 1 > MAX_PROOF_HASHES:
        raise FormatError("consistency proof has too many hashes")
    hashes: list[bytes] = []
    for line in lines[1:]:
        raw = b64.decode(line, "consistency proof hash")
        if len(raw) != 32:
            raise FormatError("consistency proof hash is not 32 bytes")
        hashes.append(raw)
    checkpoint = rest if rest.strip() else None
    new = None
    if checkpoint is not None:
        new = parse_checkpoint(notes.parse_note(checkpoint).text).size
    return ConsistencyProof(int(old_text), tuple(hashes), new, checkpoint=checkpoint)


def consistency_proof(ledger: Ledger, old: int, new: int) -> ConsistencyProof:
    """A consistency proof between two sizes of ``ledger``, from its stored subtree hashes."""
    current = ledger.size()
    if not 1 <= old <= new <= current:
        raise FormatError(f"need 1 <= OLD <= NEW <= {current} (the ledger size); got {old} and {new}")
    hashes = tuple(ledger.consistency_proof(old, new))
    stored = checkpoint_at(ledger, new)
    return ConsistencyProof(old, hashes, new, ledger.root(old), ledger.root(new),
                            stored.note if stored is not None else None)
