"""Ledger commands: init, db upgrade, keys, append, log, show, verify, export, audit."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ledger.errors import FormatError, VerificationError

from .common import EXIT_FAILED, command, print_json, read_json_arg, state

if TYPE_CHECKING:
    from ledger.event import Event


def register(app: typer.Typer, groups: dict[str, typer.Typer]) -> None:
    """Add the ledger commands to ``app`` and the ``db`` and ``keys`` groups."""
    command(app, "init")(init)
    command(groups["db"], "upgrade")(db_upgrade)
    keys = groups["keys"]
    command(keys, "new")(keys_new)
    command(keys, "list")(keys_list)
    command(keys, "add")(keys_add)
    command(keys, "revoke")(keys_revoke)
    command(app, "append")(append)
    command(app, "log")(log)
    command(app, "show")(show)
    command(app, "verify")(verify)
    command(app, "export")(export)
    command(app, "audit")(audit)


JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]


# --------------------------------------------------------------------------- init, db


def init(
    origin: Annotated[str | None, typer.Option(help="Log origin (C2SP checkpoint origin and log key name).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Create the schema and the genesis event (and .tally/root.pem when no key is given)."""
    from ledger.keys import generate_key_file, load_signer
    from ledger.store import Ledger

    book = Ledger(state.db)
    key_path = state.key_path(book.url)
    created_key = False
    if state.key or os.environ.get("TALLY_KEY") or key_path.exists():
        root = load_signer(key_path, "root")
    else:
        root = generate_key_file(key_path, "root")
        created_key = True
    genesis = book.init(origin or f"tally.local/{os.urandom(4).hex()}", root)
    result = {
        "ledger": genesis.ledger,
        "origin": genesis.payload["origin"],
        "db": book.display_url,
        "root_key": {"id": root.id, "path": str(key_path), "created": created_key},
        "seq": genesis.seq,
        "hash": genesis.hash,
    }
    if json_out:
        print_json(result)
        return
    print(f"initialised ledger {genesis.ledger} (origin {result['origin']}) at {book.display_url}")
    print(f"root key {root.id} {'created at' if created_key else 'from'} {key_path}")


def db_upgrade() -> None:
    """Bring the database schema to the newest revision."""
    from ledger.store import Ledger

    revision = Ledger(state.db).upgrade()
    print(f"schema at {revision}")


# --------------------------------------------------------------------------- keys


