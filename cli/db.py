"""Ledger creation and schema: ``tally init`` and ``tally db upgrade``."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from ledger.errors import FormatError

from .common import JsonOpt, command, print_json, state


def init(
    origin: Annotated[str | None, typer.Option(help="Log origin (C2SP checkpoint origin and log key name).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Create the schema and the genesis event (and .tally/root.pem when no key is given)."""
    from ledger.db import sqlite_path
    from ledger.keys import generate_key_file, load_signer
    from ledger.store import Ledger

    book = Ledger(state.db)
    path = sqlite_path(book.url)
    if path is not None and path.is_symlink():  # init creates the file: never through a planted link
        raise FormatError(f"the database path {path} is a symbolic link; refusing to create a ledger through it "
                          "(give its real path)")
    origin = origin or f"tally.local/{os.urandom(4).hex()}"
    book.check_init(origin)  # refuse a database init would refuse before a key is created
    key_path = state.key_path(book.url)
    created_key = False
    if state.key or os.environ.get("TALLY_KEY") or key_path.exists():
        root = load_signer(key_path, "root")
    else:
        root = generate_key_file(key_path, "root")
        created_key = True
    genesis = book.init(origin, root)
    result = {
        "ledger": genesis.ledger,
        "origin": genesis.payload["origin"],
        "db": book.display_url,
        "root_key": {"id": root.id, "path": str(key_path), "created": created_key},
        "seq": genesis.seq,
        "hash": genesis.hash,
    }
    if json_out:
        print_json(result)
        return
    print(f"initialised ledger {genesis.ledger} (origin {result['origin']}) at {book.display_url}")
    print(f"root key {root.id} {'created at' if created_key else 'from'} {key_path}")


def db_upgrade() -> None:
    """Bring the database schema to the newest revision."""
    from ledger.store import Ledger

    revision = Ledger(state.db).upgrade()
    print(f"schema at {revision}")


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    command(app, "init")(init)
    db = typer.Typer(help="Database schema (Alembic migrations).", no_args_is_help=True)
    command(db, "upgrade")(db_upgrade)
    app.add_typer(db, name="db")
