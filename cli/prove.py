"""``tally prove``: Merkle inclusion and consistency proofs from stored subtree hashes."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated

import typer

from ledger.errors import FormatError

from .common import JsonOpt, check_seq, command, print_json, state

if TYPE_CHECKING:

    from ledger.checkpoint import SignedCheckpoint
    from ledger.store import Ledger


def _checkpoint_for(book: Ledger, seq: int, size: int | None) -> SignedCheckpoint:
    from ledger.checkpoint import checkpoint_at, checkpoint_covering
    from ledger.signing import sign_checkpoint

    if size is not None:
        if not seq <= size <= book.size():
            raise FormatError(f"--size {size} must be between seq {seq} and the ledger size {book.size()}")
        return checkpoint_at(book, size) or sign_checkpoint(book, state.signer(book.url), size)
    return checkpoint_covering(book, seq) or sign_checkpoint(book, state.signer(book.url))


def prove_inclusion(
    seq: Annotated[int, typer.Argument(help="Event seq.")],
    size: Annotated[int | None, typer.Option(help="Use the checkpoint at this size (signed if needed).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Print a C2SP tlog-proof for an event against the newest checkpoint covering it."""
    from ledger.merkle import hash_leaf
    from ledger.receipt import TlogProof

    check_seq(seq, "seq")
    if size is not None:
        check_seq(size, "--size")
    book = state.ledger()
    if not 1 <= seq <= book.size():
        raise FormatError(f"seq {seq} is not between 1 and the ledger size {book.size()}")
    event = book.get(seq)
    chosen = _checkpoint_for(book, seq, size)
    hashes = book.inclusion_proof(seq - 1, chosen.size)
    if json_out:
        print_json({"seq": seq, "index": seq - 1, "tree_size": chosen.size,
                    "leaf_hash": hash_leaf(event.raw_hash).hex(), "hashes": [h.hex() for h in hashes],
                    "root": chosen.checkpoint.root.hex(), "checkpoint": chosen.note})
    else:
        sys.stdout.write(TlogProof(seq - 1, tuple(hashes), chosen.note).text())


def prove_consistency(
    old: Annotated[int, typer.Argument(help="The smaller tree size (>= 1).")],
    new: Annotated[int, typer.Argument(help="The larger tree size (<= the ledger size).")],
    json_out: JsonOpt = False,
) -> None:
    """Print a consistency proof: 'old N', base64 hashes, a blank line, the checkpoint at NEW if stored."""
    from ledger.checkpoint import consistency_proof

    check_seq(old, "OLD")
    check_seq(new, "NEW")
    proof = consistency_proof(state.ledger(), old, new)
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
