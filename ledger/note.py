"""C2SP signed notes, vkeys and timestamped cosignatures (``docs/format.md``, checkpoints). Pure: no I/O, no clock.

A signed note is UTF-8 text ending in ``\\n``, a blank line, then one or more
signature lines ``U+2014 SP name SP base64(keyID[4] || signature)``. The text runs up
to the *last* blank line, so it may itself contain blank lines. Key IDs are
``SHA-256(name || 0x0A || type || public key)[:4]`` (big-endian uint32); verifier keys
are published as vkeys ``name+hex8+base64(type || public key)``.

Two signature types are supported, both Ed25519:

- ``0x01`` a note signature (the log signs its checkpoints with it);
- ``0x04`` a cosignature/v1 (a witness): the signature bytes are ``u64be(time) ||
  sig`` and the signed message is ``"cosignature/v1\\ntime <t>\\n" + text``.

Opening a note follows the signed-note rules: signatures from unknown (name, key ID)
pairs are ignored; a signature from a known key that does not verify rejects the whole
note; duplicates are dropped; more than ``MAX_SIGNATURES`` lines reject the note.
Malformed notes and vkeys raise ``FormatError``; a note whose known signature is bad
raises ``VerificationError``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from . import b64
from .errors import FormatError, VerificationError
from .keys import Signer, verify_signature

__all__ = [
    "MAX_SIGNATURES",
    "SIG_COSIGNATURE",
    "SIG_ED25519",
    "Note",
    "NoteSignature",
    "OpenedNote",
    "VerifiedSignature",
    "Verifier",
    "cosign",
    "cosignature_message",
    "is_valid_name",
    "key_id",
    "open_note",
    "parse_note",
    "parse_vkey",
    "sign",
    "signature_line",
    "vkey",
    "with_signatures",
]

SIG_ED25519 = 0x01
SIG_COSIGNATURE = 0x04
MAX_SIGNATURES = 100  # C2SP asks verifiers to accept >= 16; Go's note.Open caps at 100
MAX_NOTE_BYTES = 1 << 20
SIG_PREFIX = "\u2014 "


def is_valid_name(name: str) -> bool:
    """A key name: non-empty, no Unicode spaces, no ``+`` (C2SP signed-note)."""
    return bool(name) and "+" not in name and not any(ch.isspace() for ch in name)


def key_id(name: str, sig_type: int, public_raw: bytes) -> int:
    """``SHA-256(name || 0x0A || type || public key)[:4]`` as a big-endian uint32."""
    digest = hashlib.sha256(name.encode("utf-8") + b"\n" + bytes([sig_type]) + public_raw).digest()
    return int.from_bytes(digest[:4], "big")


def cosignature_message(text: str, timestamp: int) -> bytes:
    """What a cosignature/v1 signs: header, time line, then the checkpoint text."""
    return f"cosignature/v1\ntime {timestamp}\n".encode() + text.encode("utf-8")


@dataclass(frozen=True)
class Verifier:
    """A verifier key: a name, a signature type, an Ed25519 public key."""

    name: str
    sig_type: int
    public_raw: bytes

    def __post_init__(self) -> None:
        if not is_valid_name(self.name):
            raise FormatError(f"key name {self.name!r} must be non-empty, without spaces or '+'")
        if self.sig_type not in (SIG_ED25519, SIG_COSIGNATURE):
            raise FormatError(f"unsupported signature type 0x{self.sig_type:02x}")
        if len(self.public_raw) != 32:
            raise FormatError("an Ed25519 public key is 32 bytes")

    @property
    def key_id(self) -> int:
        return key_id(self.name, self.sig_type, self.public_raw)

    @property
    def is_cosigner(self) -> bool:
        return self.sig_type == SIG_COSIGNATURE

    def vkey(self) -> str:
        return vkey(self.name, self.public_raw, self.sig_type)

    def verify(self, text: str, signature: bytes) -> int | None:
        """Check ``signature`` (the bytes after the key ID) over ``text``.

        Returns None when it does not verify, else the cosignature's timestamp (type
        0x04) or 0 (type 0x01).
        """
        if self.sig_type == SIG_ED25519:
            ok = len(signature) == 64 and verify_signature(self.public_raw, signature, text.encode("utf-8"))
            return 0 if ok else None
        if len(signature) != 8 + 64:
            return None
        timestamp = int.from_bytes(signature[:8], "big")
        ok = verify_signature(self.public_raw, signature[8:], cosignature_message(text, timestamp))
        return timestamp if ok else None


def vkey(name: str, public_raw: bytes, sig_type: int = SIG_ED25519) -> str:
    """The C2SP vkey ``name+hex8+base64(type || public key)``."""
    verifier = Verifier(name, sig_type, public_raw)
    encoded = b64.encode(bytes([sig_type]) + public_raw)
    return f"{name}+{verifier.key_id:08x}+{encoded}"


def parse_vkey(text: str) -> Verifier:
    """Parse a vkey, splitting on the first two ``+`` only (base64 may contain ``+``)."""
    text = text.strip()
    name, sep1, rest = text.partition("+")
    hex8, sep2, key_b64 = rest.partition("+")
    if not sep1 or not sep2:
        raise FormatError(f"vkey {text[:60]!r} is not name+hex8+base64")
    if not is_valid_name(name):
        raise FormatError(f"vkey name {name!r} must be non-empty, without spaces or '+'")
    if len(hex8) != 8 or any(ch not in "0123456789abcdefABCDEF" for ch in hex8):
        raise FormatError(f"vkey key ID {hex8!r} is not 8 hex characters")
    raw = b64.decode(key_b64, "vkey key")
    if len(raw) != 33:
        raise FormatError("vkey key must be a type byte and a 32-byte Ed25519 public key")
    sig_type, public_raw = raw[0], raw[1:]
    if sig_type not in (SIG_ED25519, SIG_COSIGNATURE):
        raise FormatError(f"vkey signature type 0x{sig_type:02x} is not supported (Ed25519 0x01, cosignature 0x04)")
    verifier = Verifier(name, sig_type, public_raw)
    if verifier.key_id != int(hex8, 16):
        raise FormatError(f"vkey key ID {hex8} does not match its name and key ({verifier.key_id:08x})")
    return verifier


@dataclass(frozen=True)
class NoteSignature:
    """One signature line: the key name, the key ID and the signature bytes after it."""

    name: str
    key_id: int
    signature: bytes

    def line(self) -> str:
        encoded = b64.encode(self.key_id.to_bytes(4, "big") + self.signature)
        return f"{SIG_PREFIX}{self.name} {encoded}\n"


@dataclass(frozen=True)
class Note:
    """A parsed (not yet verified) signed note."""

    text: str
    signatures: tuple[NoteSignature, ...]

    def render(self) -> str:
        return self.text + "\n" + "".join(sig.line() for sig in self.signatures)


def _check_text(message: str) -> None:
    for ch in message:
        if ch < " " and ch != "\n":
            raise FormatError(f"note contains the control character {ch!r}")
    try:
        message.encode("utf-8")
    except UnicodeEncodeError:
        raise FormatError("note is not valid UTF-8") from None


def parse_note(message: str | bytes) -> Note:
    """Split a signed note into its text and signature lines (the last blank line rule)."""
    if isinstance(message, bytes):
        if len(message) > MAX_NOTE_BYTES:
            raise FormatError("note is larger than 1 MiB")
        try:
            message = message.decode("utf-8")
        except UnicodeDecodeError:
            raise FormatError("note is not valid UTF-8") from None
    if len(message) > MAX_NOTE_BYTES:
        raise FormatError("note is larger than 1 MiB")
    _check_text(message)
    split = message.rfind("\n\n")
    if split < 0:
        raise FormatError("note has no blank line before its signatures")
    text, block = message[: split + 1], message[split + 2:]
    if not block or not block.endswith("\n"):
        raise FormatError("note has no signature lines, or they do not end with a newline")
    signatures: list[NoteSignature] = []
    for line in block[:-1].split("\n"):
        if not line.startswith(SIG_PREFIX):
            raise FormatError(f"signature line {line[:40]!r} does not start with '\u2014 '")
        name, space, encoded = line[len(SIG_PREFIX):].partition(" ")
        if not space or not is_valid_name(name) or not encoded:
            raise FormatError(f"signature line {line[:40]!r} is not '\u2014 name base64'")
        raw = b64.decode(encoded, f"signature of {name}")
        if len(raw) < 5:
            raise FormatError(f"signature of {name} is too short")
        signatures.append(NoteSignature(name, int.from_bytes(raw[:4], "big"), raw[4:]))
        if len(signatures) > MAX_SIGNATURES:
            raise FormatError(f"note has more than {MAX_SIGNATURES} signatures")
    return Note(text, tuple(signatures))


@dataclass(frozen=True)
class VerifiedSignature:
    """A signature that verified under a known key (``timestamp`` set for cosignatures)."""

    verifier: Verifier
    signature: NoteSignature
    timestamp: int | None = None


@dataclass(frozen=True)
class OpenedNote:
    """A note whose known signatures all verified; unknown ones are kept, unverified."""

    text: str
    verified: tuple[VerifiedSignature, ...]
    unverified: tuple[NoteSignature, ...]

    def signers(self, sig_type: int) -> tuple[VerifiedSignature, ...]:
        return tuple(v for v in self.verified if v.verifier.sig_type == sig_type)


def open_note(message: str | bytes | Note, verifiers: Iterable[Verifier]) -> OpenedNote:
    """Parse and verify a note against ``verifiers`` (signed-note rules).

    Raises ``VerificationError`` when a known key's signature does not verify or when
    no known signature is present; ``FormatError`` when the note is malformed or the
    verifier list is ambiguous (two keys with one name and key ID).
    """
    note = message if isinstance(message, Note) else parse_note(message)
    known: dict[tuple[str, int], Verifier] = {}
    for candidate in verifiers:
        slot = (candidate.name, candidate.key_id)
        if slot in known and known[slot] != candidate:
            raise FormatError(f"two verifier keys share the name {candidate.name} and key ID {candidate.key_id:08x}")
        known[slot] = candidate
    verified: list[VerifiedSignature] = []
    unverified: list[NoteSignature] = []
    seen: set[tuple[str, int]] = set()
    for sig in note.signatures:
        slot = (sig.name, sig.key_id)
        verifier = known.get(slot)
        if verifier is None:
            if sig not in unverified:
                unverified.append(sig)
            continue
        if slot in seen:
            continue
        seen.add(slot)
        timestamp = verifier.verify(note.text, sig.signature)
        if timestamp is None:
            raise VerificationError(f"signature of {sig.name} ({sig.key_id:08x}) does not verify")
        verified.append(VerifiedSignature(verifier, sig, timestamp if verifier.is_cosigner else None))
    if not verified:
        raise VerificationError("no signature on the note is from a known key")
    return OpenedNote(note.text, tuple(verified), tuple(unverified))


def signature_line(text: str, name: str, signer: Signer) -> NoteSignature:
    """An Ed25519 (type 0x01) note signature over ``text`` by ``signer`` under ``name``."""
    kid = key_id(name, SIG_ED25519, signer.public_raw)
    return NoteSignature(name, kid, signer.sign(text.encode("utf-8")))


def _check_note_text(text: str) -> None:
    if not text.endswith("\n"):
        raise FormatError("note text must end with a newline")
    _check_text(text)


def sign(text: str, name: str, signer: Signer) -> str:
    """A signed note: ``text``, a blank line, and ``signer``'s signature line under ``name``."""
    _check_note_text(text)
    if not is_valid_name(name):
        raise FormatError(f"key name {name!r} must be non-empty, without spaces or '+'")
    return text + "\n" + signature_line(text, name, signer).line()


