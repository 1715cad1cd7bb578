"""Test helpers: play an attacker with database access, forge events."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from sqlalchemy import text

from ledger import merkle
from ledger.canonical import canonical
from ledger.event import body_bytes, format_time
from ledger.keys import Signer
from ledger.store import Ledger


def sql(book: Ledger, statement: str, **params: Any) -> None:
    """Run raw SQL against the ledger's database, as an attacker would."""
    with book.engine.begin() as conn:
        conn.execute(text(statement), params)


def forge_row(book: Ledger, signer: Signer, stream: str, type_: str, payload: dict[str, Any],
              time: str | None = None) -> dict[str, Any]:
    """A correctly chained, correctly signed event row, bypassing the store's checks (``time``: now)."""
    size, prev = book.head()
    payload_json = canonical(payload).decode()
    now = format_time() if time is None else time
    body = body_bytes(ledger=book.info.ledger_id, seq=size + 1, prev=prev, stream=stream, type=type_,
                      time=now, actor=signer.id, payload_json=payload_json)
    digest = hashlib.sha256(body).digest()
    sig = base64.b64encode(signer.sign(b"tally-event-v1\n" + digest)).decode()
    return {"seq": size + 1, "ledger": book.info.ledger_id, "prev": prev, "stream": stream, "type": type_,
            "time": now, "actor": signer.id, "payload": payload_json, "hash": digest.hex(), "sig": sig, "v": 1}


def insert_row(book: Ledger, row: dict[str, Any]) -> None:
    sql(book, "INSERT INTO events (seq, ledger, prev, stream, type, time, actor, payload, hash, sig, v) "
              "VALUES (:seq, :ledger, :prev, :stream, :type, :time, :actor, :payload, :hash, :sig, :v)", **row)


def insert_event(book: Ledger, row: dict[str, Any]) -> None:
    """Insert a forged row and the Merkle subtree hashes it completes, as a thorough attacker would."""
    insert_row(book, row)
    frontier = merkle.Frontier()
    made: list[tuple[int, int, bytes]] = []
    for event in book.events():
        made = frontier.append(merkle.hash_leaf(event.raw_hash))
    for level, index, value in made:
        sql(book, 'INSERT INTO merkle_nodes (level, "index", hash) VALUES (:l, :i, :h)', l=level, i=index, h=value)
    book._frontier = None  # the row was written behind the store's back
