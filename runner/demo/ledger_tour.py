"""A short ledger walkthrough: init, keys, appends, verify, export, then a tamper that verify catches.

Everything is left in the demo directory for the user to inspect.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ledger.bundle import export_bundle
from ledger.errors import VerificationError
from ledger.keys import generate_key_file, key_entry
from ledger.store import Blob, Ledger, NewEvent
from ledger.stored import verify_ledger


@dataclass(frozen=True)
class TourResult:
    db: Path
    bundle: Path
    events: int
    verified_head: str
    tampered_seq: int
    caught_seq: int | None
    caught_rule: int | str | None


def ledger_tour(directory: Path, say: Callable[[str], None] = print) -> TourResult:
    directory.mkdir(parents=True, exist_ok=True)
    db = directory / "tally.db"
    root = generate_key_file(directory / ".tally" / "root.pem", "root")
    operator = generate_key_file(directory / ".tally" / "operator.pem", "operator")
    book = Ledger(f"sqlite:///{db}")
    genesis = book.init("tally.demo/ledger-tour", root)
    say(f"1. init: ledger {genesis.ledger} at {db}, root key {root.id[:16]}")
    book.append("ledger", "key.added", key_entry(operator.public_raw, "operator", ["signer"]), root)
    say(f"2. keys: operator key {operator.id[:16]} added by the root key (key.added, seq 2)")
    records = Blob(b'{"request": 1, "ttft_s": 0.12}\n{"request": 2, "ttft_s": 0.11}\n', "application/x-ndjson")
    book.append("notes/demo", "note.added", {"text": "window planned"}, operator)
    book.append_many(
        [NewEvent("notes/demo", "measurement.noted", {"wave": i, "rounds": 1000 + i, "accepted": 2500 + 3 * i})
         for i in range(1, 6)], operator)
    book.append("notes/demo", "evidence.attached", {"records": records.ref()}, operator, blobs=[records])
    size, head = book.head()
    say(f"3. appends: {size} events, hash-chained and Ed25519-signed; head {head[:16]}")
    report = verify_ledger(book)
    say(f"4. verify: OK, {report.verified.size} events, Merkle root {report.verified.root.hex()[:16]}")
    bundle = directory / "bundle"
    manifest = export_bundle(book, bundle, signer=root)
    say(f"5. export: {manifest['events']} events and {manifest['blobs']} blob(s) written to {bundle}")
    tampered = 5
    with sqlite3.connect(db) as conn:  # an attacker with write access to the database file
        conn.execute("UPDATE events SET payload = replace(payload, '1002', '1200') WHERE seq = ?", (tampered,))
    say(f"6. tamper: changed the rounds counter of seq {tampered} directly in SQLite")
    try:
        verify_ledger(book)
        caught: VerificationError | None = None
    except VerificationError as error:
        caught = error
    if caught is None:
        say("7. verify: the tamper was NOT caught")
    else:
        say(f"7. verify: caught it: seq {caught.seq}, rule {caught.rule} ({caught.args[0]})")
    book.close()
    return TourResult(db, bundle, size, head, tampered, caught.seq if caught else None,
                      caught.rule if caught else None)
