"""``tally witness``: cosign checkpoints as a witness (C2SP tlog-cosignature)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer

from .common import JsonOpt, command, print_json, read_text, write_data


def _load_key(path: Path, name: str | None) -> Any:
    from ledger.keys import load_signer

    return load_signer(path, name or "")


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
    from ledger.checkpoint import parse_consistency_proof
    from ledger.witness import Witness

    message = read_text(checkpoint_file, "checkpoint")
    consistency = parse_consistency_proof(read_text(proof, "proof")) if proof is not None else None
    signer = _load_key(key, name)
    witness = Witness(state_dir, name or signer.name, signer)
    # The state advances first: a witness must remember every checkpoint it cosigned before the
    # cosignature leaves it. The output is built before and written as UTF-8 bytes (no locale can fail
    # it); if it is lost, cosigning the same checkpoint again gives it again.
    result = witness.cosign(message, vkey or [], consistency, now=int(time.time()))
    if json_out:
        print_json({**result.checkpoint.to_json(), "old_size": result.old_size, "time": result.timestamp,
                    "cosignature": result.line, "note": result.note, "vkey": witness.vkey()})
    else:
        write_data(result.note)


def witness_vkey(
    key: Annotated[Path, typer.Option("--key", help="The witness's Ed25519 private or public key.")],
    name: Annotated[str | None, typer.Option(help="The witness's key name (default: the key file's stem).")] = None,
) -> None:
    """Print the witness's cosigner vkey (type 0x04), for log operators and auditors."""
    from ledger.keys import load_public_key
    from ledger.note import SIG_COSIGNATURE, vkey

    stem = Path(key.name.removesuffix(".pub")).stem  # as `witness cosign` names the key: w1.pem -> w1
    print(vkey(name or stem, load_public_key(key), SIG_COSIGNATURE))


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    witness = typer.Typer(help="Cosign checkpoints as a witness (C2SP tlog-cosignature).", no_args_is_help=True)
    command(witness, "cosign")(witness_cosign)
    command(witness, "vkey")(witness_vkey)
    app.add_typer(witness, name="witness")
