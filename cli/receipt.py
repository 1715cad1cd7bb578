"""``tally receipt``: signed receipts of gate results and decisions, verifiable offline."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ledger.errors import VerificationError

from .common import (
    EXIT_FAILED,
    JsonOpt,
    OutDir,
    check_out,
    check_seq,
    command,
    print_json,
    read_optional_text,
    read_text,
    state,
)

if TYPE_CHECKING:

    from ledger.checkpoint import SignedCheckpoint
    from ledger.note import Verifier
    from ledger.store import Ledger


def _cosigned_checkpoint(book: Ledger, path: Path, seq: int) -> SignedCheckpoint:
    """A checkpoint file (e.g. with witness cosignatures) checked against this ledger."""
    from ledger.checkpoint import SignedCheckpoint, log_verifiers, open_checkpoint

    message = read_text(path, "checkpoint")
    origin = book.info.origin
    verified = open_checkpoint(message, log_verifiers(origin, book.key_ring()), threshold=0, origin=origin)
    if not seq <= verified.size <= book.size() or book.root(verified.size) != verified.root:
        raise VerificationError(f"{path} is not a checkpoint of this ledger covering seq {seq}", rule="checkpoint")
    return SignedCheckpoint(verified.checkpoint, message)


def receipt_export(
    seq: Annotated[int, typer.Argument(help="Seq of a gate.result or decision.recorded event.")],
    out: Annotated[Path, typer.Option(help="Directory to write <seq>.dsse.json, <seq>.tlog-proof, <seq>.event.json.")],
    checkpoint_file: Annotated[Path | None, typer.Option(
        "--checkpoint", help="Prove against this checkpoint file (e.g. one cosigned by witnesses).")] = None,
    window_context: Annotated[bool, typer.Option(
        "--window-context", help="Also write <seq>.context.jsonl and <seq>.context-proofs.jsonl: the window's "
                                 "events up to SEQ, each proven against the receipt's checkpoint "
                                 "(what `tally promote check` reads).")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Export a receipt: a DSSE-signed in-toto Statement, its tlog-proof, and the event.

    The files are written whole (temporary file, fsync, rename) into --out, which must
    not be a symlink; a symlink planted at one of the file names is refused.
    """
    from ledger.receipt import build_receipt, receipt_paths
    from runner.events.receipts import WINDOW_RECEIPTS

    check_seq(seq, "SEQ")
    context_names = (f"{seq}.context.jsonl", f"{seq}.context-proofs.jsonl") if window_context else ()
    check_out(out, *(p.name for p in receipt_paths(out, seq)), *context_names)
    book = state.ledger()
    signer = state.signer(book.url)
    chosen = _cosigned_checkpoint(book, checkpoint_file, seq) if checkpoint_file is not None else None
    receipt = build_receipt(book, seq, signer, WINDOW_RECEIPTS, chosen)
    envelope, proof, event = receipt_paths(out, seq)
    context = None
    if window_context:
        from runner.events.receipts import receipt_context

        context = receipt_context(book, receipt.event, _proof_size(receipt.proof.checkpoint))
    with OutDir.open(out) as target:
        target.write(envelope.name, receipt.envelope.dumps().encode("utf-8"))
        target.write(proof.name, receipt.proof.text().encode("utf-8"))
        target.write(event.name, (receipt.event.line() + "\n").encode("utf-8"))
        if context is not None:
            for name, data in zip(context_names, context, strict=True):
                target.write(name, data)
    written = [out / name for name in context_names]
    if json_out:
        print_json({"seq": seq, "envelope": str(envelope), "proof": str(proof), "event": str(event),
                    "checkpoint_size": _proof_size(receipt.proof.checkpoint),
                    **({"context": str(written[0]), "context_proofs": str(written[1])} if written else {})})
    else:
        print(envelope)
        print(proof)
        print(event)
        for path in written:
            print(path)


def _proof_size(message: str) -> int:
    from ledger.checkpoint import parse_checkpoint
    from ledger.note import parse_note

    return parse_checkpoint(parse_note(message).text).size


def _vkeys(values: list[str]) -> list[Verifier]:
    """vkeys given inline, or files holding one vkey per line."""
    from ledger.note import parse_vkey

    out: list[Verifier] = []
    for value in values:
        path = Path(value)
        if "+" not in value and path.is_file():
            lines = [line.strip() for line in read_text(path, "vkey file").splitlines()]
            out.extend(parse_vkey(line) for line in lines if line and not line.startswith("#"))
        else:
            out.append(parse_vkey(value))
    return out


def _sibling(path: Path, suffix: str) -> Path:
    name = path.name
    stem = name[: -len(".dsse.json")] if name.endswith(".dsse.json") else path.stem
    return path.with_name(stem + suffix)


def receipt_verify(
    envelope_file: Annotated[Path, typer.Argument(metavar="FILE", help="The receipt's <seq>.dsse.json.")],
    vkey: Annotated[list[str], typer.Option(help="Trusted vkey (or a file of vkeys): the log key, and "
                                                 "witness keys (type 0x04). Repeatable.")],
    proof: Annotated[Path | None, typer.Option(help="The tlog-proof (default: <seq>.tlog-proof beside FILE).")] = None,
    event: Annotated[Path | None, typer.Option(help="The event (default: <seq>.event.json beside FILE, if present).")]
    = None,
    witness_threshold: Annotated[int | None, typer.Option(
        help="Witness cosignatures required (default: every witness vkey given).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Verify a receipt offline: DSSE signature, Statement subject, inclusion proof, checkpoint."""
    from ledger.receipt import verify_receipt
    from ledger.strictjson import read_json
    from runner.events.receipts import WINDOW_RECEIPTS

    keys = _vkeys(vkey)
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
    try:
        result = verify_receipt(envelope_text, proof_text, log_keys, policy=WINDOW_RECEIPTS, witnesses=witnesses,
                                threshold=witness_threshold, event_text=event_text)
    except VerificationError as error:
        if json_out:
            print_json({"valid": False, "error": str(error.args[0]), "rule": error.rule})
        else:
            print(f"FAIL {envelope_file}: {error.args[0]}", file=sys.stderr)
        raise typer.Exit(EXIT_FAILED) from None
    if json_out:
        print_json(result.to_json())
        return
    what = result.result or result.statement.get("predicate", {}).get("result", "")
    cosigned = len(result.checkpoint.witnesses)
    witnesses_note = f", {cosigned} witness cosignature(s)" if cosigned else ""
    print(f"OK {result.origin}#{result.seq} {result.predicate_type} {what}: signed by {result.signed_by[0][:16]}, "
          f"included at index {result.seq - 1} of checkpoint size {result.checkpoint.size}{witnesses_note}"
          f"{'' if result.event is not None else ' (event file not checked)'}")


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    receipt = typer.Typer(help="Signed receipts of gate results and decisions, verifiable offline.",
                          no_args_is_help=True)
    command(receipt, "export")(receipt_export)
    command(receipt, "verify")(receipt_verify)
    app.add_typer(receipt, name="receipt")
