"""``tally checkpoint``: sign and show C2SP checkpoints of the ledger's Merkle tree."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from runner.app import checkpoint_json, cosign_by_policy, new_checkpoint, show_checkpoint

from .common import JsonOpt, check_seq, command, handle_errors, print_json, session, write_data


def checkpoint(
    ctx: typer.Context,
    witnesses: Annotated[Path | None, typer.Option(
        help="A tlog-policy file (witness NAME VKEY URL, group, quorum): collect cosignatures from its "
             "witnesses over HTTP and print the cosigned note; short of the quorum, exit 3 and print nothing.")] = None,
    witness_timeout: Annotated[float, typer.Option(help="Seconds each witness has to answer.")] = 10.0,
    fail_open: Annotated[bool, typer.Option(help="Print the note with what was collected even short of the "
                                                 "quorum (a warning on stderr).")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Sign a checkpoint at the current size with the log key (key name = origin) and store it.

    Refuses when the tree is not consistent with a checkpoint the ledger signed before.
    Prints the checkpoint note (save it to check the ledger later with verify --since).
    """
    if ctx.invoked_subcommand is not None:
        return
    if witnesses is None:
        signed, created = new_checkpoint(session)
        if json_out:
            print_json(checkpoint_json(signed, created=created))
        else:
            write_data(signed.note)
        return
    result = cosign_by_policy(session, witnesses, timeout=witness_timeout, fail_open=fail_open)
    collected = result.collected
    if not collected.quorum:
        print(f"tally: warning: witness quorum not met ({len(collected.lines)} cosigned); printing what was "
              "collected (--fail-open)", file=sys.stderr)
    for name, why in sorted(collected.failures.items()):
        print(f"tally: witness {name}: {why}", file=sys.stderr)
    if json_out:
        print_json({**checkpoint_json(result.signed, created=result.created), "note": result.note,
                    "log_note": result.signed.note, "cosigned_by": sorted(collected.lines), "failed": collected.failures,
                    "quorum": collected.quorum})
    else:
        write_data(result.note)


def checkpoint_show(
    size: Annotated[int | None, typer.Option(help="The checkpoint at this size (default: the newest).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Print a stored checkpoint note."""
    if size is not None:
        check_seq(size, "--size")
    chosen = show_checkpoint(session, size)
    if json_out:
        print_json(checkpoint_json(chosen))
    else:
        write_data(chosen.note)


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    group = typer.Typer(
        help="Sign a C2SP checkpoint at the current size with the log key (key name = origin), store it and "
             "print it; refuses when the tree is not consistent with a checkpoint signed before. "
             "'checkpoint show' prints a stored one.",
        invoke_without_command=True,
    )
    group.callback(invoke_without_command=True)(handle_errors(checkpoint))
    command(group, "show")(checkpoint_show)
    app.add_typer(group, name="checkpoint")