def cosign(text: str, name: str, signer: Signer, timestamp: int) -> NoteSignature:
    """A cosignature/v1 (type 0x04) over checkpoint ``text`` at unix time ``timestamp``."""
    _check_note_text(text)
    if not is_valid_name(name):
        raise FormatError(f"key name {name!r} must be non-empty, without spaces or '+'")
    if not 0 <= timestamp < 1 << 64:
        raise FormatError("cosignature time must fit an unsigned 64-bit integer")
    kid = key_id(name, SIG_COSIGNATURE, signer.public_raw)
    raw = signer.sign(cosignature_message(text, timestamp))
    return NoteSignature(name, kid, timestamp.to_bytes(8, "big") + raw)


def with_signatures(message: str, extra: Sequence[NoteSignature]) -> str:
    """The note ``message`` with ``extra`` signature lines added (duplicates of a key replaced)."""
    note = parse_note(message)
    replaced = {(sig.name, sig.key_id) for sig in extra}
    kept = [sig for sig in note.signatures if (sig.name, sig.key_id) not in replaced]
    merged = Note(note.text, (*kept, *extra))
    if len(merged.signatures) > MAX_SIGNATURES:
        raise FormatError(f"a note carries at most {MAX_SIGNATURES} signatures")
    return merged.render()
