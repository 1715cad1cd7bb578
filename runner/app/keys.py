"""Keys: create one, list the ledger's, add and revoke them (signed by a root key), publish vkeys.

::

    from runner.app import Session, add_key, key_vkey, new_key

    session = Session(db="tally.db")
    witness = new_key(session, "witness-a")                 # .tally/witness-a.pem (+ .pub), mode 0600
    add_key(session, Path(witness["public_key_path"]), "witness-a", ["witness"])
    key_vkey(session, "witness-a")["vkey"]                  # name+hex8+base64(0x04 || key)
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ledger.errors import FormatError

if TYPE_CHECKING:
    from ledger.event import Event
    from ledger.keys import Signer

    from .session import Session

__all__ = ["add_key", "key_vkey", "list_keys", "load_key", "new_key", "revoke_key", "witness_vkey"]


def new_key(session: Session, name: str, out: Path | None = None) -> dict[str, Any]:
    """Create an Ed25519 key file (PKCS#8 PEM, mode 0600; encrypted when TALLY_KEY_PASSPHRASE is set)."""
    from ledger.keys import generate_key_file

    path = out or session.key_path().parent / f"{name}.pem"
    signer = generate_key_file(path, name)
    return {"id": signer.id, "name": name, "path": str(path), "public_key_path": f"{path}.pub",
            "public_key": signer.public_b64}


def list_keys(session: Session) -> list[dict[str, Any]]:
    """The keys the ledger knows (from its key events)."""
    return [info.to_json() for info in session.ledger().key_ring().keys.values()]


def add_key(session: Session, public_key_file: Path, name: str, roles: list[str]) -> Event:
    """Append ``key.added`` (signed by a root key) for a public key file (PEM or base64 raw key)."""
    from ledger.keys import ROLES, key_entry, load_public_key

    unknown = [r for r in roles if r not in ROLES]
    if unknown:
        raise FormatError(f"--role {unknown[0]!r}: expected one of {', '.join(ROLES)}")
    public_raw = load_public_key(public_key_file)
    book = session.ledger()
    return book.append("ledger", "key.added", key_entry(public_raw, name, roles), session.signer(book.url))


def revoke_key(session: Session, key: str, reason: str) -> Event:
    """Append ``key.revoked`` (signed by a root key) for a key id, unique prefix or name."""
    book = session.ledger()
    info = book.key_ring().find(key)
    return book.append("ledger", "key.revoked", {"id": info.id, "reason": reason}, session.signer(book.url))


def key_vkey(session: Session, key: str | None) -> dict[str, Any]:
    """A key's C2SP vkey (default: the signing key, else the first active root key).

    Log keys (root, signer) are named after the origin with type 0x01 (checkpoints);
    witness keys keep their name with type 0x04 (cosignatures).
    """
    from ledger.checkpoint import LOG_ROLES
    from ledger.note import SIG_COSIGNATURE, SIG_ED25519, vkey

    book = session.ledger()
    ring = book.key_ring()
    if key is not None:
        info = ring.find(key)
    else:
        try:
            signer_id = session.signer(book.url).id
        except FormatError:
            signer_id = None
        roots = [k for k in ring.keys.values() if "root" in k.roles and k.revoked_at_seq is None]
        if signer_id is not None and signer_id in ring.keys:
            info = ring.keys[signer_id]
        elif roots:
            info = roots[0]
        else:
            raise FormatError("no active root key and no signing key; name the key: tally keys vkey ID")
    if set(info.roles) & set(LOG_ROLES):
        text = vkey(book.info.origin, info.public_raw, SIG_ED25519)
    elif "witness" in info.roles:
        text = vkey(info.name, info.public_raw, SIG_COSIGNATURE)
    else:  # pragma: no cover - every role is one of the above
        raise FormatError(f"key {info.id[:16]} has no role that signs notes")
    return {"id": info.id, "name": info.name, "roles": list(info.roles), "vkey": text}


def load_key(path: Path, name: str | None) -> Signer:
    """A private key file (a witness's), under ``name`` (default: the file's stem)."""
    from ledger.keys import load_signer

    return load_signer(path, name or "")


def witness_vkey(key: Path, name: str | None) -> str:
    """A witness's cosigner vkey (type 0x04) from its private or public key file."""
    from ledger.keys import load_public_key
    from ledger.note import SIG_COSIGNATURE, vkey

    stem = Path(key.name.removesuffix(".pub")).stem  # as `witness cosign` names the key: w1.pem -> w1
    return vkey(name or stem, load_public_key(key), SIG_COSIGNATURE)
