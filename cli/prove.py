"""``tally prove``: Merkle inclusion and consistency proofs from stored subtree hashes."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from runner.app import consistency, inclusion_proof

from .common import JsonOpt, check_seq, command, print_json, session


def prove_inclusion(
    seq: Annotated[int, typer.Argument(help="Event seq.")],
    size: Annotated[int | None, typer.Option(help="Use the checkpoint at this size (signed if needed).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Print a C2SP tlog-proof for an event against the newest checkpoint covering it."""
    check_seq(seq, "seq")
    if size is not None:
        check_seq(size, "--size")
    proof = inclusion_proof(session, seq, size)
    if json_out:
        print_json(proof.to_json())
    else:
        sys.stdout.write(proof.tlog_proof().text())


def prove_consistency(
    old: Annotated[int, typer.Argument(help="The smaller tree size (>= 1).")],
    new: Annotated[int, typer.Argument(help="The larger tree size (<= the ledger size).")],
    json_out: JsonOpt = False,
) -> None:
    """Print a consistency proof: 'old N', base64 hashes, a blank line, the checkpoint at NEW if stored."""
    check_seq(old, "OLD")
    check_seq(new, "NEW")
    proof = consistency(session, old, new)
    if json_out:
        print_json(proof.to_json())
    else:
        sys.stdout.write(proof.text())


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    prove = typer.Typer(help="Merkle inclusion and consistency proofs from stored subtree hashes.",
                        no_args_is_help=True)
    command(prove, "inclusion")(prove_inclusion)
    command(prove, "consistency")(prove_consistency)
    app.add_typer(prove, name="prove")
