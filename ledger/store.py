"""The ledger store: append (single and batch), read, blobs, Merkle nodes (SPEC 3-4).

An append is one transaction: it takes the append lock, reads the head, signs the new
events, and writes them with their Merkle nodes, blobs and key-cache rows, committing
all or nothing. ``seq`` is the primary key, so even an appender that bypassed the lock
could only lose a race (and retry on the new head), never fork the chain.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, select, text, tuple_
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError as SAIntegrityError
from sqlalchemy.exc import OperationalError, SQLAlchemyError

from . import merkle
from .canonical import check_payload, json_string
from .db import HEAD_REVISION, append_transaction, make_engine, normalise_url, schema_revision
from .errors import ExternalError, FormatError, PolicyError, StorageError, TallyError
from .event import GENESIS_PREV, Event, check_body_size, format_time
from .keys import KEY_EVENT_TYPES, KeyInfo, KeyRing, Signer, key_entry, parse_key_entry
from .models import BlobRow, CheckpointRow, EventRow, KeyRow, MerkleNodeRow

__all__ = ["Blob", "Ledger", "LedgerInfo", "NewEvent", "blob_ref"]

_TYPE_RE = re.compile(r"^[a-z0-9_]+(\.[a-z0-9_]+)+$")
_EVENTS = EventRow.__table__
_NODES = MerkleNodeRow.__table__
_BLOBS = BlobRow.__table__
_KEYS = KeyRow.__table__
_CHECKPOINTS = CheckpointRow.__table__
_EVENT_COLUMNS = (
    _EVENTS.c.ledger, _EVENTS.c.seq, _EVENTS.c.prev, _EVENTS.c.stream, _EVENTS.c.type,
    _EVENTS.c.time, _EVENTS.c.actor, _EVENTS.c.payload, _EVENTS.c.hash, _EVENTS.c.sig, _EVENTS.c.v,
)
APPEND_ROLES = ("root", "signer")
APPEND_RETRIES = 20


@dataclass(frozen=True)
class Blob:
    """Content-addressed bytes (SPEC 3.5)."""

    data: bytes
    media_type: str = "application/octet-stream"

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    def ref(self) -> dict[str, Any]:
        """How a payload refers to this blob."""
        return blob_ref(self.sha256, len(self.data), self.media_type)


def blob_ref(sha256: str, size: int, media_type: str) -> dict[str, Any]:
    return {"blob": f"sha256:{sha256}", "size": size, "media_type": media_type}


@dataclass(frozen=True)
class NewEvent:
    """An event to append: where, what, and the blobs its payload refers to."""

    stream: str
    type: str
    payload: dict[str, Any]
    blobs: tuple[Blob, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class LedgerInfo:
    ledger_id: str
    origin: str
    genesis: Event


def _check_name(kind: str, value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise FormatError(f"{kind} must be a non-empty string")
    if any(ord(ch) < 0x20 for ch in value):
        raise FormatError(f"{kind} {value!r} contains control characters")
    if kind == "type" and not _TYPE_RE.match(value):
        raise FormatError(f"type {value!r} must be dotted lowercase words, e.g. gate.result")


def _row_event(row: Sequence[Any]) -> Event:
    return Event(row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7], row[8], row[9], row[10])


def _first_line(exc: BaseException) -> str:
    message = str(getattr(exc, "orig", None) or exc).strip()
    return message.splitlines()[0] if message else type(exc).__name__


class Ledger:
    """A ledger in one database. Cheap to construct; thread-safe for appends."""

    def __init__(self, url: str | None = None, *, engine: Engine | None = None, tree: bool = True):
        self.url = normalise_url(url) if engine is None else str(engine.url)
        self.engine = engine if engine is not None else make_engine(self.url)
        self.tree = tree
        self._lock = threading.Lock()
        self._info: LedgerInfo | None = None
        self._frontier: merkle.Frontier | None = None
        self._frontier_head = ""

    # ------------------------------------------------------------------ schema

    @classmethod
    def open(cls, url: str | None = None, **kwargs: Any) -> Ledger:
        """Open an existing ledger; refuses a database without tally's current schema."""
        ledger = cls(url, **kwargs)
        revision = ledger._revision()
        if revision is None:
            raise FormatError(f"no tally ledger at {ledger.display_url}; run `tally init` first")
        if revision != HEAD_REVISION:
            raise StorageError(
                f"schema is at {revision}, this tally needs {HEAD_REVISION}; run `tally db upgrade`"
            )
        return ledger

    @property
    def display_url(self) -> str:
        return self.engine.url.render_as_string(hide_password=True)

    def _revision(self) -> str | None:
        try:
            return schema_revision(self.engine)
        except StorageError as exc:
            raise ExternalError(str(exc)) from None

    def upgrade(self) -> str:
        """Bring the schema to the newest revision (Alembic); returns it."""
        from .migrate import upgrade

        try:
            upgrade(self.engine)
        except OperationalError as exc:
            raise ExternalError(f"database did not answer: {_first_line(exc)}") from None
        return HEAD_REVISION

    def close(self) -> None:
        self.engine.dispose()

    # ------------------------------------------------------------------ genesis

    def init(self, origin: str, root: Signer, name: str = "root") -> Event:
        """Create the schema and the genesis event; refuses a ledger that has events."""
        if not origin or any(ch.isspace() for ch in origin) or "+" in origin:
            raise FormatError(f"origin {origin!r} must be non-empty, without spaces or '+'")
        self.upgrade()
        if self.size():
            raise PolicyError(f"{self.display_url} already holds a ledger")
        ledger_id = os.urandom(16).hex()
        payload = {"origin": origin, "keys": [key_entry(root.public_raw, name, ["root"])]}
        events = self._append([NewEvent("ledger", "ledger.created", payload)], root, ledger_id)
        return events[0]

    @property
    def info(self) -> LedgerInfo:
        if self._info is None:
            genesis = self.get(1)
            if genesis.type != "ledger.created":
                raise StorageError("seq 1 is not a ledger.created event")
            self._info = LedgerInfo(genesis.ledger, str(genesis.payload.get("origin", "")), genesis)
        return self._info

    # ------------------------------------------------------------------ append

    def append(
        self,
        stream: str,
        type: str,
        payload: dict[str, Any],
        signer: Signer,
        blobs: Sequence[Blob] = (),
    ) -> Event:
        """Append one event (one transaction) and return it as stored."""
        return self._append([NewEvent(stream, type, payload, tuple(blobs))], signer)[0]

    def append_many(self, items: Sequence[NewEvent], signer: Signer) -> list[Event]:
        """Append several events in one transaction, in order."""
        return self._append(list(items), signer) if items else []

    def _append(self, items: list[NewEvent], signer: Signer, ledger_id: str | None = None) -> list[Event]:
        prepared = []
        for item in items:
            _check_name("stream", item.stream)
            _check_name("type", item.type)
            payload_json = check_payload(item.payload).decode("utf-8")
            if item.type in KEY_EVENT_TYPES and item.stream != "ledger":
                raise FormatError(f"{item.type} events belong to stream 'ledger'")
            if item.type == "ledger.created" and ledger_id is None:
                raise PolicyError("ledger.created is written only by `tally init`")
            prepared.append((item, payload_json))
        with self._lock:
            for _attempt in range(APPEND_RETRIES):
                try:
                    with append_transaction(self.engine) as conn:
                        return self._append_locked(conn, prepared, signer, ledger_id)
                except SAIntegrityError:
                    self._frontier = None
                    continue  # lost a race for a seq: retry on the new head
                except OperationalError as exc:
                    raise ExternalError(f"database did not answer: {_first_line(exc)}") from None
                except TallyError:
                    raise
                except SQLAlchemyError as exc:
                    raise StorageError(f"append failed: {_first_line(exc)}") from None
        raise StorageError(f"append lost the race {APPEND_RETRIES} times; giving up")

    def _append_locked(
        self, conn: Connection, prepared: list[tuple[NewEvent, str]], signer: Signer, ledger_id: str | None
    ) -> list[Event]:
        head = conn.execute(
            select(_EVENTS.c.seq, _EVENTS.c.hash, _EVENTS.c.ledger).order_by(_EVENTS.c.seq.desc()).limit(1)
        ).first()
        if ledger_id is None:
            if head is None:
                raise FormatError("the ledger has no genesis; run `tally init`")
            size, prev, ledger_id = int(head[0]), head[1], head[2]
            self._authorise(conn, signer, prepared)
        else:
            if head is not None:
                raise PolicyError("the ledger already has a genesis event")
            size, prev = 0, GENESIS_PREV
        frontier = self._load_frontier(conn, size, prev) if self.tree else None

        rows: list[dict[str, Any]] = []
        nodes: list[dict[str, Any]] = []
        blobs: dict[str, Blob] = {}
        events: list[Event] = []
        actor = signer.id
        actor_json = json_string(actor)
        ledger_json = json_string(ledger_id)
        sign = signer.private.sign
        sha256 = hashlib.sha256
        b64 = base64.b64encode
        for item, payload_json in prepared:
            size += 1
            now = format_time()
            body = (
                '{"actor":' + actor_json + ',"ledger":' + ledger_json + ',"payload":' + payload_json
                + ',"prev":"' + prev + '","seq":' + str(size) + ',"stream":' + json_string(item.stream)
                + ',"time":"' + now + '","type":' + json_string(item.type) + ',"v":1}'
            ).encode("utf-8")
            check_body_size(len(body))
            digest = sha256(body).digest()
            hash_hex = digest.hex()
            sig = b64(sign(b"tally-event-v1\n" + digest)).decode("ascii")
            rows.append({
                "seq": size, "ledger": ledger_id, "prev": prev, "stream": item.stream, "type": item.type,
                "time": now, "actor": actor, "payload": payload_json, "hash": hash_hex, "sig": sig, "v": 1,
            })
            events.append(Event(ledger_id, size, prev, item.stream, item.type, now, actor,
                                payload_json, hash_hex, sig))
            if frontier is not None:
                for level, index, value in frontier.append(merkle.hash_leaf(digest)):
                    nodes.append({"level": level, "index": index, "hash": value})
            for blob in item.blobs:
                blobs[blob.sha256] = blob
            prev = hash_hex
        conn.execute(_EVENTS.insert(), rows)
        if nodes:
            conn.execute(_NODES.insert(), nodes)
        if blobs:
            self._write_blobs(conn, blobs)
        for event in events:
            if event.type in KEY_EVENT_TYPES:
                self._cache_key_event(conn, event)
        if frontier is not None:
            self._frontier, self._frontier_head = frontier, prev
        return events

    def _authorise(self, conn: Connection, signer: Signer, prepared: list[tuple[NewEvent, str]]) -> None:
        row = conn.execute(
            select(_KEYS.c.roles, _KEYS.c.revoked_at_seq, _KEYS.c.name).where(_KEYS.c.id == signer.id)
        ).first()
        if row is None:
            raise PolicyError(f"key {signer.id[:16]} is not known to this ledger; add it with `tally keys add`")
        roles, revoked, name = row[0].split(","), row[1], row[2]
        if revoked is not None:
            raise PolicyError(f"key {signer.id[:16]} ({name}) was revoked at seq {revoked}")
        if not set(roles) & set(APPEND_ROLES):
            raise PolicyError(f"key {signer.id[:16]} ({name}) has roles {roles}; appending needs root or signer")
        if "root" not in roles and any(item.type in KEY_EVENT_TYPES for item, _ in prepared):
            raise PolicyError(f"key events must be signed by a root key; {name} is not root")
        ring = None
        for item, _ in prepared:
            if item.type == "key.added":
                parse_key_entry(item.payload, "key.added")
                exists = conn.execute(select(_KEYS.c.id).where(_KEYS.c.id == item.payload["id"])).first()
                if exists:
                    raise PolicyError(f"key {item.payload['id'][:16]} is already in the ledger")
            elif item.type == "key.revoked":
                ring = ring or self._key_ring(conn)
                kid = item.payload.get("id")
                if not isinstance(kid, str) or ring.keys.get(kid) is None:
                    raise FormatError(f"key.revoked: unknown key {kid!r}")
                if ring.keys[kid].revoked_at_seq is not None:
                    raise PolicyError(f"key {kid[:16]} is already revoked")

    def _cache_key_event(self, conn: Connection, event: Event) -> None:
        payload = event.payload
        if event.type == "key.revoked":
            conn.execute(_KEYS.update().where(_KEYS.c.id == payload["id"]).values(revoked_at_seq=event.seq))
            return
        entries = payload["keys"] if event.type == "ledger.created" else [payload]
        for entry in entries:
            kid, name, public_raw, roles = parse_key_entry(entry, f"seq {event.seq}")
            conn.execute(_KEYS.insert().values(
                id=kid, name=name, public_key=base64.b64encode(public_raw).decode("ascii"),
                roles=",".join(roles), added_seq=event.seq, revoked_at_seq=None,
            ))

    def _write_blobs(self, conn: Connection, blobs: Mapping[str, Blob]) -> None:
        present = set(conn.execute(select(_BLOBS.c.sha256).where(_BLOBS.c.sha256.in_(list(blobs)))).scalars())
        fresh = [
            {"sha256": sha, "size": len(blob.data), "media_type": blob.media_type, "data": blob.data}
            for sha, blob in blobs.items() if sha not in present
        ]
        if fresh:
            conn.execute(_BLOBS.insert(), fresh)

    def _load_frontier(self, conn: Connection, size: int, head_hash: str) -> merkle.Frontier:
        cached = self._frontier
        if cached is not None and cached.size == size and self._frontier_head == head_hash:
            return cached.copy()
        nodes = merkle.frontier_nodes(size)
        hashes = self._fetch_nodes(conn, nodes)
        return merkle.Frontier(size, [(level, hashes[(level, index)]) for level, index in nodes])

    # ------------------------------------------------------------------ read

    def _read(self) -> Connection:
        try:
            return self.engine.connect()
        except OperationalError as exc:
            raise ExternalError(f"database did not answer: {_first_line(exc)}") from None

    def head(self) -> tuple[int, str]:
        """(size, hash of the last event); (0, 64 zeros) for an empty ledger."""
        with self._read() as conn:
            row = conn.execute(
                select(_EVENTS.c.seq, _EVENTS.c.hash).order_by(_EVENTS.c.seq.desc()).limit(1)
            ).first()
        return (int(row[0]), row[1]) if row else (0, GENESIS_PREV)

    def size(self) -> int:
        return self.head()[0]

    def get(self, seq: int) -> Event:
        with self._read() as conn:
            row = conn.execute(select(*_EVENT_COLUMNS).where(_EVENTS.c.seq == seq)).first()
        if row is None:
            raise FormatError(f"no event with seq {seq}")
        return _row_event(row)

    def events(
        self,
        after: int = 0,
        *,
        until: int | None = None,
        stream: str | None = None,
        types: Sequence[str] | None = None,
        batch: int = 5000,
    ) -> Iterator[Event]:
        """Events with seq > ``after`` (and <= ``until``), in seq order, read in batches."""
        query = select(*_EVENT_COLUMNS).order_by(_EVENTS.c.seq).limit(batch)
        if stream is not None:
            query = query.where(_EVENTS.c.stream == stream)
        if types:
            query = query.where(_EVENTS.c.type.in_(list(types)))
        if until is not None:
            query = query.where(_EVENTS.c.seq <= until)
        last = after
        while True:
            with self._read() as conn:
                rows = conn.execute(query.where(_EVENTS.c.seq > last)).all()
            for row in rows:
                yield _row_event(row)
            if len(rows) < batch:
                return
            last = int(rows[-1][1])

    def raw_rows(self, after: int = 0, batch: int = 20000) -> Iterator[list[Any]]:
        """Batches of event rows as tuples in ``Event`` field order (for fast scans)."""
        query = select(*_EVENT_COLUMNS).order_by(_EVENTS.c.seq).limit(batch)
        last = after
        while True:
            with self._read() as conn:
                rows = conn.execute(query.where(_EVENTS.c.seq > last)).all()
            if rows:
                yield rows
            if len(rows) < batch:
                return
            last = int(rows[-1][1])

    def key_ring(self) -> KeyRing:
        """The key ring as cached in the ``keys`` table (for listing, not for verifying)."""
        with self._read() as conn:
            return self._key_ring(conn)

    @staticmethod
    def _key_ring(conn: Connection) -> KeyRing:
        ring = KeyRing()
        for row in conn.execute(select(_KEYS).order_by(_KEYS.c.added_seq, _KEYS.c.id)):
            ring.keys[row.id] = KeyInfo(
                row.id, row.name, base64.b64decode(row.public_key), tuple(row.roles.split(",")),
                int(row.added_seq), None if row.revoked_at_seq is None else int(row.revoked_at_seq),
            )
        return ring

    # ------------------------------------------------------------------ blobs

    def blob(self, sha256: str) -> Blob | None:
        sha256 = sha256.removeprefix("sha256:")
        with self._read() as conn:
            row = conn.execute(select(_BLOBS.c.data, _BLOBS.c.media_type).where(_BLOBS.c.sha256 == sha256)).first()
        return Blob(bytes(row[0]), row[1]) if row else None

    def blob_digests(self) -> set[str]:
        with self._read() as conn:
            return set(conn.execute(select(_BLOBS.c.sha256)).scalars())

    # ------------------------------------------------------------------ merkle

    def _fetch_nodes(self, conn: Connection, nodes: Sequence[tuple[int, int]]) -> dict[tuple[int, int], bytes]:
        found: dict[tuple[int, int], bytes] = {}
        leaves = [index for level, index in nodes if level == 0]
        inner = [(level, index) for level, index in nodes if level > 0]
        if leaves:
            rows = conn.execute(
                select(_EVENTS.c.seq, _EVENTS.c.hash).where(_EVENTS.c.seq.in_([i + 1 for i in leaves]))
            )
            for seq, hash_hex in rows:
                found[(0, int(seq) - 1)] = merkle.hash_leaf(bytes.fromhex(hash_hex))
        if inner:
            rows = conn.execute(
                select(_NODES.c.level, _NODES.c.index, _NODES.c.hash).where(
                    tuple_(_NODES.c.level, _NODES.c.index).in_(inner)
                )
            )
            for level, index, value in rows:
                found[(int(level), int(index))] = bytes(value)
        missing = [node for node in nodes if node not in found]
        if missing:
            raise StorageError(f"Merkle node(s) missing from storage: {missing[:3]}")
        return found

    def fetch_nodes(self, nodes: Sequence[tuple[int, int]]) -> dict[tuple[int, int], bytes]:
        with self._read() as conn:
            return self._fetch_nodes(conn, nodes)

    def root(self, size: int) -> bytes:
        return merkle.root_of_size(size, self.fetch_nodes)

    def inclusion_proof(self, index: int, size: int) -> list[bytes]:
        return merkle.inclusion_proof(index, size, self.fetch_nodes)

    def consistency_proof(self, old: int, new: int) -> list[bytes]:
        return merkle.consistency_proof(old, new, self.fetch_nodes)

    # ------------------------------------------------------------------ checkpoints

    def checkpoint_notes(self) -> list[tuple[int, str]]:
        with self._read() as conn:
            return [(int(s), n) for s, n in conn.execute(
                select(_CHECKPOINTS.c.size, _CHECKPOINTS.c.note).order_by(_CHECKPOINTS.c.size))]

    def store_checkpoint(self, size: int, note: str) -> None:
        """Keep a checkpoint note the ledger signed."""
        with self.engine.begin() as conn:
            conn.execute(_CHECKPOINTS.insert().values(size=size, note=note))

    def sql(self, statement: str, params: Mapping[str, Any] | None = None) -> None:
        """Run raw SQL (tests use it to play an attacker with database access)."""
        with self.engine.begin() as conn:
            conn.execute(text(statement), dict(params or {}))


def sqlite_file_of(ledger: Ledger) -> Path | None:
    from .db import sqlite_path

    return sqlite_path(ledger.url)
