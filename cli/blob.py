"""``tally blob``: content-addressed evidence stored beside the events."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from ledger.errors import FormatError

from .common import command, state, write_out_file


def blob_get(
    sha256: Annotated[str, typer.Argument(metavar="SHA256", help="The blob's digest (hex, optionally sha256:).")],
    out: Annotated[Path | None, typer.Option(
        help="Write to this file instead of standard output (whole or not at all; never through a symlink).")] = None,
) -> None:
    """Write a blob's bytes (checked against its digest) to standard output."""
    import hashlib
    import re

    from ledger.errors import IntegrityError

    digest = sha256.removeprefix("sha256:").lower()
    if not re.fullmatch(r"[0-9a-f]{64}", digest):
        raise FormatError(f"{sha256!r} is not a SHA-256 digest (64 hex characters)")
    blob = state.ledger().blob(digest)
    if blob is None:
        raise FormatError(f"no blob sha256:{digest} in this ledger")
    if hashlib.sha256(blob.data).hexdigest() != digest:
        raise IntegrityError(f"stored blob sha256:{digest} does not match its digest")
    if out is not None:
        write_out_file(out, blob.data)
    else:
        sys.stdout.buffer.write(blob.data)
        sys.stdout.buffer.flush()


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    blob = typer.Typer(help="Content-addressed evidence stored beside the events.", no_args_is_help=True)
    command(blob, "get")(blob_get)
    app.add_typer(blob, name="blob")
