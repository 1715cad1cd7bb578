"""``tally keys``: Ed25519 keys: create, list, add to the ledger, revoke, publish."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from runner.app import add_key, key_vkey, list_keys, new_key, revoke_key

from .common import JsonOpt, command, print_appended, print_json, session


def keys_new(
    name: Annotated[str, typer.Argument(help="Name of the key (e.g. operator-1, witness-a).")],
    out: Annotated[Path | None, typer.Option(help="Where to write the PEM (default .tally/NAME.pem).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Create an Ed25519 key (PKCS#8 PEM, mode 0600; encrypted when TALLY_KEY_PASSPHRASE is set)."""
    result = new_key(session, name, out)
    if json_out:
        print_json(result)
    else:
        print(f"{result['id']}  {name}  {result['path']} (public key {result['public_key_path']})")


def keys_list(json_out: JsonOpt = False) -> None:
    """List the keys the ledger knows (from its key events)."""
    rows = list_keys(session)
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
    print_appended(add_key(session, public_key_file, name, role), json_out)


def keys_revoke(
    key: Annotated[str, typer.Argument(help="Key id (or unique prefix, or name).")],
    reason: Annotated[str, typer.Option(help="Why the key is revoked (recorded).")],
    json_out: JsonOpt = False,
) -> None:
    """Append key.revoked (signed by a root key)."""
    print_appended(revoke_key(session, key, reason), json_out)


def keys_vkey(
    key: Annotated[str | None, typer.Argument(help="Key id, unique prefix or name (default: the signing key).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Print a key's C2SP vkey: name+hex8+base64(type || key).

    Log keys (root, signer) are named after the origin with type 0x01 (checkpoints);
    witness keys keep their name with type 0x04 (cosignatures).
    """
    result = key_vkey(session, key)
    if json_out:
        print_json(result)
    else:
        print(result["vkey"])


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    keys = typer.Typer(help="Ed25519 keys: create, list, add to the ledger, revoke, publish.", no_args_is_help=True)
    command(keys, "new")(keys_new)
    command(keys, "list")(keys_list)
    command(keys, "add")(keys_add)
    command(keys, "revoke")(keys_revoke)
    command(keys, "vkey")(keys_vkey)
    app.add_typer(keys, name="keys")