def keys_new(
    name: Annotated[str, typer.Argument(help="Name of the key (e.g. operator-1, witness-a).")],
    out: Annotated[Path | None, typer.Option(help="Where to write the PEM (default .tally/NAME.pem).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Create an Ed25519 key (PKCS#8 PEM, mode 0600; encrypted when TALLY_KEY_PASSPHRASE is set)."""
    from ledger.keys import generate_key_file

    path = out or state.key_path().parent / f"{name}.pem"
    signer = generate_key_file(path, name)
    result = {"id": signer.id, "name": name, "path": str(path), "public_key_path": f"{path}.pub",
              "public_key": signer.public_b64}
    if json_out:
        print_json(result)
    else:
        print(f"{signer.id}  {name}  {path} (public key {path}.pub)")


def keys_list(json_out: JsonOpt = False) -> None:
    """List the keys the ledger knows (from its key events)."""
    ring = state.ledger().key_ring()
    rows = [info.to_json() for info in ring.keys.values()]
    if json_out:
        print_json(rows)
        return
    for row in rows:
        revoked = f"revoked at seq {row['revoked_at_seq']}" if row["revoked_at_seq"] else "active"
        print(f"{row['id']}  {row['name']:<16} {','.join(row['roles']):<14} {revoked}")


def keys_add(
    public_key_file: Annotated[Path, typer.Argument(help="PEM public key, PEM private key, or base64 raw key.")],
    name: Annotated[str, typer.Option(help="Name the ledger will know the key by.")],
    role: Annotated[list[str], typer.Option(help="Role: root, signer or witness (repeatable).")],
    json_out: JsonOpt = False,
) -> None:
    """Append key.added (signed by a root key)."""
    from ledger.keys import ROLES, key_entry, load_public_key

    unknown = [r for r in role if r not in ROLES]
    if unknown:
        raise FormatError(f"--role {unknown[0]!r}: expected one of {', '.join(ROLES)}")
    public_raw = load_public_key(public_key_file)
    book = state.ledger()
    event = book.append("ledger", "key.added", key_entry(public_raw, name, role), state.signer(book.url))
    _print_appended(event, json_out)


def keys_revoke(
    key: Annotated[str, typer.Argument(help="Key id (or unique prefix, or name).")],
    reason: Annotated[str, typer.Option(help="Why the key is revoked (recorded).")],
    json_out: JsonOpt = False,
) -> None:
    """Append key.revoked (signed by a root key)."""
    book = state.ledger()
    info = book.key_ring().find(key)
    event = book.append("ledger", "key.revoked", {"id": info.id, "reason": reason}, state.signer(book.url))
    _print_appended(event, json_out)


# --------------------------------------------------------------------------- events


def _print_appended(event: Event, json_out: bool) -> None:
    if json_out:
        sys.stdout.write(event.line() + "\n")
    else:
        print(event.seq)


def append(
    type_: Annotated[str, typer.Argument(metavar="TYPE", help="Event type, dotted (e.g. note.added).")],
    stream: Annotated[str, typer.Option(help="Stream the event belongs to.")],
    payload: Annotated[str, typer.Option(help="Payload JSON object, or @FILE (@- for stdin).")],
    json_out: Annotated[bool, typer.Option("--json", help="Print the stored event.")] = False,
) -> None:
    """Append one signed event; prints its seq."""
    value = read_json_arg(payload)
    book = state.ledger()
    event = book.append(stream, type_, value, state.signer(book.url))
    _print_appended(event, json_out)


def log(
    stream: Annotated[str | None, typer.Option(help="Only this stream.")] = None,
    type_: Annotated[str | None, typer.Option("--type", help="Only this event type.")] = None,
    since: Annotated[int, typer.Option(help="Only events with seq greater than SEQ.")] = 0,
    json_out: Annotated[bool, typer.Option("--json", help="One stored event per line (JSON lines).")] = False,
) -> None:
    """List events in seq order."""
    book = state.ledger()
    write = sys.stdout.write
    for event in book.events(since, stream=stream, types=[type_] if type_ else None):
        if json_out:
            write(event.line() + "\n")
        else:
            write(f"{event.seq:>8}  {event.time}  {event.stream:<24} {event.type:<22} {event.hash[:16]}\n")


def show(
    seq: Annotated[int, typer.Argument(help="Event seq.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print the stored event as JSON.")] = False,
) -> None:
    """Show one event."""
    event = state.ledger().get(seq)
    if json_out:
        sys.stdout.write(event.line() + "\n")
        return
    print(f"seq     {event.seq}\nstream  {event.stream}\ntype    {event.type}\ntime    {event.time}")
    print(f"actor   {event.actor}\nprev    {event.prev}\nhash    {event.hash}\nsig     {event.sig}")
    print("payload " + json.dumps(event.payload, indent=2, ensure_ascii=False))


# --------------------------------------------------------------------------- verify, export, audit


def verify(
    root_key: Annotated[str | None, typer.Option(help="Pin the root key id the genesis must name (rule 9).")] = None,
    since: Annotated[Path | None, typer.Option(help="A checkpoint saved earlier: prove consistency, verify after it.")] = None,
    jobs: Annotated[int, typer.Option(help="Threads checking signatures.")] = 1,
    json_out: JsonOpt = False,
) -> None:
    """Check every event against SPEC 3.3 (exit 1 with the first failing seq and rule)."""
    from ledger.stored import verify_ledger

    book = state.ledger()
    try:
        result = verify_ledger(book, root_key=root_key, jobs=jobs, since=since)
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
    """Write an audit bundle: manifest.json, events.jsonl, checkpoint.txt, blobs/ (and proofs.jsonl)."""
    from ledger.bundle import export_bundle
    from runner.events.catalogue import bundle_companions

    book = state.ledger()
    signer = None
    try:
        signer = state.signer(book.url)
    except FormatError:
        signer = None  # no key: export still works if a checkpoint covers the events
    manifest = export_bundle(book, out, stream=stream, signer=signer, with_streams=bundle_companions(stream))
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
    json_out: Annotated[bool, typer.Option("--json", help="Print a SLSA verification summary-shaped result.")] = False,
) -> None:
    """Cryptographic checks, then every protocol invariant (SPEC 5.4); exit 1 naming the first failure."""
    from runner.audit.full import run_audit

    if bundle is not None:
        report = run_audit(bundle=bundle, root_key=root_key, vkeys=vkey or [], witness_threshold=witness_threshold)
    else:
        report = run_audit(book=state.ledger(), root_key=root_key, jobs=jobs)
    if json_out:
        print_json(report.to_json())
    else:
        for line in report.lines():
            print(line)
    if not report.ok:
        raise typer.Exit(EXIT_FAILED)
