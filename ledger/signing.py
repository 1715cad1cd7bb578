"""Signing with the log key: checkpoints over the tree the events themselves give.

``sign_checkpoint`` signs and stores a C2SP checkpoint at a size, over the root that
``ledger.trusted.trusted_tree`` computed from verified events (never a stored subtree
hash it did not re-check), and never one inconsistent with a checkpoint the ledger
signed before. Receipts (``ledger.receipt.build_receipt``) sign only events
``trusted_event`` re-checked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import merkle
from . import note as notes
from .checkpoint import LOG_ROLES, Checkpoint, SignedCheckpoint, _reason, _stored, checkpoint_at
from .errors import FormatError, PolicyError, StorageError, VerificationError
from .keys import Signer
from .trusted import TrustedTree, trusted_tree

if TYPE_CHECKING:
    from .store import Ledger

__all__ = ["sign_checkpoint"]

CONSISTENCY_BATCH = 64  # stored checkpoints checked per node query when signing


def _require_consistent(ledger: Ledger, earlier: SignedCheckpoint, size: int, root: bytes) -> None:
    """Refuse (``PolicyError``) unless a tree of ``size`` with ``root`` is consistent with ``earlier``."""
    old, new = sorted((earlier.size, size))
    old_root, new_root = (earlier.checkpoint.root, root) if earlier.size <= size else (root, earlier.checkpoint.root)
    try:
        proof = ledger.consistency_proof(old, new) if old != new else []
        merkle.verify_consistency(old, new, old_root, new_root, proof)
    except (VerificationError, StorageError, FormatError) as exc:
        raise PolicyError(
            f"refusing to sign: the tree at size {size} is not consistent with the checkpoint "
            f"this ledger signed at size {earlier.size} ({exc})"
        ) from None


def _require_all_consistent(ledger: Ledger, stored: list[SignedCheckpoint], size: int, root: bytes) -> None:
    """``_require_consistent`` for every stored checkpoint; the smaller ones in batches of one query."""
    smaller = [c for c in stored if c.size < size]
    for offset in range(0, len(smaller), CONSISTENCY_BATCH):
        chunk = smaller[offset:offset + CONSISTENCY_BATCH]
        try:
            proofs = merkle.consistency_proofs([c.size for c in chunk], size, ledger.fetch_nodes)
        except (StorageError, FormatError) as exc:
            raise PolicyError(f"refusing to sign: the tree at size {size} cannot be proved consistent with "
                              f"the checkpoints signed before ({_reason(exc)})") from None
        for earlier, proof in zip(chunk, proofs, strict=True):
            try:
                merkle.verify_consistency(earlier.size, size, earlier.checkpoint.root, root, proof)
            except VerificationError as exc:
                raise PolicyError(
                    f"refusing to sign: the tree at size {size} is not consistent with the checkpoint "
                    f"this ledger signed at size {earlier.size} ({_reason(exc)})"
                ) from None
    for earlier in stored:
        if earlier.size >= size:
            _require_consistent(ledger, earlier, size, root)


def sign_checkpoint(ledger: Ledger, signer: Signer, size: int | None = None, *,
                    tree: TrustedTree | None = None) -> SignedCheckpoint:
    """Sign (and store) a checkpoint of ``ledger`` at ``size`` (default: its current size).

    The root signed is the one ``trusted_tree`` computes from the events themselves (a
    stored subtree hash is never signed unchecked); the stored tree must agree with it.
    Returns the stored checkpoint if one at that size exists. Refuses with
    ``PolicyError`` when ``signer`` may not sign for the ledger (by the key ring of its
    verified key events), when the ledger is smaller than a checkpoint it signed
    (truncated), or when the tree at ``size`` is not consistent with every checkpoint
    stored before; with ``VerificationError`` when the events do not verify.
    """
    origin = ledger.info.origin
    current = ledger.size()
    size = current if size is None else size
    if not 1 <= size <= current:
        raise FormatError(f"size {size} is not between 1 and the ledger size {current}")
    tree = tree if tree is not None and tree.size == size else trusted_tree(ledger, size)
    tree.ring.require(signer.id, LOG_ROLES)
    stored = _stored(ledger, origin)
    for earlier in stored:
        if earlier.size > current:
            raise PolicyError(
                f"refusing to sign: the ledger has {current} events but signed a checkpoint at size "
                f"{earlier.size} (history truncated)"
            )
    root = tree.root
    try:
        stored_root = ledger.root(size)
    except StorageError:
        stored_root = None
    if stored_root != root:
        raise VerificationError(f"refusing to sign: the stored Merkle tree at size {size} is not the tree of the "
                                "events (run `tally verify`: it names the stored subtree hashes that differ)",
                                seq=size, rule="cache")
    _require_all_consistent(ledger, stored, size, root)
    existing = next((c for c in stored if c.size == size), None)
    if existing is not None:
        return existing
    body = Checkpoint(origin, size, root)
    message = notes.sign(body.text(), origin, signer)
    try:
        ledger.store_checkpoint(size, message)
    except Exception as exc:  # the database refused the row: maybe a concurrent signer stored this size first
        again = checkpoint_at(ledger, size)
        if again is None or again.checkpoint != body:
            raise StorageError(f"could not store the checkpoint at size {size}: {type(exc).__name__}") from None
        return again
    return SignedCheckpoint(body, message)
