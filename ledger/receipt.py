"""Receipts: a signed in-toto Statement about one event, plus its tlog-proof (``docs/format.md``).

A receipt for event ``seq`` is three files:

- ``<seq>.dsse.json``: a DSSE envelope (``application/vnd.in-toto+json``) signed by a
  ledger key (``keyid`` = its key id) over an in-toto Statement v1 whose first subject
  is ``<origin>#<seq>`` with digest ``{"sha256": <event hash>}``, then whatever other
  subjects the caller's ``ReceiptPolicy`` names (tally's windows name their plan).
  Which event types have receipts, and which predicate each carries, is the policy's
  too: the ledger knows nothing of windows (``runner.events.receipts`` is tally's);
- ``<seq>.tlog-proof``: a C2SP ``c2sp.org/tlog-proof@v1`` file: ``index <seq-1>``, the
  inclusion path of the event's leaf (base64, leaf sibling first), a blank line, and
  the checkpoint (with any cosignatures) verbatim;
- ``<seq>.event.json``: the event itself (its line), so that the Statement can be
  recomputed from it.

``verify_receipt`` checks all of it offline: the envelope signature (PAE) under a
trusted log key, the payload type, the Statement's subject digest, the checkpoint's
signature and witness policy, the inclusion of the event hash at ``index`` in that
checkpoint's tree, and, when the event is at hand, that it hashes to the subject
digest and that the Statement is exactly the one derived from it.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import b64, merkle
from .canonical import canonical
from .checkpoint import (
    KeySpec,
    SignedCheckpoint,
    VerifiedCheckpoint,
    _reason,
    checkpoint_covering,
    log_verifiers,
    open_checkpoint,
)
from .dsse import INTOTO_PAYLOAD_TYPE, Envelope, sign_envelope, verify_envelope
from .errors import FormatError, TallyError, VerificationError
from .event import Event, event_from_json
from .keys import Signer
from .note import Verifier, parse_vkey
from .signing import sign_checkpoint
from .strictjson import read_json
from .strictwrite import open_dir, write_whole
from .trusted import TrustedTree, proven_inclusion, trusted_event, trusted_tree

if TYPE_CHECKING:
    from .store import Ledger

__all__ = [
    "MAX_PROOF_LINE_BYTES",
    "STATEMENT_TYPE",
    "TEST_RESULT_PREDICATE",
    "TLOG_PROOF_HEADER",
    "VSA_PREDICATE",
    "Receipt",
    "ReceiptKind",
    "ReceiptPolicy",
    "TlogProof",
    "VerifiedReceipt",
    "build_receipt",
    "inclusion_proofs",
    "inclusion_record",
    "parse_tlog_proof",
    "payload_predicate",
    "receipt_paths",
    "statement_for",
    "subject_name",
    "test_result_predicate",
    "verification_summary",
    "verify_bundle_proofs",
    "verify_inclusion_record",
    "verify_receipt",
    "verify_tlog_proof",
    "write_bundle_proofs",
    "write_receipt",
]

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
TEST_RESULT_PREDICATE = "https://in-toto.io/attestation/test-result/v0.1"
VSA_PREDICATE = "https://slsa.dev/verification_summary/v1"
TLOG_PROOF_HEADER = "c2sp.org/tlog-proof@v1"
MAX_PROOF_HASHES = 64
# A proofs.jsonl record: at most MAX_PROOF_HASHES hashes of 64 hex, and three integers.
MAX_PROOF_LINE_BYTES = 16 << 10
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def _fail(message: str) -> VerificationError:
    return VerificationError(message, rule="receipt")


# ---------------------------------------------------------------------------
# The Statement.


def subject_name(origin: str, seq: int) -> str:
    return f"{origin}#{seq}"


Subjects = list[dict[str, Any]]
Predicate = Callable[[Event, str, Subjects], dict[str, Any]]


@dataclass(frozen=True)
class ReceiptKind:
    """The Statement of one event type's receipts: its predicate type and how the predicate is made.

    ``predicate(event, name, subjects)`` receives the receipt's own subject name
    (``<origin>#<seq>``) and the subjects beyond it.
    """

    predicate_type: str
    predicate: Predicate


def _no_subjects(event: Event) -> Subjects:
    return []


@dataclass(frozen=True)
class ReceiptPolicy:
    """Which event types have receipts and what their Statements say: the caller's domain.

    ``subjects(event)`` names what the event is about beyond itself (``<origin>#<seq>``
    always comes first).
    """

    kinds: Mapping[str, ReceiptKind]
    subjects: Callable[[Event], Subjects] = field(default=_no_subjects)

    @property
    def predicate_types(self) -> frozenset[str]:
        return frozenset(kind.predicate_type for kind in self.kinds.values())


def payload_predicate(event: Event, name: str, subjects: Subjects) -> dict[str, Any]:
    """The event's payload as the predicate."""
    return dict(event.payload)


def test_result_predicate(name: str, verdict: str, passed: str) -> Predicate:
    """An in-toto test-result predicate: the test is ``payload[name]``, passed when ``payload[verdict] == passed``."""

    def predicate(event: Event, url: str, subjects: Subjects) -> dict[str, Any]:
        payload = event.payload
        ok = payload.get(verdict) == passed
        return {
            "result": "PASSED" if ok else "FAILED",
            "configuration": list(subjects),
            "url": url,
            "passedTests" if ok else "failedTests": [str(payload.get(name, ""))],
        }

    return predicate


def statement_for(event: Event, origin: str, policy: ReceiptPolicy) -> dict[str, Any]:
    """The in-toto Statement v1 a receipt for ``event`` carries (``FormatError`` for other types)."""
    kind = policy.kinds.get(event.type)
    if kind is None:
        raise FormatError(
            f"seq {event.seq} is a {event.type} event; receipts exist for {', '.join(sorted(policy.kinds))}"
        )
    name = subject_name(origin, event.seq)
    first = {"name": name, "digest": {"sha256": event.hash}}
    extra = policy.subjects(event)
    predicate = kind.predicate(event, name, extra)
    return {"_type": STATEMENT_TYPE, "subject": [first, *extra], "predicateType": kind.predicate_type,
            "predicate": predicate}


def verification_summary(
    *,
    verifier_id: str,
    time_verified: str,
    resource_uri: str,
    passed: bool,
    subjects: Sequence[dict[str, Any]],
    policy: dict[str, Any] | None = None,
    input_attestations: Sequence[dict[str, Any]] = (),
    verifier_version: str | None = None,
) -> dict[str, Any]:
    """An in-toto Statement with a SLSA verification summary (an auditor's verdict on a bundle)."""
    verifier: dict[str, Any] = {"id": verifier_id}
    if verifier_version:
        verifier["version"] = {"tally": verifier_version}
    predicate: dict[str, Any] = {
        "verifier": verifier,
        "timeVerified": time_verified,
        "resourceUri": resource_uri,
        "verificationResult": "PASSED" if passed else "FAILED",
        "verifiedLevels": [],
        "inputAttestations": list(input_attestations),
    }
    if policy is not None:
        predicate["policy"] = policy
    return {"_type": STATEMENT_TYPE, "subject": list(subjects), "predicateType": VSA_PREDICATE,
            "predicate": predicate}


# ---------------------------------------------------------------------------
# C2SP tlog-proof files.


@dataclass(frozen=True)
class TlogProof:
    """A ``c2sp.org/tlog-proof@v1`` file: index, inclusion path, checkpoint note (verbatim)."""

    index: int
    hashes: tuple[bytes, ...]
    checkpoint: str
    extra: bytes | None = None

    def text(self) -> str:
        lines = [TLOG_PROOF_HEADER]
        if self.extra is not None:
            lines.append("extra " + b64.encode(self.extra))
        lines.append(f"index {self.index}")
        lines.extend(b64.encode(h) for h in self.hashes)
        return "\n".join(lines) + "\n\n" + self.checkpoint


def parse_tlog_proof(text: str) -> TlogProof:
    """Parse a tlog-proof file (``FormatError`` when malformed)."""
    head, sep, checkpoint = text.partition("\n\n")
    if not sep or not checkpoint:
        raise FormatError("tlog-proof has no blank line followed by a checkpoint")
    lines = head.split("\n")
    if lines[0] != TLOG_PROOF_HEADER:
        raise FormatError(f"tlog-proof does not start with {TLOG_PROOF_HEADER}")
    position = 1
    extra = None
    if position < len(lines) and lines[position].startswith("extra "):
        extra = b64.decode(lines[position][6:], "tlog-proof extra data")
        position += 1
    if position >= len(lines) or not lines[position].startswith("index "):
        raise FormatError("tlog-proof has no 'index <n>' line")
    index_text = lines[position][6:]
    if not index_text.isdigit() or not index_text.isascii() or (index_text != "0" and index_text.startswith("0")):
        raise FormatError(f"tlog-proof index {index_text[:20]!r} is not a decimal")
    hashes = []
    for line in lines[position + 1:]:
        raw = b64.decode(line, "tlog-proof hash")
        if len(raw) != 32:
            raise FormatError(f"tlog-proof hash is {len(raw)} bytes, not 32")
        hashes.append(raw)
    if len(hashes) > MAX_PROOF_HASHES:
        raise FormatError("tlog-proof has too many hashes")
    return TlogProof(int(index_text), tuple(hashes), checkpoint, extra)


def _log_keys(keys: Iterable[KeySpec]) -> list[KeySpec]:
    parsed: list[KeySpec] = [parse_vkey(k) if isinstance(k, str) else k for k in keys]
    if not parsed:
        raise FormatError("no log key given (pass the ledger's vkey)")
    return parsed


def verify_tlog_proof(
    proof: TlogProof,
    leaf_data: bytes,
    keys: Iterable[KeySpec],
    *,
    witnesses: Iterable[str | Verifier] = (),
    threshold: int | None = None,
    origin: str | None = None,
) -> VerifiedCheckpoint:
    """Verify a tlog-proof for an entry whose leaf data is ``leaf_data`` (our leaves: raw event hashes).

    Checks the checkpoint (log signature, origin, witness policy) and the inclusion
    of ``SHA-256(0x00 || leaf_data)`` at ``proof.index`` under the checkpoint's root.
    """
    verified = open_checkpoint(proof.checkpoint, _log_keys(keys), witnesses=witnesses,
                               threshold=threshold, origin=origin)
    try:
        merkle.verify_inclusion(proof.index, verified.size, merkle.hash_leaf(leaf_data), proof.hashes, verified.root)
    except VerificationError as exc:
        raise _fail(f"inclusion proof: {_reason(exc)}") from None
    return verified


# ---------------------------------------------------------------------------
# Proof records for partial exports: {"seq","index","tree_size","hashes":[hex]}.


def inclusion_proofs(ledger: Ledger, seqs: Sequence[int], size: int, chunk: int = 128) -> dict[int, list[bytes]]:
    """Inclusion paths of events ``seqs`` in the tree of ``size``, a few queries per ``chunk`` events."""
    out: dict[int, list[bytes]] = {}
    for offset in range(0, len(seqs), chunk):
        part = list(seqs[offset:offset + chunk])
        proofs = merkle.inclusion_proofs([seq - 1 for seq in part], size, ledger.fetch_nodes)
        out.update(zip(part, proofs, strict=True))
    return out


def inclusion_record(seq: int, size: int, hashes: Sequence[bytes]) -> dict[str, Any]:
    """One line of a bundle's ``proofs.jsonl``."""
    return {"seq": seq, "index": seq - 1, "tree_size": size, "hashes": [h.hex() for h in hashes]}


def verify_inclusion_record(record: Any, event_hash: str, checkpoint: Any) -> None:
    """Check one ``proofs.jsonl`` record for an event with ``event_hash`` against a verified checkpoint.

    ``checkpoint`` is a ``Checkpoint`` or ``VerifiedCheckpoint`` (``size`` and ``root``).
    Raises ``VerificationError`` (``seq`` set) when the record does not prove inclusion.
    """
    if not isinstance(record, dict) or type(record.get("seq")) is not int:
        raise VerificationError("proof record has no integer seq", rule="proof")
    seq = record["seq"]
    if record.get("index") != seq - 1 or record.get("tree_size") != checkpoint.size:
        raise VerificationError(
            f"proof record is for index {record.get('index')} in a tree of {record.get('tree_size')}, "
            f"not seq {seq} in the checkpoint's {checkpoint.size}", seq=seq, rule="proof")
    hashes = record.get("hashes")
    if not isinstance(hashes, list) or not all(isinstance(h, str) and _HEX64.match(h) for h in hashes):
        raise VerificationError("proof record hashes are not 64-hex strings", seq=seq, rule="proof")
    if not _HEX64.match(event_hash):
        raise VerificationError("event hash is not 64 hex characters", seq=seq, rule="proof")
    try:
        merkle.verify_inclusion(seq - 1, checkpoint.size, merkle.hash_leaf(bytes.fromhex(event_hash)),
                                [bytes.fromhex(h) for h in hashes], checkpoint.root)
    except VerificationError as exc:
        raise VerificationError(f"not included in the checkpoint: {_reason(exc)}", seq=seq, rule="proof") from None


def _newest_covering(ledger: Ledger, first_needed: int, size: int) -> SignedCheckpoint | None:
    from .checkpoint import stored_checkpoints

    found = [c for c in stored_checkpoints(ledger) if first_needed <= c.size <= size]
    return found[-1] if found else None


def write_bundle_proofs(
    ledger: Ledger,
    out: Path,
    size: int,
    stream: str | None,
    signer: Signer | None,
    seqs: Sequence[int] | None = None,
) -> dict[str, Any]:
    """Write a bundle's ``checkpoint.txt`` (and, for a ``stream`` export, ``proofs.jsonl``).

    A full export (``stream`` None) of events 1..``size`` gets the checkpoint at
    ``size``; a partial one the newest stored checkpoint covering its last event (up to
    ``size``), and one inclusion proof per event against it, one JSON line each:
    ``{"seq","index","tree_size","hashes":[hex]}``. A checkpoint is signed with
    ``signer`` when none fits (``FormatError`` without a signer). ``seqs`` are the
    exported events' seqs (read from the ledger when not given). Returns
    ``{"checkpoint_size": n, "checkpoint.txt": sha256, "proofs.jsonl": sha256}``.
    """
    import hashlib

    from .checkpoint import checkpoint_at

    if stream is None:
        chosen = checkpoint_at(ledger, size)
        last = size
    else:
        if seqs is None:
            seqs = [e.seq for e in ledger.events(0, until=size, stream=stream)]
        last = seqs[-1] if seqs else size
        chosen = _newest_covering(ledger, last, size)
    if chosen is None:
        if signer is None:
            raise FormatError(f"no stored checkpoint covers seq {last}; pass a signing key to sign one")
        chosen = sign_checkpoint(ledger, signer, size)
    (out / "checkpoint.txt").write_text(chosen.note, encoding="utf-8")
    files: dict[str, Any] = {
        "checkpoint_size": chosen.size,
        "checkpoint.txt": hashlib.sha256(chosen.note.encode("utf-8")).hexdigest(),
    }
    if stream is not None:
        digest = hashlib.sha256()
        with open(out / "proofs.jsonl", "w", encoding="utf-8", newline="\n") as handle:
            for offset in range(0, len(seqs or ()), 1024):
                part = list((seqs or ())[offset:offset + 1024])
                proofs = inclusion_proofs(ledger, part, chosen.size)
                for seq in part:
                    line = json.dumps(inclusion_record(seq, chosen.size, proofs[seq]), separators=(",", ":")) + "\n"
                    handle.write(line)
                    digest.update(line.encode("utf-8"))
        files["proofs.jsonl"] = digest.hexdigest()
    return files


def verify_bundle_proofs(lines: Iterable[str], events: Iterable[Event], checkpoint: Any) -> int:
    """Check a partial bundle's ``proofs.jsonl`` against its events and verified checkpoint.

    ``lines`` are the lines of ``proofs.jsonl``, ``events`` the bundle's events in
    order, ``checkpoint`` the verified ``checkpoint.txt`` (``size`` and ``root``). Every
    event must hash to its hash (rule 4) and have, on the line of the same rank, a
    record for its seq that proves its inclusion; no line may be left over. Each line is
    read as hostile JSON (at most ``MAX_PROOF_LINE_BYTES``, bounded nesting, no member
    twice). Raises ``VerificationError`` naming the first failing seq; returns the
    number checked.
    """
    records = iter(lines)
    count = 0
    for event in events:
        count += 1
        line = next(records, None)
        if line is None or not line.strip():
            raise VerificationError(f"proofs.jsonl has no line {count} for this event", seq=event.seq, rule="proof")
        if event.computed_hash() != event.hash:
            raise VerificationError("recomputed hash differs from the stored hash", seq=event.seq, rule=4)
        try:
            record = read_json(line, f"proofs.jsonl line {count}", max_bytes=MAX_PROOF_LINE_BYTES, max_depth=2)
        except FormatError as exc:
            raise VerificationError(str(exc), seq=event.seq, rule="proof") from None
        if not isinstance(record, dict) or record.get("seq") != event.seq:
            found = record.get("seq") if isinstance(record, dict) else None
            raise VerificationError(f"proofs.jsonl line {count} is for seq {found}, not this event",
                                    seq=event.seq, rule="proof")
        verify_inclusion_record(record, event.hash, checkpoint)
    for line in records:
        if line.strip():
            raise VerificationError(f"proofs.jsonl has more lines than the {count} events", rule="proof")
    return count


# ---------------------------------------------------------------------------
# Building and writing receipts.


@dataclass(frozen=True)
class Receipt:
    """A receipt ready to be written: the event, its signed Statement, its tlog-proof."""

    event: Event
    envelope: Envelope
    proof: TlogProof

    @property
    def seq(self) -> int:
        return self.event.seq


def build_receipt(ledger: Ledger, seq: int, signer: Signer, policy: ReceiptPolicy,
                  checkpoint: SignedCheckpoint | None = None) -> Receipt:
    """The receipt of event ``seq``, signed by ``signer`` (a ledger ``root``/``signer`` key).

    Signs only what it verified: the ledger's tree is established from its events
    (``trusted_tree``), the event is re-checked against it (hash, signer at its seq,
    signature, membership: ``trusted_event``), and the proof is against ``checkpoint``,
    else the newest stored checkpoint covering the event, else a checkpoint signed now
    at the current size; whichever it is, its note must verify under the ledger's log
    keys and its root must be the verified tree's (at its size), and the inclusion path
    is verified against that root before it is written. A stored row edited without
    the key gives a ``VerificationError`` naming the seq and rule, never a receipt.
    """
    tree = trusted_tree(ledger)
    event = trusted_event(ledger, seq, tree)
    origin = ledger.info.origin
    statement = statement_for(event, origin, policy)
    tree.ring.require(signer.id, ("root", "signer"))
    chosen = checkpoint or checkpoint_covering(ledger, seq) or sign_checkpoint(ledger, signer, tree=tree)
    if chosen.size < seq:
        raise FormatError(f"the checkpoint at size {chosen.size} does not cover seq {seq}")
    _check_chosen(ledger, chosen, tree)
    hashes = proven_inclusion(ledger, seq, chosen.size, chosen.checkpoint.root, bytes.fromhex(event.hash))
    envelope = sign_envelope(canonical(statement), INTOTO_PAYLOAD_TYPE, [signer])
    return Receipt(event, envelope, TlogProof(seq - 1, tuple(hashes), chosen.note))


def _check_chosen(ledger: Ledger, chosen: SignedCheckpoint, tree: TrustedTree) -> None:
    """The checkpoint a receipt proves against is this ledger's: signed by its log key, over the verified tree."""
    origin = ledger.info.origin
    if chosen.size > tree.size:
        raise VerificationError(f"the checkpoint at size {chosen.size} is beyond the ledger's {tree.size} events",
                                seq=tree.size + 1, rule=8)
    try:
        open_checkpoint(chosen.note, log_verifiers(origin, tree.ring, chosen.size), threshold=0, origin=origin)
        if chosen.size == tree.size:
            consistent = chosen.checkpoint.root == tree.root
        else:
            merkle.verify_consistency(chosen.size, tree.size, chosen.checkpoint.root, tree.root,
                                      ledger.consistency_proof(chosen.size, tree.size))
            consistent = True
    except (TallyError, ValueError) as exc:
        raise VerificationError(f"refusing to sign: the checkpoint at size {chosen.size} is not one of the "
                                f"verified tree ({_reason(exc)})", seq=chosen.size, rule=8) from None
    if not consistent:
        raise VerificationError(f"refusing to sign: the checkpoint at size {chosen.size} does not have the root "
                                "of the verified events", seq=chosen.size, rule=8)


def receipt_paths(out: Path, seq: int) -> tuple[Path, Path, Path]:
    """Where a receipt's envelope, tlog-proof and event files go."""
    return out / f"{seq}.dsse.json", out / f"{seq}.tlog-proof", out / f"{seq}.event.json"


def write_receipt(receipt: Receipt, out: Path) -> tuple[Path, Path, Path]:
    """Write a receipt's three files into ``out``, each whole, never through a symlink (``FormatError``)."""
    paths = receipt_paths(out, receipt.seq)
    texts = (receipt.envelope.dumps(), receipt.proof.text(), receipt.event.line() + "\n")
    directory = open_dir(out, "receipt directory")
    try:
        for path, text in zip(paths, texts, strict=True):
            write_whole(path.name, text.encode("utf-8"), "receipt file", mode=0o644, dir_fd=directory, shown=path)
    finally:
        os.close(directory)
    return paths


# ---------------------------------------------------------------------------
# Verifying receipts, offline.


@dataclass(frozen=True)
class VerifiedReceipt:
    """What a receipt established."""

    origin: str
    seq: int
    event_hash: str
    statement: dict[str, Any]
    signed_by: tuple[str, ...]
    checkpoint: VerifiedCheckpoint
    event: Event | None = None

    @property
    def predicate_type(self) -> str:
        return str(self.statement["predicateType"])

    @property
    def result(self) -> str | None:
        predicate = self.statement.get("predicate", {})
        value = predicate.get("result") if isinstance(predicate, dict) else None
        return value if isinstance(value, str) else None

    def to_json(self) -> dict[str, Any]:
        return {
            "valid": True,
            "origin": self.origin,
            "seq": self.seq,
            "event_hash": self.event_hash,
            "predicate_type": self.predicate_type,
            "result": self.result,
            "subject": self.statement["subject"],
            "signed_by": list(self.signed_by),
            "checkpoint": self.checkpoint.to_json(),
            "event_checked": self.event is not None,
        }


def _subject(statement: Any, policy: ReceiptPolicy) -> tuple[str, int, str]:
    if not isinstance(statement, dict) or statement.get("_type") != STATEMENT_TYPE:
        raise _fail(f"payload is not an in-toto Statement v1 ({STATEMENT_TYPE})")
    if statement.get("predicateType") not in policy.predicate_types:
        raise _fail(f"predicateType {statement.get('predicateType')!r} is not a tally receipt predicate")
    subjects = statement.get("subject")
    if not isinstance(subjects, list) or not subjects or not isinstance(subjects[0], dict):
        raise _fail("Statement has no subject")
    name, digest = subjects[0].get("name"), subjects[0].get("digest")
    origin, hash_sign, seq_text = name.rpartition("#") if isinstance(name, str) else ("", "", "")
    if not hash_sign or not origin or not seq_text.isdigit() or not seq_text.isascii() or seq_text.startswith("0"):
        raise _fail(f"first subject {name!r} is not <origin>#<seq>")
    sha = digest.get("sha256") if isinstance(digest, dict) else None
    if not isinstance(sha, str) or not _HEX64.match(sha):
        raise _fail("first subject has no sha256 digest")
    return origin, int(seq_text), sha


def verify_receipt(
    envelope_text: str | bytes,
    proof_text: str,
    keys: Iterable[KeySpec],
    *,
    policy: ReceiptPolicy,
    witnesses: Iterable[str | Verifier] = (),
    threshold: int | None = None,
    event_text: str | None = None,
) -> VerifiedReceipt:
    """Verify a receipt offline against the log ``keys`` (vkeys or raw public keys).

    Raises ``VerificationError`` naming the first thing that fails; ``FormatError``
    only for bad keys or policy arguments.
    """
    log_keys = _log_keys(keys)
    public_keys = [k.public_raw if isinstance(k, Verifier) else k for k in log_keys if isinstance(k, Verifier | bytes)]
    if any(isinstance(k, Verifier) and k.is_cosigner for k in log_keys):
        raise FormatError("a cosignature (type 0x04) vkey was given as a log key; pass it as a witness")
    try:
        envelope = Envelope.loads(envelope_text)
    except FormatError as exc:
        raise _fail(f"envelope is malformed: {exc}") from None
    verified = verify_envelope(envelope, public_keys, payload_type=INTOTO_PAYLOAD_TYPE)
    try:
        statement = json.loads(verified.payload)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise _fail("envelope payload is not JSON") from None
    origin, seq, event_hash = _subject(statement, policy)
    try:
        proof = parse_tlog_proof(proof_text)
    except FormatError as exc:
        raise _fail(f"tlog-proof is malformed: {exc}") from None
    if proof.index != seq - 1:
        raise _fail(f"tlog-proof is for index {proof.index}, the receipt is for seq {seq} (index {seq - 1})")
    try:
        checkpoint = verify_tlog_proof(proof, bytes.fromhex(event_hash), log_keys, witnesses=witnesses,
                                       threshold=threshold, origin=origin)
    except VerificationError as exc:
        raise _fail(_reason(exc)) from None
    event = None
    if event_text is not None:
        event = _check_event(event_text, statement, origin, seq, event_hash, policy)
    return VerifiedReceipt(origin, seq, event_hash, statement, verified.key_ids, checkpoint, event)


def _check_event(text: str, statement: dict[str, Any], origin: str, seq: int, event_hash: str,
                 policy: ReceiptPolicy) -> Event:
    try:
        event = event_from_json(json.loads(text), "receipt event")
    except (json.JSONDecodeError, TallyError) as exc:
        raise _fail(f"event file is malformed: {exc}") from None
    if event.seq != seq or event.hash != event_hash:
        raise _fail(f"event file is seq {event.seq} with hash {event.hash[:16]}, not the receipt's subject")
    if event.computed_hash() != event.hash:
        raise _fail("event file does not hash to its hash")
    try:
        expected = statement_for(event, origin, policy)
    except FormatError as exc:
        raise _fail(_reason(exc)) from None
    if expected != statement:
        raise _fail("the Statement is not the one derived from the event")
    return event
