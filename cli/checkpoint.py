"""``tally checkpoint``: sign and show C2SP checkpoints of the ledger's Merkle tree."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from ledger.errors import FormatError

from .common import JsonOpt, check_seq, command, handle_errors, print_json, state, write_data

if TYPE_CHECKING:

    from ledger.checkpoint import SignedCheckpoint


def _checkpoint_json(signed: SignedCheckpoint, **extra: Any) -> dict[str, Any]:
    return {**signed.checkpoint.to_json(), "note": signed.note, **extra}


def checkpoint(ctx: typer.Context, json_out: JsonOpt = False) -> None:
    """Sign a checkpoint at the current size with the log key (key name = origin) and store it.

    Refuses when the tree is not consistent with a checkpoint the ledger signed before.
    Prints the checkpoint note (save it to check the ledger later with verify --since).
    """
    if ctx.invoked_subcommand is not None:
        return
    from ledger.checkpoint import checkpoint_at
    from ledger.signing import sign_checkpoint

    book = state.ledger()
    if book.read_only:
        raise FormatError(f"{book.display_url} is read-only: a checkpoint cannot be stored; "
                          "`tally checkpoint show` prints the stored ones")
    signer = state.signer(book.url)
    existed = checkpoint_at(book, book.size()) is not None
    signed = sign_checkpoint(book, signer)  # stored first: what is printed is what the ledger committed to
    # Printing cannot fail on the locale (UTF-8 bytes); a lost output is `tally checkpoint show` away.
    if json_out:
        print_json(_checkpoint_json(signed, created=not existed))
    else:
        write_data(signed.note)


def checkpoint_show(
    size: Annotated[int | None, typer.Option(help="The checkpoint at this size (default: the newest).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Print a stored checkpoint note."""
    from ledger.checkpoint import stored_checkpoints

    if size is not None:
        check_seq(size, "--size")
    stored = stored_checkpoints(state.ledger())
    if not stored:
        raise FormatError("no checkpoint stored yet; run `tally checkpoint`")
    if size is None:
        chosen = stored[-1]
    else:
        found = [c for c in stored if c.size == size]
        if not found:
            raise FormatError(f"no checkpoint at size {size}; stored sizes: {', '.join(str(c.size) for c in stored)}")
        chosen = found[0]
    if json_out:
        print_json(_checkpoint_json(chosen))
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
