"""``tally receipt``: signed receipts of gate results and decisions, verifiable offline."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from ledger import VerificationError
from runner.app import export_receipt, receipt_in_served_tiles, verify_receipt_files

from .common import EXIT_FAILED, JsonOpt, check_seq, command, print_json, session


def receipt_export(
    seq: Annotated[int, typer.Argument(help="Seq of a gate.result or decision.recorded event.")],
    out: Annotated[Path, typer.Option(help="Directory to write <seq>.dsse.json, <seq>.tlog-proof, <seq>.event.json.")],
    checkpoint_file: Annotated[Path | None, typer.Option(
        "--checkpoint", help="Prove against this checkpoint file (e.g. one cosigned by witnesses).")] = None,
    window_context: Annotated[bool, typer.Option(
        "--window-context", help="Also write <seq>.context.jsonl and <seq>.context-proofs.jsonl: the window's "
                                 "events up to SEQ, each proven against the receipt's checkpoint "
                                 "(what `tally promote check` reads).")] = False,
    witnesses: Annotated[Path | None, typer.Option(
        help="A tlog-policy file: sign a checkpoint now, collect its cosignatures from the policy's witnesses "
             "over HTTP (short of the quorum: exit 3, nothing written) and prove the receipt against it.")] = None,
    witness_timeout: Annotated[float, typer.Option(help="Seconds each witness has to answer.")] = 10.0,
    json_out: JsonOpt = False,
) -> None:
    """Export a receipt: a DSSE-signed in-toto Statement, its tlog-proof, and the event.

    The files are written whole (temporary file, fsync, rename) into --out, which must
    not be a symlink; a symlink planted at one of the file names is refused.
    """
    check_seq(seq, "SEQ")
    written = export_receipt(session, seq, out, checkpoint_file=checkpoint_file, window_context=window_context,
                             witnesses=witnesses, witness_timeout=witness_timeout)
    if json_out:
        context = written.context
        print_json({"seq": seq, "envelope": str(written.envelope), "proof": str(written.proof),
                    "event": str(written.event), "checkpoint_size": written.checkpoint_size,
                    **({"context": str(context[0]), "context_proofs": str(context[1])} if context else {})})
    else:
        print(written.envelope)
        print(written.proof)
        print(written.event)
        for path in written.context:
            print(path)


def receipt_verify(
    envelope_file: Annotated[Path, typer.Argument(metavar="FILE", help="The receipt's <seq>.dsse.json.")],
    vkey: Annotated[list[str], typer.Option(help="Trusted vkey (or a file of vkeys): the log key, and "
                                                 "witness keys (type 0x04). Repeatable.")],
    proof: Annotated[Path | None, typer.Option(help="The tlog-proof (default: <seq>.tlog-proof beside FILE).")] = None,
    event: Annotated[Path | None, typer.Option(help="The event (default: <seq>.event.json beside FILE, if present).")]
    = None,
    witness_threshold: Annotated[int | None, typer.Option(
        help="Witness cosignatures required (default: every witness vkey given).")] = None,
    tiles: Annotated[str | None, typer.Option(
        help="Also check the receipt against the log served as tlog-tiles at this URL (or directory): its "
             "checkpoint a prefix of the served one, its event in the served tree.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Verify a receipt offline: DSSE signature, Statement subject, inclusion proof, checkpoint."""
    try:
        result = verify_receipt_files(envelope_file, vkey, proof=proof, event=event,
                                      witness_threshold=witness_threshold)
        served = None if tiles is None else receipt_in_served_tiles(
            tiles, vkey, seq=result.seq, event_hash=result.event_hash, receipt_checkpoint=result.checkpoint)
    except VerificationError as error:
        if json_out:
            print_json({"valid": False, "error": str(error.args[0]), "rule": error.rule})
        else:
            print(f"FAIL {envelope_file}: {error.args[0]}", file=sys.stderr)
        raise typer.Exit(EXIT_FAILED) from None
    if json_out:
        print_json({**result.to_json(), **({} if served is None else {"tiles": {
            "location": served.location, "size": served.checkpoint.size, "receipt_size": served.receipt_size}})})
        return
    what = result.result or result.statement.get("predicate", {}).get("result", "")
    cosigned = len(result.checkpoint.witnesses)
    witnesses_note = f", {cosigned} witness cosignature(s)" if cosigned else ""
    print(f"OK {result.origin}#{result.seq} {result.predicate_type} {what}: signed by {result.signed_by[0][:16]}, "
          f"included at index {result.seq - 1} of checkpoint size {result.checkpoint.size}{witnesses_note}"
          f"{'' if result.event is not None else ' (event file not checked)'}")
    if served is not None:
        print(served.line())


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    receipt = typer.Typer(help="Signed receipts of gate results and decisions, verifiable offline.",
                          no_args_is_help=True)
    command(receipt, "export")(receipt_export)
    command(receipt, "verify")(receipt_verify)
    app.add_typer(receipt, name="receipt")
