"""``tally witness``: cosign checkpoints as a witness (C2SP tlog-cosignature)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from runner.app import cosign_checkpoint, export_fork_proof, list_evidence, serve_witness, witness_vkey

from .common import JsonOpt, command, print_json, write_data


def witness_cosign(
    checkpoint_file: Annotated[Path, typer.Argument(metavar="CHECKPOINT_FILE", help="The signed checkpoint note.")],
    key: Annotated[Path, typer.Option("--key", help="The witness's Ed25519 private key (PEM).")],
    state_dir: Annotated[Path, typer.Option("--state", help="The witness's state directory.")],
    proof: Annotated[Path | None, typer.Option(help="Consistency proof from the last cosigned size "
                                                    "(output of tally prove consistency, text or --json).")] = None,
    vkey: Annotated[list[str] | None, typer.Option(help="The log's vkey (repeatable; remembered per origin).")] = None,
    name: Annotated[str | None, typer.Option(help="The witness's key name (default: the key file's stem).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Check a checkpoint (log signature, consistency with the last one cosigned) and cosign it.

    Prints the checkpoint with a timestamped cosignature/v1 line added; refuses a
    rollback or a fork with exit 1.
    """
    result, witness_key = cosign_checkpoint(checkpoint_file, key, state_dir, proof=proof, vkeys=vkey or [],
                                            name=name)
    if json_out:
        print_json({**result.checkpoint.to_json(), "old_size": result.old_size, "time": result.timestamp,
                    "cosignature": result.line, "note": result.note, "vkey": witness_key})
    else:
        write_data(result.note)


def witness_vkey_cmd(
    key: Annotated[Path, typer.Option("--key", help="The witness's Ed25519 private or public key.")],
    name: Annotated[str | None, typer.Option(help="The witness's key name (default: the key file's stem).")] = None,
) -> None:
    """Print the witness's cosigner vkey (type 0x04), for log operators and auditors."""
    print(witness_vkey(key, name))


def witness_serve(
    key: Annotated[Path, typer.Option("--key", help="The witness's Ed25519 private key (PEM).")],
    name: Annotated[str | None, typer.Option(help="The witness's key name (default: the key file's stem).")] = None,
    db: Annotated[str | None, typer.Option("--db", help="The witness's database: a SQLite file or a PostgreSQL "
                                                        "URL (default: witness.db).")] = None,
    logs: Annotated[Path | None, typer.Option(help="The logs it witnesses: a witness network 'logs/v0' list "
                                                   "(vkey, origin, qpd, contact).")] = None,
    log: Annotated[list[str] | None, typer.Option(help="A log vkey to witness (origin: its name). Repeatable.")] = None,
    host: Annotated[str, typer.Option(help="Address to listen on (loopback unless --public).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 7380,
    prefix: Annotated[str, typer.Option(help="URL prefix of add-checkpoint and the monitor endpoint.")] = "",
    public: Annotated[bool, typer.Option(help="Allow a --host that is not loopback.")] = False,
    max_body: Annotated[int, typer.Option(help="Largest add-checkpoint body accepted (bytes).")] = 16384,
    max_connections: Annotated[int, typer.Option(help="Concurrent connections before answering 503.")] = 64,
) -> None:
    """Serve a C2SP tlog-witness over HTTP: POST <prefix>/add-checkpoint, GET <prefix>/<sha256(origin)>/checkpoint.

    Keeps every log-signed submission refused as inconsistent (`tally witness evidence`).
    """
    run = serve_witness(key, name, db=db or "witness.db", logs_file=logs, log_vkeys=log or [], host=host,
                        port=port, prefix=prefix, public=public, max_body=max_body, concurrency=max_connections)
    skipped = f", {run.skipped} entries with keys tally cannot verify skipped" if run.skipped else ""
    print(f"witness {run.vkey} for {run.logs} log(s){skipped}; database {run.database}; "
          f"listening on http://{host}:{port}{prefix}", flush=True)
    run.run()


def witness_evidence(
    db: Annotated[str | None, typer.Option("--db", help="The witness's database (default: witness.db).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """List the evidence log: log-signed submissions refused as inconsistent (split views, failed proofs)."""
    entries = list_evidence(db or "witness.db")
    if json_out:
        print_json({"evidence": [e.to_json() for e in entries]})
        return
    for e in entries:
        shown = e.to_json()
        print(f"{e.id} {e.kind} {e.origin} cosigned size {shown['cosigned_size']}, submitted size "
              f"{shown['submitted_size']} (old {e.old_size}) at {e.time}")


def witness_fork_proof(
    evidence_id: Annotated[int, typer.Argument(metavar="ID", help="An evidence entry (tally witness evidence).")],
    out: Annotated[Path, typer.Option(help="The fork proof file to write.")],
    vkey: Annotated[list[str], typer.Option(help="The log's vkey (repeatable).")],
    db: Annotated[str | None, typer.Option("--db", help="The witness's database (default: witness.db).")] = None,
    witness_key: Annotated[str | None, typer.Option(help="This witness's vkey, named in the file.")] = None,
) -> None:
    """Export a split view kept as evidence as a fork proof file (`tally audit --fork-proof FILE` checks it)."""
    print(export_fork_proof(db or "witness.db", evidence_id, out, vkey, witness_key))


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    witness = typer.Typer(help="Cosign checkpoints as a witness (C2SP tlog-cosignature).", no_args_is_help=True)
    command(witness, "cosign")(witness_cosign)
    command(witness, "vkey")(witness_vkey_cmd)
    command(witness, "serve")(witness_serve)
    command(witness, "evidence")(witness_evidence)
    command(witness, "fork-proof")(witness_fork_proof)
    app.add_typer(witness, name="witness")
