"""Transparency commands: checkpoint, keys vkey, witness, prove, blob get, receipt."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ledger.errors import FormatError, VerificationError

from .common import EXIT_FAILED, command, handle_errors, print_json, state

if TYPE_CHECKING:
    from ledger.checkpoint import SignedCheckpoint
    from ledger.note import Verifier
    from ledger.store import Ledger

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]


def register(app: typer.Typer, groups: dict[str, typer.Typer]) -> None:
    """Add checkpoint, witness, prove, blob and receipt to ``app`` and ``keys vkey`` to the keys group."""
    checkpoint_group = typer.Typer(
        help="Sign a C2SP checkpoint at the current size with the log key (key name = origin), store it and "
             "print it; refuses when the tree is not consistent with a checkpoint signed before. "
             "'checkpoint show' prints a stored one.",
        invoke_without_command=True,
    )
    checkpoint_group.callback(invoke_without_command=True)(handle_errors(checkpoint))
    command(checkpoint_group, "show")(checkpoint_show)
    app.add_typer(checkpoint_group, name="checkpoint")

    command(groups["keys"], "vkey")(keys_vkey)

    witness = typer.Typer(help="Cosign checkpoints as a witness (C2SP tlog-cosignature).", no_args_is_help=True)
    command(witness, "cosign")(witness_cosign)
    command(witness, "vkey")(witness_vkey)
    app.add_typer(witness, name="witness")

    prove = typer.Typer(help="Merkle inclusion and consistency proofs from stored subtree hashes.",
                        no_args_is_help=True)
    command(prove, "inclusion")(prove_inclusion)
    command(prove, "consistency")(prove_consistency)
    app.add_typer(prove, name="prove")

    blob = typer.Typer(help="Content-addressed evidence stored beside the events.", no_args_is_help=True)
    command(blob, "get")(blob_get)
    app.add_typer(blob, name="blob")

    receipt = typer.Typer(help="Signed receipts of gate results and decisions, verifiable offline.",
                          no_args_is_help=True)
    command(receipt, "export")(receipt_export)
    command(receipt, "verify")(receipt_verify)
    app.add_typer(receipt, name="receipt")


def _read_text(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise FormatError(f"cannot read {what} {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise FormatError(f"{what} {path} is not UTF-8 text") from None


def _checkpoint_json(signed: SignedCheckpoint, **extra: Any) -> dict[str, Any]:
    return {**signed.checkpoint.to_json(), "note": signed.note, **extra}


# --------------------------------------------------------------------------- checkpoint


def checkpoint(ctx: typer.Context, json_out: JsonOpt = False) -> None:
    """Sign a checkpoint at the current size with the log key (key name = origin) and store it.

    Refuses when the tree is not consistent with a checkpoint the ledger signed before.
    Prints the checkpoint note (save it to check the ledger later with verify --since).
    """
    if ctx.invoked_subcommand is not None:
        return
    from ledger.checkpoint import checkpoint_at, sign_checkpoint

    book = state.ledger()
    signer = state.signer(book.url)
    existed = checkpoint_at(book, book.size()) is not None
    signed = sign_checkpoint(book, signer)
    if json_out:
        print_json(_checkpoint_json(signed, created=not existed))
    else:
        sys.stdout.write(signed.note)


def checkpoint_show(
    size: Annotated[int | None, typer.Option(help="The checkpoint at this size (default: the newest).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Print a stored checkpoint note."""
    from ledger.checkpoint import stored_checkpoints

    stored = stored_checkpoints(state.ledger())
    if not stored:
        raise FormatError("no checkpoint stored yet; run `tally checkpoint`")
    if size is None:
        chosen = stored[-1]
    else:
        found = [c for c in stored if c.size == size]
        if not found:
            raise FormatError(f"no checkpoint at size {size}; stored sizes: {', '.join(str(c.size) for c in stored)}")
        chosen = found[0]
    if json_out:
        print_json(_checkpoint_json(chosen))
    else:
        sys.stdout.write(chosen.note)


