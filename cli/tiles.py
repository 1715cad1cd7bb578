"""``tally tiles``: the ledger's Merkle tree as C2SP tlog-tiles, static files for any web server."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from runner.app import publish_tiles

from .common import JsonOpt, command, print_json, session


def tiles_publish(
    out: Annotated[Path, typer.Argument(metavar="DIR", help="The directory the web server serves (created if needed).")],
    checkpoint_file: Annotated[Path | None, typer.Option(
        "--checkpoint", help="Publish this checkpoint of the ledger (e.g. cosigned) instead of the newest stored.")] = None,
    events: Annotated[bool, typer.Option(help="Also write tile/events/ bundles of the canonical event lines.")] = True,
    json_out: JsonOpt = False,
) -> None:
    """Write tiles, entry bundles and the checkpoint into DIR: only what is new, the checkpoint last.

    A reader never sees a checkpoint whose tiles are not there; a DIR holding another log's
    tiles, or a tree this one does not extend, is refused (exit 2).
    """
    result = publish_tiles(session, out, checkpoint_file=checkpoint_file, events=events)
    if json_out:
        print_json({"size": result.size, "written": result.written, "kept": result.kept,
                    "bytes_written": result.bytes_written, "checkpoint_changed": result.checkpoint_changed})
    else:
        print(f"published size {result.size} to {out}: {len(result.written)} files written "
              f"({result.bytes_written} bytes), {result.kept} kept")


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    group = typer.Typer(help="Publish the ledger's tree as C2SP tlog-tiles (static files).", no_args_is_help=True)
    command(group, "publish")(tiles_publish)
    app.add_typer(group, name="tiles")
