"""Window execution commands and ``tally demo``."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Annotated

import typer

from ledger.errors import FormatError

from .common import command


def register(app: typer.Typer, groups: dict[str, typer.Typer]) -> None:
    """Add ``demo`` (and, with window execution, run/resume/abort/report)."""
    command(app, "demo")(demo)


def demo(
    directory: Annotated[Path, typer.Option("--dir", help="Where to leave everything.")] = Path("tally-demo"),
    scenario: Annotated[str, typer.Option(help="ledger: the ledger walkthrough.")] = "ledger",
    force: Annotated[bool, typer.Option(help="Reuse a non-empty --dir (its content is removed).")] = False,
) -> None:
    """Run a self-contained demo and leave its ledger and outputs in --dir."""
    from runner.demo.ledger_tour import ledger_tour

    if directory.exists() and any(directory.iterdir()):
        if not force:
            raise FormatError(f"{directory} is not empty; pass --force to replace it or --dir elsewhere")
        shutil.rmtree(directory)
    if scenario != "ledger":
        raise FormatError(f"--scenario {scenario!r}: expected one of ledger")
    result = ledger_tour(directory)
    if result.caught_seq != result.tampered_seq:
        raise typer.Exit(1)
    print(f"\nShown: a signed, hash-chained ledger verifies; an edit made behind its back is caught at "
          f"seq {result.caught_seq} (rule {result.caught_rule}). Inspect {directory}/ (tally.db, bundle/).")
