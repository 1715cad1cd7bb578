"""The witness's rules, shared by every witness tally runs (C2SP tlog-witness, ``docs/transparency.md``).

``judge`` decides one ``add-checkpoint`` step: given what the witness last cosigned for
an origin (or nothing), the client's old size, the new (log-signed, already verified)
checkpoint and the consistency proof, it returns ``None`` (cosign) or a ``Refusal``
whose ``kind`` maps to the latest spec's status (``STATUS``). The file witness
(``tally witness cosign``) and the HTTP witness (``tally witness serve``) both call
it, in the order the spec lists the checks:

======================  ======  =====================================================
kind                    status  when
======================  ======  =====================================================
``old_too_large``       400     old size > checkpoint size
``stale``               409     old size != the size last cosigned (body: that size)
``empty_root``          422     a size-0 checkpoint whose root is not SHA-256("")
``proof_from_zero``     422     a non-empty proof with ``old 0``
``root_mismatch``       422     the size last cosigned, another root (a split view)
``bad_proof``           422     the consistency proof does not hold (or is missing)
======================  ======  =====================================================

``root_mismatch`` and ``bad_proof`` are ``inconsistent``: the submission was signed by
the log, so the HTTP witness keeps it as evidence. Only ``root_mismatch`` proves a
fork to a third party (two signed checkpoints of one size with different roots); a
failed proof may be a bad proof of a good tree.

``parse_add_checkpoint`` reads the request body (``old N``, at most 63 base64 hash
lines, an empty line, the checkpoint), bounded before anything is decoded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from . import b64, merkle
from .checkpoint import Checkpoint
from .errors import FormatError, VerificationError

__all__ = ["INCONSISTENT", "MAX_BODY_BYTES", "MAX_PROOF_LINES", "STATUS", "AddRequest", "Refusal", "judge",
           "parse_add_checkpoint"]

MAX_PROOF_LINES = 63  # the spec's limit on consistency proof lines
MAX_BODY_BYTES = 16 << 10  # as both Go witnesses: a body is far smaller (a checkpoint and 63 hashes)

STATUS = {
    "old_too_large": 400,
    "stale": 409,
    "empty_root": 422,
    "proof_from_zero": 422,
    "root_mismatch": 422,
    "bad_proof": 422,
}
INCONSISTENT = frozenset({"root_mismatch", "bad_proof"})


@dataclass(frozen=True)
class Refusal:
    """Why a step was refused: a kind of ``STATUS``, a message, the size last cosigned."""

    kind: str
    message: str
    known_size: int

    @property
    def status(self) -> int:
        return STATUS[self.kind]


@dataclass(frozen=True)
class AddRequest:
    """An ``add-checkpoint`` body, parsed: the old size, the proof hashes, the checkpoint note."""

    old: int
    proof: tuple[bytes, ...]
    note: str


def judge(known: Checkpoint | None, old: int, new: Checkpoint, proof: Sequence[bytes]) -> Refusal | None:
    """The step from ``known`` (last cosigned; None: never) to ``new``, given the client's ``old`` and ``proof``."""
    known_size = 0 if known is None else known.size
    if old > new.size:
        return Refusal("old_too_large", f"old size {old} is larger than the checkpoint size {new.size}", known_size)
    if old != known_size:
        return Refusal("stale", f"old size {old} is not the size {known_size} this witness last cosigned",
                       known_size)
    if new.size == 0 and new.root != merkle.EMPTY_ROOT:
        return Refusal("empty_root", "a checkpoint of size 0 must have the root of the empty tree", known_size)
    if old == 0:
        if proof:
            return Refusal("proof_from_zero", "old size 0 takes an empty consistency proof", known_size)
        return None
    assert known is not None  # old == known_size > 0
    if new.size == known.size:
        if new.root != known.root:
            return Refusal("root_mismatch", f"size {new.size} has another root than the checkpoint this witness "
                           "cosigned", known_size)
        if proof:
            return Refusal("bad_proof", "equal sizes take an empty consistency proof", known_size)
        return None
    if not proof:
        return Refusal("bad_proof", f"a consistency proof from size {known.size} is needed", known_size)
    try:
        merkle.verify_consistency(known.size, new.size, known.root, new.root, list(proof))
    except VerificationError as exc:
        reason = str(exc.args[0]) if exc.args else str(exc)
        return Refusal("bad_proof", f"checkpoint size {new.size} is not consistent with size {known.size} this "
                       f"witness cosigned ({reason})", known_size)
    return None


def _decimal(text: str, what: str) -> int:
    if not text.isascii() or not text.isdigit() or (text != "0" and text.startswith("0")) or len(text) > 19:
        raise FormatError(f"{what} {text[:24]!r} is not a decimal without leading zeros")
    value = int(text)
    if value >= 1 << 63:
        raise FormatError(f"{what} is too large")
    return value


def parse_add_checkpoint(body: bytes) -> AddRequest:
    """Parse an ``add-checkpoint`` body; ``FormatError`` (400) when it is not one."""
    if len(body) > MAX_BODY_BYTES:
        raise FormatError(f"request body is larger than {MAX_BODY_BYTES} bytes")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise FormatError("request body is not UTF-8") from None
    head, sep, note = text.partition("\n\n")
    if not sep:
        raise FormatError("request body has no empty line before the checkpoint")
    lines = head.split("\n")
    if not lines[0].startswith("old "):
        raise FormatError("request body must start with 'old <size>'")
    old = _decimal(lines[0][4:], "old size")
    if len(lines) - 1 > MAX_PROOF_LINES:
        raise FormatError(f"more than {MAX_PROOF_LINES} consistency proof lines")
    hashes = []
    for line in lines[1:]:
        raw = b64.decode(line, "consistency proof line")
        if len(raw) != 32:
            raise FormatError("a consistency proof line is not a 32-byte hash")
        hashes.append(raw)
    if not note:
        raise FormatError("request body has no checkpoint")
    return AddRequest(old, tuple(hashes), note)
