"""Checking a ledger: ``tally verify``, ``tally export`` (a bundle) and ``tally audit``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from ledger import VerificationError
from runner.app import audit_from_tiles, audit_ledger, check_fork_proof, export_ledger, verify_stored

from .common import EXIT_FAILED, JsonOpt, command, print_json, printable, session


def verify(
    root_key: Annotated[str | None, typer.Option(help="Pin the root key id the genesis must name (rule 9).")] = None,
    since: Annotated[Path | None, typer.Option(help="A checkpoint saved earlier: prove consistency, verify after it.")] = None,
    jobs: Annotated[int, typer.Option(help="Threads checking signatures.")] = 1,
    json_out: JsonOpt = False,
) -> None:
    """Check every event against the verification rules (docs/format.md) (exit 1 with the first failing seq and rule)."""
    try:
        result = verify_stored(session, root_key=root_key, jobs=jobs, since=since)
    except VerificationError as error:
        _report_failure(error, json_out)
        raise typer.Exit(EXIT_FAILED) from None
    if json_out:
        print_json({"ok": True, **result.to_json()})
    else:
        print(result.summary())


def _report_failure(error: VerificationError, json_out: bool) -> None:
    if json_out:
        print_json({"ok": False, "seq": error.seq, "rule": error.rule, "error": str(error.args[0])})
    else:
        print(f"FAIL {error}", file=sys.stderr)


def export(
    out: Annotated[Path, typer.Argument(metavar="DIR", help="Directory to write the bundle to (new or empty).")],
    stream: Annotated[str | None, typer.Option(help="Export only this stream (with inclusion proofs).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Write an audit bundle: manifest.json, events.jsonl, checkpoint.txt, blobs/ (and proofs.jsonl).

    Exit 2 (nothing written) for a DIR that is a symbolic link or in one, not empty, or
    cannot be written, and for a --stream with no events; exit 1 when the ledger holds a
    blob reference that is not a SHA-256 digest or a blob that does not match it.
    """
    manifest = export_ledger(session, out, stream=stream)
    if json_out:
        print_json(manifest)
    else:
        print(f"exported {manifest['events']} events to {out} (checkpoint size {manifest['checkpoint_size']})")


def audit(
    bundle: Annotated[Path | None, typer.Argument(metavar="[DIR]", help="An exported bundle (default: the database).")] = None,
    root_key: Annotated[str | None, typer.Option(help="Pin the root key id the genesis must name.")] = None,
    vkey: Annotated[list[str] | None, typer.Option(help="C2SP vkey trusted for checkpoint.txt (repeatable; witness vkeys too).")] = None,
    witness_threshold: Annotated[int, typer.Option(help="Witness cosignatures required on checkpoint.txt.")] = 0,
    jobs: Annotated[int, typer.Option(help="Threads checking signatures (database audits).")] = 1,
    fork_proof: Annotated[Path | None, typer.Option(
        help="Check a fork proof file offline (two checkpoints the log signed that cannot both be true, as "
             "`tally witness fork-proof` exports): FORK and exit 1 when it holds, exit 2 when it does not. "
             "--vkey: the log's key (default: the file's).")] = None,
    tiles: Annotated[str | None, typer.Option(
        help="Audit the log served as C2SP tlog-tiles at this URL (or directory) from its tiles alone: the "
             "checkpoint (--vkey), every tile and bundle, an inclusion proof, a consistency proof (--since).")] = None,
    since: Annotated[Path | None, typer.Option(help="With --tiles: a checkpoint saved earlier, proven a prefix.")]
    = None,
    seq: Annotated[int | None, typer.Option(help="With --tiles: the event to prove included (default: the last).")]
    = None,
    edge_only: Annotated[bool, typer.Option(help="With --tiles: read only the tiles the proofs need, not every "
                                                 "tile and bundle.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print a SLSA verification summary-shaped result.")] = False,
) -> None:
    """Cryptographic checks, then every protocol invariant (docs/events.md); exit 1 naming the first failure.

    A bundle is read as hostile input (docs/format.md, export bundles); one that fails
    is one line on stderr, exit 1; a DIR that is not a directory or cannot be read, exit 2.
    """
    if fork_proof is not None:
        fork = check_fork_proof(fork_proof, vkey or [])
        if json_out:
            print_json(fork.to_json())
        else:
            for line in fork.lines():
                print(line)
        raise typer.Exit(EXIT_FAILED)
    if tiles is not None:
        try:
            result = audit_from_tiles(tiles, vkey or [], witness_threshold=witness_threshold, since=since, seq=seq,
                                      full=not edge_only)
        except VerificationError as error:
            if json_out:
                print_json({"ok": False, "error": str(error.args[0])})
            else:
                print(printable(f"FAIL {error.args[0]}"), file=sys.stderr)
            raise typer.Exit(EXIT_FAILED) from None
        if json_out:
            print_json(result.to_json())
        else:
            for line in result.lines():
                print(line)
        return
    report = audit_ledger(session, bundle, root_key=root_key, vkeys=vkey, witness_threshold=witness_threshold,
                          jobs=jobs)
    if json_out:
        print_json(report.to_json())
    else:
        if report.crypto_error is not None:  # one line on stderr, as `verify`
            (line,) = report.lines()
            print(printable(line), file=sys.stderr)
        else:
            for line in report.lines():
                print(line)
    if not report.ok:
        raise typer.Exit(EXIT_FAILED)



def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    command(app, "verify")(verify)
    command(app, "export")(export)
    command(app, "audit")(audit)
