"""Receipts: export a signed receipt of a gate result or a decision, and verify one offline.

::

    from runner.app import Session, export_receipt, verify_receipt_files

    written = export_receipt(Session(db="tally.db"), 12, Path("out"), window_context=True)
    verify_receipt_files(Path("out/12.dsse.json"), ["origin+1234abcd+AQ..."]).seq      # 12
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ledger.errors import FormatError, VerificationError

from .files import read_optional_text, read_text, read_vkeys
from .outdir import OutDir, check_out

if TYPE_CHECKING:
    from ledger.checkpoint import SignedCheckpoint
    from ledger.receipt import VerifiedReceipt
    from ledger.store import Ledger

    from .session import Session

__all__ = ["ExportedReceipt", "export_receipt", "verify_receipt_files"]


@dataclass(frozen=True)
class ExportedReceipt:
    """The files a receipt export wrote."""

    seq: int
    envelope: Path
    proof: Path
    event: Path
    checkpoint_size: int
    context: tuple[Path, ...]          # <seq>.context.jsonl and <seq>.context-proofs.jsonl, when asked for


def _cosigned_checkpoint(book: Ledger, path: Path | str, seq: int) -> SignedCheckpoint:
    """A checkpoint file (e.g. with witness cosignatures; or the note itself) checked against this ledger."""
    from ledger.checkpoint import SignedCheckpoint, log_verifiers, open_checkpoint

    message = read_text(path, "checkpoint") if isinstance(path, Path) else path
    origin = book.info.origin
    verified = open_checkpoint(message, log_verifiers(origin, book.key_ring()), threshold=0, origin=origin)
    if not seq <= verified.size <= book.size() or book.root(verified.size) != verified.root:
        raise VerificationError(f"{path} is not a checkpoint of this ledger covering seq {seq}", rule="checkpoint")
    return SignedCheckpoint(verified.checkpoint, message)


def _proof_size(message: str) -> int:
    from ledger.checkpoint import parse_checkpoint
    from ledger.note import parse_note

    return parse_checkpoint(parse_note(message).text).size


def export_receipt(session: Session, seq: int, out: Path, *, checkpoint_file: Path | None = None,
                   window_context: bool = False, witnesses: Path | None = None,
                   witness_timeout: float = 10.0) -> ExportedReceipt:
    """Write a receipt into ``out``: a DSSE-signed in-toto Statement, its tlog-proof, the event, and with
    ``window_context`` the window's events up to ``seq``, each proven against the receipt's checkpoint.

    The files are written whole (temporary file, fsync, rename) into ``out``, which must not be
    a symlink; a symlink planted at one of the file names is refused before anything is read.
    With ``witnesses`` (a tlog-policy file) a checkpoint at the current size is signed and cosigned
    by the policy's quorum over HTTP (``cosign_by_policy``, fail closed) and the receipt proven against it.
    """
    from ledger.receipt import build_receipt, receipt_paths

    from ..events import WINDOW_RECEIPTS, receipt_context

    context_names = (f"{seq}.context.jsonl", f"{seq}.context-proofs.jsonl") if window_context else ()
    check_out(out, *(p.name for p in receipt_paths(out, seq)), *context_names)
    book = session.ledger()
    signer = session.signer(book.url)
    if witnesses is not None and checkpoint_file is not None:
        raise FormatError("give --checkpoint or --witnesses, not both")
    chosen = _cosigned_checkpoint(book, checkpoint_file, seq) if checkpoint_file is not None else None
    if witnesses is not None:
        from .witnessing import cosign_by_policy

        cosigned = cosign_by_policy(session, witnesses, timeout=witness_timeout, fail_open=False)
        chosen = _cosigned_checkpoint(book, cosigned.note, seq)
    receipt = build_receipt(book, seq, signer, WINDOW_RECEIPTS, chosen)
    envelope, proof, event = receipt_paths(out, seq)
    context = receipt_context(book, receipt.event, _proof_size(receipt.proof.checkpoint)) if window_context else None
    with OutDir.open(out) as target:
        target.write(envelope.name, receipt.envelope.dumps().encode("utf-8"))
        target.write(proof.name, receipt.proof.text().encode("utf-8"))
        target.write(event.name, (receipt.event.line() + "\n").encode("utf-8"))
        if context is not None:
            for name, data in zip(context_names, context, strict=True):
                target.write(name, data)
    return ExportedReceipt(seq, envelope, proof, event, _proof_size(receipt.proof.checkpoint),
                           tuple(out / name for name in context_names))


def _sibling(path: Path, suffix: str) -> Path:
    name = path.name
    stem = name[: -len(".dsse.json")] if name.endswith(".dsse.json") else path.stem
    return path.with_name(stem + suffix)


def verify_receipt_files(envelope_file: Path, vkeys: list[str], *, proof: Path | None = None,
                         event: Path | None = None, witness_threshold: int | None = None) -> VerifiedReceipt:
    """Verify a receipt offline: DSSE signature, Statement subject, inclusion proof, checkpoint (and witness
    cosignatures); ``VerificationError`` names what failed. ``proof`` and ``event`` default to the files beside
    ``envelope_file`` (the event only when present)."""
    from ledger.receipt import verify_receipt
    from ledger.strictjson import read_json

    from ..events import WINDOW_RECEIPTS

    keys = read_vkeys(vkeys)
    log_keys = [k for k in keys if not k.is_cosigner]
    witnesses = [k for k in keys if k.is_cosigner]
    proof_path = proof or _sibling(envelope_file, ".tlog-proof")
    event_path = event or _sibling(envelope_file, ".event.json")
    # Hostile input first: bounded size and nesting, one value per member, no NaN (one line, exit 2).
    envelope_text = read_text(envelope_file, "receipt")
    read_json(envelope_text, f"receipt {envelope_file}")
    event_text = read_text(event_path, "event") if event is not None else read_optional_text(event_path, "event")
    if event_text is not None:
        read_json(event_text, f"event {event_path}")
    proof_text = read_text(proof_path, "tlog-proof")
    return verify_receipt(envelope_text, proof_text, log_keys, policy=WINDOW_RECEIPTS, witnesses=witnesses,
                          threshold=witness_threshold, event_text=event_text)
