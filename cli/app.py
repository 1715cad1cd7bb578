"""The ``tally`` command: global options and the command groups.

One module per command group (``cli/window.py`` holds ``tally window ...``, ``cli/gate.py``
``tally gate ...``; top-level commands live with their kin: ``init`` in ``db``, ``append``
``log`` ``show`` in ``events``, ``verify`` ``export`` ``audit`` in ``audit``, ``rehearse`` in
``gate``); each adds its commands through ``register(app)``. Modules import heavy
libraries inside their commands so that start-up stays fast.
"""

from __future__ import annotations

import sys
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
    common.session.db = db
    common.session.key = key


def _register() -> None:
    from . import (
        archive,
        audit,
        blob,
        chain,
        checkpoint,
        db,
        demo,
        events,
        gate,
        keys,
        measure,
        promote,
        prove,
        receipt,
        replay,
        sim,
        tiles,
        verdict,
        window,
        witness,
    )

    for module in (db, keys, events, audit, checkpoint, witness, prove, blob, receipt, tiles, measure, sim,
                   verdict, window, gate, chain, replay, archive, promote, demo):
        module.register(app)


_register()


def _streams_never_fail() -> None:
    """stdout and stderr escape what their encoding cannot write instead of raising.

    With an ASCII locale (``LC_ALL=POSIX PYTHONUTF8=0``) Python's stdout is strict ASCII:
    an em dash in a checkpoint note, an accent in a stream name would raise
    UnicodeEncodeError after the command had done its work. Text for people is escaped
    (``\u2014``); machine output is written as UTF-8 bytes (``common.write_data``).
    """
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None and not common.encodes_everything(stream):
            reconfigure(errors="backslashreplace")


def main() -> None:
    _streams_never_fail()
    app()
