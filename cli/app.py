"""The ``tally`` command: global options and the command groups.

Each ``cli/*_cmds.py`` module adds its commands through ``register(app, groups)``;
modules import heavy libraries inside their commands so that start-up stays fast.
"""

from __future__ import annotations

from typing import Annotated

import typer

from . import common

app = typer.Typer(
    name="tally",
    help="Tamper-evident ledger and replayable runner for pre-registered A/B windows.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,
)

# Groups that more than one module adds commands to.
groups: dict[str, typer.Typer] = {
    name: typer.Typer(help=help_text, no_args_is_help=True)
    for name, help_text in {
        "db": "Database schema (Alembic migrations).",
        "keys": "Ed25519 keys: create, list, add to the ledger, revoke, publish.",
        "replay": "Derive state and verdicts by replaying the ledger.",
        "window": "Register, run, resume, abort and report windows.",
        "chain": "Chain mode: preflight and the previous-window check.",
        "gate": "Gates checked before any host contact; each appends gate.result.",
    }.items()
}


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        print(f"tally {version('tally')}")
        raise typer.Exit(0)


@app.callback()
def _global(
    db: Annotated[str | None, typer.Option("--db", envvar="TALLY_DB", help="Database URL or SQLite path (default tally.db).")] = None,
    key: Annotated[str | None, typer.Option("--key", envvar="TALLY_KEY", help="Signing key (PKCS#8 PEM); default .tally/root.pem beside the database.")] = None,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")] = False,
) -> None:
    common.state.db = db
    common.state.key = key


def _register() -> None:
    from . import (
        ledger_cmds,
        measure_cmds,
        run_cmds,
        transparency_cmds,
        verdict_cmds,
        window_cmds,
    )

    for module in (ledger_cmds, transparency_cmds, measure_cmds, verdict_cmds, window_cmds, run_cmds):
        module.register(app, groups)
    for name, group in groups.items():
        if group.registered_commands or group.registered_groups:
            app.add_typer(group, name=name)


_register()


def main() -> None:
    app()
