"""``tally blob``: content-addressed evidence stored beside the events."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from runner.app import get_blob, write_out_file

from .common import command, session


def blob_get(
    sha256: Annotated[str, typer.Argument(metavar="SHA256", help="The blob's digest (hex, optionally sha256:).")],
    out: Annotated[Path | None, typer.Option(
        help="Write to this file instead of standard output (whole or not at all; never through a symlink).")] = None,
) -> None:
    """Write a blob's bytes (checked against its digest) to standard output."""
    data = get_blob(session, sha256)
    if out is not None:
        write_out_file(out, data)
    else:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    blob = typer.Typer(help="Content-addressed evidence stored beside the events.", no_args_is_help=True)
    command(blob, "get")(blob_get)
    app.add_typer(blob, name="blob")
