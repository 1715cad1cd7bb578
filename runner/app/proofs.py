"""Checkpoints and proofs: sign and show C2SP checkpoints, prove inclusion and consistency, cosign as a witness.

::

    from runner.app import Session, inclusion_proof, new_checkpoint

    session = Session(db="tally.db")
    new_checkpoint(session)["note"]          # signed at the current size (never inconsistently) and stored
    inclusion_proof(session, 7).text()       # a C2SP tlog-proof for seq 7
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ledger.errors import FormatError

from .files import read_text

if TYPE_CHECKING:
    from ledger.checkpoint import ConsistencyProof, SignedCheckpoint
    from ledger.receipt import TlogProof
    from ledger.store import Ledger
    from ledger.witness import CosignResult

    from .session import Session

__all__ = ["Inclusion", "checkpoint_json", "consistency", "cosign_checkpoint", "inclusion_proof", "new_checkpoint",
           "show_checkpoint"]


def checkpoint_json(signed: SignedCheckpoint, **extra: Any) -> dict[str, Any]:
    """A signed checkpoint as ``--json`` prints it: its members and its note."""
    return {**signed.checkpoint.to_json(), "note": signed.note, **extra}


def new_checkpoint(session: Session) -> tuple[SignedCheckpoint, bool]:
    """Sign a checkpoint at the current size with the log key and store it; (checkpoint, created).

    Refuses when the tree is not consistent with a checkpoint the ledger signed before, and on a
    read-only ledger (which cannot store one).
    """
    from ledger.checkpoint import checkpoint_at
    from ledger.signing import sign_checkpoint

    book = session.ledger()
    if book.read_only:
        raise FormatError(f"{book.display_url} is read-only: a checkpoint cannot be stored; "
                          "`tally checkpoint show` prints the stored ones")
    signer = session.signer(book.url)
    existed = checkpoint_at(book, book.size()) is not None
    return sign_checkpoint(book, signer), not existed  # stored first: what is printed is what the ledger committed to


def show_checkpoint(session: Session, size: int | None) -> SignedCheckpoint:
    """The stored checkpoint at ``size`` (default: the newest)."""
    from ledger.checkpoint import stored_checkpoints

    stored = stored_checkpoints(session.ledger())
    if not stored:
        raise FormatError("no checkpoint stored yet; run `tally checkpoint`")
    if size is None:
        return stored[-1]
    found = [c for c in stored if c.size == size]
    if not found:
        raise FormatError(f"no checkpoint at size {size}; stored sizes: {', '.join(str(c.size) for c in stored)}")
    return found[0]


def _checkpoint_for(session: Session, book: Ledger, seq: int, size: int | None) -> SignedCheckpoint:
    from ledger.checkpoint import checkpoint_at, checkpoint_covering
    from ledger.signing import sign_checkpoint

    if size is not None:
        if not seq <= size <= book.size():
            raise FormatError(f"--size {size} must be between seq {seq} and the ledger size {book.size()}")
        return checkpoint_at(book, size) or sign_checkpoint(book, session.signer(book.url), size)
    return checkpoint_covering(book, seq) or sign_checkpoint(book, session.signer(book.url))


@dataclass(frozen=True)
class Inclusion:
    """An event's inclusion proof against a checkpoint covering it."""

    seq: int
    leaf_hash: bytes
    hashes: tuple[bytes, ...]
    checkpoint: SignedCheckpoint

    def to_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "index": self.seq - 1, "tree_size": self.checkpoint.size,
                "leaf_hash": self.leaf_hash.hex(), "hashes": [h.hex() for h in self.hashes],
                "root": self.checkpoint.checkpoint.root.hex(), "checkpoint": self.checkpoint.note}

    def tlog_proof(self) -> TlogProof:
        """The C2SP tlog-proof file."""
        from ledger.receipt import TlogProof

        return TlogProof(self.seq - 1, self.hashes, self.checkpoint.note)


def inclusion_proof(session: Session, seq: int, size: int | None = None) -> Inclusion:
    """Event ``seq``'s inclusion proof against the checkpoint at ``size`` (signed if needed), else the newest
    checkpoint covering it (signed if there is none)."""
    from ledger.merkle import hash_leaf

    book = session.ledger()
    if not 1 <= seq <= book.size():
        raise FormatError(f"seq {seq} is not between 1 and the ledger size {book.size()}")
    event = book.get(seq)
    chosen = _checkpoint_for(session, book, seq, size)
    hashes = book.inclusion_proof(seq - 1, chosen.size)
    return Inclusion(seq, hash_leaf(event.raw_hash), tuple(hashes), chosen)


def consistency(session: Session, old: int, new: int) -> ConsistencyProof:
    """The consistency proof from tree size ``old`` to ``new`` (with the checkpoint at ``new`` if stored)."""
    from ledger.checkpoint import consistency_proof

    return consistency_proof(session.ledger(), old, new)


def cosign_checkpoint(checkpoint_file: Path, key: Path, state_dir: Path, *, proof: Path | None,
                      vkeys: list[str], name: str | None) -> tuple[CosignResult, str]:
    """Check a checkpoint (log signature, consistency with the last one this witness cosigned) and cosign it
    now; (the result, the witness's vkey)."""
    from ledger.checkpoint import parse_consistency_proof
    from ledger.witness import Witness

    from .keys import load_key

    message = read_text(checkpoint_file, "checkpoint")
    proven = parse_consistency_proof(read_text(proof, "proof")) if proof is not None else None
    signer = load_key(key, name)
    witness = Witness(state_dir, name or signer.name, signer)
    # The state advances first: a witness must remember every checkpoint it cosigned before the
    # cosignature leaves it. The output is built before and written as UTF-8 bytes (no locale can fail
    # it); if it is lost, cosigning the same checkpoint again gives it again.
    return witness.cosign(message, vkeys, proven, now=int(time.time())), witness.vkey()
