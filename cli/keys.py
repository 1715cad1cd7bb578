"""``tally keys``: Ed25519 keys: create, list, add to the ledger, revoke, publish."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ledger.errors import FormatError

from .common import JsonOpt, command, print_appended, print_json, state


def keys_new(
    name: Annotated[str, typer.Argument(help="Name of the key (e.g. operator-1, witness-a).")],
    out: Annotated[Path | None, typer.Option(help="Where to write the PEM (default .tally/NAME.pem).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Create an Ed25519 key (PKCS#8 PEM, mode 0600; encrypted when TALLY_KEY_PASSPHRASE is set)."""
    from ledger.keys import generate_key_file

    path = out or state.key_path().parent / f"{name}.pem"
    signer = generate_key_file(path, name)
    result = {"id": signer.id, "name": name, "path": str(path), "public_key_path": f"{path}.pub",
              "public_key": signer.public_b64}
    if json_out:
        print_json(result)
    else:
        print(f"{signer.id}  {name}  {path} (public key {path}.pub)")


def keys_list(json_out: JsonOpt = False) -> None:
    """List the keys the ledger knows (from its key events)."""
    ring = state.ledger().key_ring()
    rows = [info.to_json() for info in ring.keys.values()]
    if json_out:
        print_json(rows)
        return
    for row in rows:
        revoked = f"revoked at seq {row['revoked_at_seq']}" if row["revoked_at_seq"] else "active"
        print(f"{row['id']}  {row['name']:<16} {','.join(row['roles']):<14} {revoked}")


def keys_add(
    public_key_file: Annotated[Path, typer.Argument(help="PEM public key, PEM private key, or base64 raw key.")],
    name: Annotated[str, typer.Option(help="Name the ledger will know the key by.")],
    role: Annotated[list[str], typer.Option(help="Role: root, signer or witness (repeatable).")],
    json_out: JsonOpt = False,
) -> None:
    """Append key.added (signed by a root key)."""
    from ledger.keys import ROLES, key_entry, load_public_key

    unknown = [r for r in role if r not in ROLES]
    if unknown:
        raise FormatError(f"--role {unknown[0]!r}: expected one of {', '.join(ROLES)}")
    public_raw = load_public_key(public_key_file)
    book = state.ledger()
    event = book.append("ledger", "key.added", key_entry(public_raw, name, role), state.signer(book.url))
    print_appended(event, json_out)


def keys_revoke(
    key: Annotated[str, typer.Argument(help="Key id (or unique prefix, or name).")],
    reason: Annotated[str, typer.Option(help="Why the key is revoked (recorded).")],
    json_out: JsonOpt = False,
) -> None:
    """Append key.revoked (signed by a root key)."""
    book = state.ledger()
    info = book.key_ring().find(key)
    event = book.append("ledger", "key.revoked", {"id": info.id, "reason": reason}, state.signer(book.url))
    print_appended(event, json_out)


def keys_vkey(
    key: Annotated[str | None, typer.Argument(help="Key id, unique prefix or name (default: the signing key).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Print a key's C2SP vkey: name+hex8+base64(type || key).

    Log keys (root, signer) are named after the origin with type 0x01 (checkpoints);
    witness keys keep their name with type 0x04 (cosignatures).
    """
    from ledger.checkpoint import LOG_ROLES
    from ledger.note import SIG_COSIGNATURE, SIG_ED25519, vkey

    book = state.ledger()
    ring = book.key_ring()
    if key is not None:
        info = ring.find(key)
    else:
        try:
            signer_id = state.signer(book.url).id
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
    if json_out:
        print_json({"id": info.id, "name": info.name, "roles": list(info.roles), "vkey": text})
    else:
        print(text)


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    keys = typer.Typer(help="Ed25519 keys: create, list, add to the ledger, revoke, publish.", no_args_is_help=True)
    command(keys, "new")(keys_new)
    command(keys, "list")(keys_list)
    command(keys, "add")(keys_add)
    command(keys, "revoke")(keys_revoke)
    command(keys, "vkey")(keys_vkey)
    app.add_typer(keys, name="keys")