def keys_vkey(
    key: Annotated[str | None, typer.Argument(help="Key id, unique prefix or name (default: the signing key).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Print a key's C2SP vkey: name+hex8+base64(type || key).

    Log keys (root, signer) are named after the origin with type 0x01 (checkpoints);
    witness keys keep their name with type 0x04 (cosignatures).
    """
    from ledger.checkpoint import LOG_ROLES
    from ledger.note import SIG_COSIGNATURE, SIG_ED25519, vkey

    book = state.ledger()
    ring = book.key_ring()
    if key is not None:
        info = ring.find(key)
    else:
        try:
            signer_id = state.signer(book.url).id
        except FormatError:
            signer_id = None
        roots = [k for k in ring.keys.values() if "root" in k.roles and k.revoked_at_seq is None]
        if signer_id is not None and signer_id in ring.keys:
            info = ring.keys[signer_id]
        elif roots:
            info = roots[0]
        else:
            raise FormatError("no active root key and no signing key; name the key: tally keys vkey ID")
    if set(info.roles) & set(LOG_ROLES):
        text = vkey(book.info.origin, info.public_raw, SIG_ED25519)
    elif "witness" in info.roles:
        text = vkey(info.name, info.public_raw, SIG_COSIGNATURE)
    else:  # pragma: no cover - every role is one of the above
        raise FormatError(f"key {info.id[:16]} has no role that signs notes")
    if json_out:
        print_json({"id": info.id, "name": info.name, "roles": list(info.roles), "vkey": text})
    else:
        print(text)


# --------------------------------------------------------------------------- witness


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

    message = _read_text(checkpoint_file, "checkpoint")
    consistency = parse_consistency_proof(_read_text(proof, "proof")) if proof is not None else None
    signer = _load_key(key, name)
    witness = Witness(state_dir, name or signer.name, signer)
    result = witness.cosign(message, vkey or [], consistency, now=int(time.time()))
    if json_out:
        print_json({**result.checkpoint.to_json(), "old_size": result.old_size, "time": result.timestamp,
                    "cosignature": result.line, "note": result.note, "vkey": witness.vkey()})
    else:
        sys.stdout.write(result.note)


def witness_vkey(
    key: Annotated[Path, typer.Option("--key", help="The witness's Ed25519 private or public key.")],
    name: Annotated[str | None, typer.Option(help="The witness's key name (default: the key file's stem).")] = None,
) -> None:
    """Print the witness's cosigner vkey (type 0x04), for log operators and auditors."""
    from ledger.keys import load_public_key
    from ledger.note import SIG_COSIGNATURE, vkey

    stem = Path(key.name.removesuffix(".pub")).stem  # as `witness cosign` names the key: w1.pem -> w1
    print(vkey(name or stem, load_public_key(key), SIG_COSIGNATURE))


# --------------------------------------------------------------------------- prove


def _checkpoint_for(book: Ledger, seq: int, size: int | None) -> SignedCheckpoint:
    from ledger.checkpoint import checkpoint_at, checkpoint_covering, sign_checkpoint

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

    proof = consistency_proof(state.ledger(), old, new)
    if json_out:
        print_json(proof.to_json())
    else:
        sys.stdout.write(proof.text())


# --------------------------------------------------------------------------- blob


def blob_get(
    sha256: Annotated[str, typer.Argument(metavar="SHA256", help="The blob's digest (hex, optionally sha256:).")],
    out: Annotated[Path | None, typer.Option(help="Write to this file instead of standard output.")] = None,
) -> None:
    """Write a blob's bytes (checked against its digest) to standard output."""
    import hashlib
    import re

    from ledger.errors import IntegrityError

    digest = sha256.removeprefix("sha256:").lower()
    if not re.fullmatch(r"[0-9a-f]{64}", digest):
        raise FormatError(f"{sha256!r} is not a SHA-256 digest (64 hex characters)")
    blob = state.ledger().blob(digest)
    if blob is None:
        raise FormatError(f"no blob sha256:{digest} in this ledger")
    if hashlib.sha256(blob.data).hexdigest() != digest:
        raise IntegrityError(f"stored blob sha256:{digest} does not match its digest")
    if out is not None:
        out.write_bytes(blob.data)
    else:
        sys.stdout.buffer.write(blob.data)
        sys.stdout.buffer.flush()


# --------------------------------------------------------------------------- receipt


def _cosigned_checkpoint(book: Ledger, path: Path, seq: int) -> SignedCheckpoint:
    """A checkpoint file (e.g. with witness cosignatures) checked against this ledger."""
    from ledger.checkpoint import SignedCheckpoint, log_verifiers, open_checkpoint

    message = _read_text(path, "checkpoint")
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
    json_out: JsonOpt = False,
) -> None:
    """Export a receipt: a DSSE-signed in-toto Statement, its tlog-proof, and the event."""
    from ledger.receipt import build_receipt, write_receipt
    from runner.events.receipts import WINDOW_RECEIPTS

    book = state.ledger()
    signer = state.signer(book.url)
    chosen = _cosigned_checkpoint(book, checkpoint_file, seq) if checkpoint_file is not None else None
    receipt = build_receipt(book, seq, signer, WINDOW_RECEIPTS, chosen)
    envelope, proof, event = write_receipt(receipt, out)
    if json_out:
        print_json({"seq": seq, "envelope": str(envelope), "proof": str(proof), "event": str(event),
                    "checkpoint_size": _proof_size(receipt.proof.checkpoint)})
    else:
        print(envelope)
        print(proof)
        print(event)


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
            lines = [line.strip() for line in _read_text(path, "vkey file").splitlines()]
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
    from runner.events.receipts import WINDOW_RECEIPTS

    keys = _vkeys(vkey)
    log_keys = [k for k in keys if not k.is_cosigner]
    witnesses = [k for k in keys if k.is_cosigner]
    proof_path = proof or _sibling(envelope_file, ".tlog-proof")
    event_path = event or _sibling(envelope_file, ".event.json")
    envelope_text = _read_text(envelope_file, "receipt")
    proof_text = _read_text(proof_path, "tlog-proof")
    event_text = _read_text(event_path, "event") if (event is not None or event_path.exists()) else None
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
