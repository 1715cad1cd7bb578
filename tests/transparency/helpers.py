"""Shared helpers for the transparency tests: vectors, in-memory trees, ledgers, attackers."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from sqlalchemy import text

from ledger import merkle
from ledger.keys import Signer
from ledger.store import Ledger, NewEvent

VECTORS = Path(__file__).parent / "vectors"
SHARED_TLOG = Path(__file__).resolve().parents[3] / "shared" / "reference" / "tlog"
ORIGIN = "tally.test/ledger"


@cache
def probes() -> dict[str, dict[str, Any]]:
    """The transparency-dev/merkle probes, keyed by their path in testdata/."""
    data: dict[str, dict[str, Any]] = json.loads((VECTORS / "merkle_probes.json").read_text())["probes"]
    return data


@cache
def vectors(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((VECTORS / name).read_text())
    return data


def b64(value: str) -> bytes:
    return base64.b64decode(value)


class MemoryTree:
    """Every complete subtree of a list of leaf hashes, computed directly (the test's oracle)."""

    def __init__(self, leaves: Sequence[bytes]):
        self.levels: list[list[bytes]] = [list(leaves)]
        while len(self.levels[-1]) > 1:
            below = self.levels[-1]
            self.levels.append([merkle.hash_children(below[i], below[i + 1]) for i in range(0, len(below) - 1, 2)])

    def fetch(self, nodes: Sequence[tuple[int, int]]) -> Mapping[tuple[int, int], bytes]:
        return {(level, index): self.levels[level][index] for level, index in nodes}

    def root(self, size: int) -> bytes:
        """MTH(D[0:size]) by the RFC 6962 recursion (independent of the frontier code)."""
        return mth(self.levels[0][:size])


def mth(leaves: Sequence[bytes]) -> bytes:
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return leaves[0]
    k = 1 << ((len(leaves) - 1).bit_length() - 1)
    return merkle.hash_children(mth(leaves[:k]), mth(leaves[k:]))


def sql(book: Ledger, statement: str, **params: Any) -> None:
    """Run raw SQL against the ledger's database, as an attacker with database access would."""
    with book.engine.begin() as conn:
        conn.execute(text(statement), params)


def fill(book: Ledger, signer: Signer, count: int, stream: str = "s", batch: int = 500) -> None:
    """Append ``count`` small events in batches."""
    done = 0
    while done < count:
        step = min(batch, count - done)
        book.append_many([NewEvent(stream, "test.event", {"i": done + i}) for i in range(step)], signer)
        done += step


def flip_bit(value: bytes, bit: int) -> bytes:
    data = bytearray(value)
    data[(bit // 8) % len(data)] ^= 1 << (bit % 8)
    return bytes(data)


def rewrite_history(book: Ledger, signer: Signer, seq: int, payload: dict[str, Any], *, tree: bool = True) -> None:
    """Play a thorough attacker holding ``signer``: rewrite event ``seq``'s payload, then re-hash,
    re-chain and re-sign every later event (and, with ``tree``, recompute every Merkle node)."""
    from ledger.canonical import canonical
    from ledger.event import body_bytes

    events = list(book.events())
    prev = events[seq - 2].hash if seq > 1 else "0" * 64
    for event in events[seq - 1:]:
        payload_json = canonical(payload).decode() if event.seq == seq else event.payload_json
        body = body_bytes(ledger=event.ledger, seq=event.seq, prev=prev, stream=event.stream, type=event.type,
                          time=event.time, actor=event.actor, payload_json=payload_json)
        digest = hashlib.sha256(body).digest()
        sig = base64.b64encode(signer.sign(b"tally-event-v1\n" + digest)).decode()
        sql(book, "UPDATE events SET prev = :prev, payload = :payload, hash = :hash, sig = :sig WHERE seq = :seq",
            prev=prev, payload=payload_json, hash=digest.hex(), sig=sig, seq=event.seq)
        prev = digest.hex()
    if tree:
        sql(book, "DELETE FROM merkle_nodes")
        frontier = merkle.Frontier()
        for event in book.events():
            for level, index, value in frontier.append(merkle.hash_leaf(event.raw_hash)):
                sql(book, "INSERT INTO merkle_nodes (level, \"index\", hash) VALUES (:l, :i, :h)",
                    l=level, i=index, h=value)
    book._frontier = None  # the attacker's edit happened behind the store's back
