"""Fork proofs: two checkpoints signed by one log's key that cannot both be true (``docs/transparency.md``).

A witness that refuses a split view (a log-signed checkpoint of the size it cosigned,
with another root) keeps both notes (``WitnessStore.record_evidence``); exported, they
make a file anyone can check offline with the log's vkey::

    {"format": "tally-fork-proof/v1", "origin": "...", "log_vkeys": ["..."],
     "witness": "name+hex8+base64" or null, "kind": "root_mismatch",
     "a": "<log-signed checkpoint note>", "b": "<log-signed checkpoint note>"}

``verify_fork_proof`` holds the file as hostile input (bounded, one value per member)
and says FORK only when both notes carry a verifying signature by a trusted log key
(a trusted key's signature that fails refuses the file), name the file's origin and
one size, and have different roots. A failed consistency proof is kept as evidence
but is no fork proof: a bad proof of a good tree fails the same way.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from . import note as notes
from .checkpoint import Checkpoint, open_checkpoint
from .errors import FormatError, VerificationError
from .strictjson import read_json

__all__ = ["FORK_PROOF_FORMAT", "MAX_FORK_PROOF_BYTES", "Fork", "fork_proof", "verify_fork_proof"]

FORK_PROOF_FORMAT = "tally-fork-proof/v1"
MAX_FORK_PROOF_BYTES = 4 << 20


@dataclass(frozen=True)
class Fork:
    """A verified fork: the two checkpoints and the log keys that signed each."""

    origin: str
    a: Checkpoint
    b: Checkpoint
    signed_a: tuple[str, ...]
    signed_b: tuple[str, ...]
    witness: str | None

    def lines(self) -> list[str]:
        return [
            f"FORK {self.origin}: two checkpoints of size {self.a.size} signed by the log with different roots",
            f"  a: root {self.a.root.hex()} signed by {', '.join(self.signed_a)}",
            f"  b: root {self.b.root.hex()} signed by {', '.join(self.signed_b)}",
            *([f"  kept by witness {self.witness}"] if self.witness else []),
        ]

    def to_json(self) -> dict[str, Any]:
        return {"fork": True, "origin": self.origin, "size": self.a.size, "root_a": self.a.root.hex(),
                "root_b": self.b.root.hex(), "signed_a": list(self.signed_a), "signed_b": list(self.signed_b),
                "witness": self.witness}


def fork_proof(a_note: str, b_note: str, log_vkeys: Iterable[str], *, witness: str | None = None,
               kind: str = "root_mismatch") -> str:
    """The fork proof file's text for notes ``a`` and ``b`` (checked: it must verify as a fork)."""
    text = json.dumps({"format": FORK_PROOF_FORMAT, "origin": _origin(a_note), "log_vkeys": list(log_vkeys),
                       "witness": witness, "kind": kind, "a": a_note, "b": b_note}, indent=2) + "\n"
    verify_fork_proof(text)
    return text


def _origin(note: str) -> str:
    return notes.parse_note(note).text.split("\n", 1)[0]


def _string(obj: dict[str, Any], member: str) -> str:
    value = obj.get(member)
    if not isinstance(value, str) or not value:
        raise FormatError(f"fork proof: {member!r} must be a non-empty string")
    return value


def verify_fork_proof(text: str, log_vkeys: Iterable[str] = ()) -> Fork:
    """Check a fork proof; ``log_vkeys`` (default: the file's own) are the keys trusted for the log.

    ``FormatError`` for a file that is not a fork proof, ``VerificationError`` for one whose
    notes do not both verify under the log's key or do not contradict each other.
    """
    if len(text) > MAX_FORK_PROOF_BYTES:
        raise FormatError(f"fork proof is larger than {MAX_FORK_PROOF_BYTES} bytes")
    obj = read_json(text, "fork proof")
    if not isinstance(obj, dict) or obj.get("format") != FORK_PROOF_FORMAT:
        raise FormatError(f"not a fork proof: 'format' must be {FORK_PROOF_FORMAT!r}")
    if obj.get("kind") != "root_mismatch":
        raise FormatError("fork proof: 'kind' must be 'root_mismatch' (one size, two roots)")
    origin = _string(obj, "origin")
    trusted = list(log_vkeys)
    if not trusted:
        given = obj.get("log_vkeys")
        if not isinstance(given, list) or not given or not all(isinstance(v, str) for v in given):
            raise FormatError("fork proof: 'log_vkeys' must be a non-empty list of vkeys")
        trusted = given
    keys = [notes.parse_vkey(v) for v in trusted]
    witness = obj.get("witness")
    if witness is not None and not isinstance(witness, str):
        raise FormatError("fork proof: 'witness' must be a vkey or null")
    opened = []
    for member in ("a", "b"):
        try:
            opened.append(open_checkpoint(_string(obj, member), keys, threshold=0, origin=origin))
        except VerificationError as exc:
            raise VerificationError(f"fork proof: checkpoint {member}: {exc.args[0]}", rule="fork") from None
    a, b = opened
    if a.size != b.size:
        raise VerificationError(f"fork proof: the checkpoints are of sizes {a.size} and {b.size}, not one size",
                                rule="fork")
    if a.root == b.root:
        raise VerificationError("fork proof: both checkpoints have the same root: no fork", rule="fork")
    return Fork(origin, a.checkpoint, b.checkpoint, tuple(v.vkey() for v in a.log_signers),
                tuple(v.vkey() for v in b.log_signers), witness)
