"""Ledger creation and schema: ``tally init`` and ``tally db upgrade``."""

from __future__ import annotations

from typing import Annotated

import typer

from runner.app import init_ledger, upgrade_ledger

from .common import JsonOpt, command, print_json, session


def init(
    origin: Annotated[str | None, typer.Option(help="Log origin (C2SP checkpoint origin and log key name).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Create the schema and the genesis event (and .tally/root.pem when no key is given)."""
    result = init_ledger(session, origin)
    if json_out:
        print_json(result)
        return
    key = result["root_key"]
    print(f"initialised ledger {result['ledger']} (origin {result['origin']}) at {result['db']}")
    print(f"root key {key['id']} {'created at' if key['created'] else 'from'} {key['path']}")


def db_upgrade() -> None:
    """Bring the database schema to the newest revision."""
    print(f"schema at {upgrade_ledger(session)}")


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    command(app, "init")(init)
    db = typer.Typer(help="Database schema (Alembic migrations).", no_args_is_help=True)
    command(db, "upgrade")(db_upgrade)
    app.add_typer(db, name="db")
