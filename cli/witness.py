"""``tally witness``: cosign checkpoints as a witness (C2SP tlog-cosignature)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from runner.app import cosign_checkpoint, witness_vkey

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


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    witness = typer.Typer(help="Cosign checkpoints as a witness (C2SP tlog-cosignature).", no_args_is_help=True)
    command(witness, "cosign")(witness_cosign)
    command(witness, "vkey")(witness_vkey_cmd)
    app.add_typer(witness, name="witness")
