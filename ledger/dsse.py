"""DSSE envelopes (secure-systems-lab/dsse v1.0.0) signed with Ed25519 ledger keys (``docs/format.md``, receipts).

``PAE(type, body) = "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body`` where LEN is
the ASCII decimal *byte* length; the signature covers the PAE, never the JSON. On the
wire an envelope is ``{"payload": b64, "payloadType": str, "signatures": [{"keyid",
"sig"}]}``; ``keyid`` is the ledger key id (SHA-256 of the raw public key),
always emitted because securesystemslib matches on it. Readers accept standard and
URL-safe base64, and ignore members they do not know.

Verification follows the spec's order: decode, verify signatures over the PAE against
trusted keys (the keyid is only a hint), require ``threshold`` distinct *public keys*
(not key ids: one key under two ids counts once), then check ``payloadType``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import b64
from .errors import FormatError, VerificationError
from .keys import Signer, key_id, verify_signature

__all__ = [
    "INTOTO_PAYLOAD_TYPE",
    "Envelope",
    "EnvelopeSignature",
    "VerifiedEnvelope",
    "pae",
    "sign_envelope",
    "verify_envelope",
]

INTOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding, lengths in bytes."""
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


@dataclass(frozen=True)
class EnvelopeSignature:
    keyid: str
    sig: bytes


@dataclass(frozen=True)
class Envelope:
    """A DSSE envelope: the payload bytes, their type, the signatures."""

    payload: bytes
    payload_type: str
    signatures: tuple[EnvelopeSignature, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "payload": b64.encode(self.payload),
            "payloadType": self.payload_type,
            "signatures": [
                {"keyid": s.keyid, "sig": b64.encode(s.sig)} for s in self.signatures
            ],
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2) + "\n"

    @classmethod
    def from_json(cls, obj: Any) -> Envelope:
        if not isinstance(obj, dict):
            raise FormatError("DSSE envelope is not a JSON object")
        for member in ("payload", "payloadType", "signatures"):
            if member not in obj:
                raise FormatError(f"DSSE envelope has no {member!r}")
        if not isinstance(obj["payloadType"], str):
            raise FormatError("DSSE payloadType is not a string")
        if not isinstance(obj["signatures"], list):
            raise FormatError("DSSE signatures is not a list")
        signatures = []
        for entry in obj["signatures"]:
            if not isinstance(entry, dict) or "sig" not in entry:
                raise FormatError("DSSE signature entry has no 'sig'")
            keyid = entry.get("keyid", "")
            if not isinstance(keyid, str):
                raise FormatError("DSSE keyid is not a string")
            signatures.append(EnvelopeSignature(keyid, b64.decode_lenient(entry["sig"], "DSSE sig")))
        return cls(b64.decode_lenient(obj["payload"], "DSSE payload"), obj["payloadType"], tuple(signatures))

    @classmethod
    def loads(cls, text: str | bytes) -> Envelope:
        try:
            obj = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise FormatError(f"DSSE envelope is not valid JSON: {exc}") from None
        return cls.from_json(obj)


def sign_envelope(payload: bytes, payload_type: str, signers: Sequence[Signer]) -> Envelope:
    """An envelope over ``payload`` signed by each of ``signers`` (keyid = ledger key id)."""
    if not signers:
        raise FormatError("a DSSE envelope needs at least one signer")
    message = pae(payload_type, payload)
    return Envelope(payload, payload_type, tuple(EnvelopeSignature(s.id, s.sign(message)) for s in signers))


@dataclass(frozen=True)
class VerifiedEnvelope:
    """The payload of an envelope that verified, and the key ids that signed it."""

    payload: bytes
    payload_type: str
    key_ids: tuple[str, ...]


def verify_envelope(
    envelope: Envelope,
    keys: Iterable[bytes] | Mapping[str, bytes],
    *,
    threshold: int = 1,
    payload_type: str | None = INTOTO_PAYLOAD_TYPE,
) -> VerifiedEnvelope:
    """Verify ``envelope`` against trusted raw Ed25519 public ``keys``; return its payload.

    At least ``threshold`` distinct trusted public keys must have signed the PAE.
    ``payload_type`` (when not None) must then match exactly. Raises
    ``VerificationError``; ``FormatError`` for an impossible policy.
    """
    trusted = list(keys.values()) if isinstance(keys, Mapping) else list(keys)
    by_id = {key_id(public): public for public in trusted}
    if threshold < 1 or threshold > len(by_id):
        raise FormatError(f"threshold {threshold} is not between 1 and the {len(by_id)} distinct keys given")
    message = pae(envelope.payload_type, envelope.payload)
    accepted: dict[str, bytes] = {}
    for signature in envelope.signatures:
        hinted = by_id.get(signature.keyid)  # only a hint: try that key first, then the others
        candidates = ([hinted] if hinted is not None else []) + [p for p in by_id.values() if p is not hinted]
        for public in candidates:
            if key_id(public) not in accepted and verify_signature(public, signature.sig, message):
                accepted[key_id(public)] = public
                break
    if len(accepted) < threshold:
        raise VerificationError(
            f"DSSE envelope: {len(accepted)} valid signature(s) from trusted keys, {threshold} needed",
            rule="receipt",
        )
    if payload_type is not None and envelope.payload_type != payload_type:
        raise VerificationError(
            f"DSSE payloadType {envelope.payload_type!r} is not {payload_type!r}", rule="receipt"
        )
    return VerifiedEnvelope(envelope.payload, envelope.payload_type, tuple(accepted))
