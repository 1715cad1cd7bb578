"""The ledger store: append (single and batch), read, blobs, Merkle nodes (``docs/format.md``, ``docs/deploy.md``).

An append is one transaction: it takes the append lock, reads the head, signs the new
events, and writes them with their Merkle nodes, blobs and key-cache rows, committing
all or nothing. ``seq`` is the primary key, so even an appender that bypassed the lock
could only lose a race (and retry on the new head), never fork the chain.

The time an append records is the ledger's clock (``Ledger.now``, ``docs/deploy.md``,
clocks): on PostgreSQL the database server's ``clock_timestamp()``, read under the
append lock, so every machine appending to one ledger records times of one clock, in
seq order; on SQLite (a file on one machine) this machine's clock.
"""

from __future__ import annotations

import base64
import hashlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from sqlalchemy import Engine, Table, select, text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import OperationalError, SQLAlchemyError

from . import merkle
from .canonical import BLOB_MARK, blob_references, check_payload, json_string
from .db import (
    HEAD_REVISION,
    RawTx,
    append_transaction,
    database_error,
    dbapi_errors,
    foreign_tables,
    make_engine,
    normalise_url,
    read_only,
    read_transaction,
    schema_revision,
    sqlite_path,
)
from .errors import ExternalError, FormatError, PayloadError, PolicyError, StorageError, TallyError
from .event import GENESIS_PREV, SIGNING_PREFIX, Event, check_body_size, check_seq, format_time, member_problem
from .keys import EVENT_ROLES, KEY_EVENT_TYPES, KeyInfo, KeyRing, Signer, key_entry, parse_key_entry
from .models import BlobRow, CheckpointRow, EventRow, KeyRow, MerkleNodeRow

__all__ = ["Blob", "Ledger", "LedgerInfo", "NewEvent", "blob_ref"]

_EVENTS = cast(Table, EventRow.__table__)
_NODES = cast(Table, MerkleNodeRow.__table__)
_BLOBS = cast(Table, BlobRow.__table__)
_KEYS = cast(Table, KeyRow.__table__)
_CHECKPOINTS = cast(Table, CheckpointRow.__table__)
_EVENT_COLUMNS = (
    _EVENTS.c.ledger, _EVENTS.c.seq, _EVENTS.c.prev, _EVENTS.c.stream, _EVENTS.c.type,
    _EVENTS.c.time, _EVENTS.c.actor, _EVENTS.c.payload, _EVENTS.c.hash, _EVENTS.c.sig, _EVENTS.c.v,
)
# The schema revisions whose ledger tables are this tally's: 0002_witness adds only the HTTP witness's
# tables, so a ledger made before it (even one on read-only media, which cannot be upgraded) is read,
# verified and appended to as it is. A revision that changes the ledger's own tables ends this list.
LEDGER_REVISIONS = ("0001_ledger", HEAD_REVISION)
APPEND_ROLES = EVENT_ROLES  # the roles that append (verification rule 5 asks the same)
_ROW_COLUMNS = "ledger, seq, prev, stream, type, time, actor, payload, hash, sig, v"
_INSERT_EVENT = ("INSERT INTO events (seq, ledger, prev, stream, type, time, actor, payload, hash, sig, v) "
                 "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
_INSERT_NODE = 'INSERT INTO merkle_nodes (level, "index", hash) VALUES (?, ?, ?)'
APPEND_RETRIES = 3  # under the append lock a race cannot happen; this guards writers that bypass it
_READ_ERRORS = (SQLAlchemyError, sqlite3.Error, OverflowError)


@dataclass(frozen=True)
class Blob:
    """Content-addressed bytes (``docs/format.md``, blobs)."""

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
    """``stream`` and ``type`` as ``verify`` will check them (``event.member_problem``): ``FormatError`` otherwise."""
    problem = member_problem(kind, value)
    if problem is not None:
        raise FormatError(problem)


def _row_event(row: Sequence[Any]) -> Event:
    return Event(row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7], row[8], row[9], row[10])


_SIGN_POOL: ThreadPoolExecutor | None = None
_SIGN_POOL_LOCK = threading.Lock()
PARALLEL_SIGN_MIN = 64


def _sign_part(signer: Signer, digests: Sequence[bytes]) -> list[str]:
    sign, b64 = signer.private.sign, base64.b64encode
    return [b64(sign(SIGNING_PREFIX + d)).decode("ascii") for d in digests]


def _sign_all(signer: Signer, digests: Sequence[bytes]) -> list[str]:
    """Sign every event hash; a big batch is split with one helper thread (when there are cores)."""
    global _SIGN_POOL
    if len(digests) < PARALLEL_SIGN_MIN or (os.cpu_count() or 1) < 2:
        return _sign_part(signer, digests)
    with _SIGN_POOL_LOCK:
        if _SIGN_POOL is None:
            _SIGN_POOL = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tally-sign")
        pool = _SIGN_POOL
    half = len(digests) // 2
    other = pool.submit(_sign_part, signer, digests[half:])
    return _sign_part(signer, digests[:half]) + other.result()


def _fetch_nodes(tx: RawTx, nodes: Sequence[tuple[int, int]]) -> dict[tuple[int, int], bytes]:
    """Complete-subtree hashes: level 0 from the events' hashes, the rest from merkle_nodes."""
    found: dict[tuple[int, int], bytes] = {}
    leaves = sorted({index for level, index in nodes if level == 0})
    if leaves:
        marks = ", ".join("?" for _ in leaves)
        for seq, hash_hex in tx.all(f"SELECT seq, hash FROM events WHERE seq IN ({marks})", [i + 1 for i in leaves]):
            found[(0, int(seq) - 1)] = merkle.hash_leaf(bytes.fromhex(hash_hex))
    by_level: dict[int, list[int]] = {}
    for level, index in nodes:
        if level > 0:
            by_level.setdefault(level, []).append(index)
    if by_level:
        # One (level = L AND index IN (...)) term per level: SQLite answers a row-value IN
        # list with a full scan of merkle_nodes, but this OR with its primary key.
        terms, params = [], []
        for level, indices in by_level.items():
            terms.append(f'(level = ? AND "index" IN ({", ".join("?" for _ in indices)}))')
            params += [level, *indices]
        for level, index, value in tx.all(f'SELECT level, "index", hash FROM merkle_nodes WHERE {" OR ".join(terms)}',
                                          params):
            found[(int(level), int(index))] = bytes(value)
    missing = [node for node in nodes if node not in found]
    if missing:
        raise StorageError(f"Merkle node(s) missing from storage: {missing[:3]}")
    return found


def _first_line(exc: BaseException) -> str:
    message = str(getattr(exc, "orig", None) or exc).strip()
    return message.splitlines()[0] if message else type(exc).__name__


def _machine_clock() -> datetime:
    return datetime.now(UTC)


class Ledger:
    """A ledger in one database. Cheap to construct; thread-safe for appends.

    ``clock`` is this machine's wall clock (default ``datetime.now(UTC)``): the time of an
    append on SQLite, unused on PostgreSQL, whose server keeps the ledger's clock.
    """

    def __init__(self, url: str | None = None, *, engine: Engine | None = None, tree: bool = True,
                 clock: Callable[[], datetime] | None = None):
        self.url = normalise_url(url) if engine is None else str(engine.url)
        self.engine = engine if engine is not None else make_engine(self.url)
        self.tree = tree
        self._lock = threading.Lock()
        self._info: LedgerInfo | None = None
        self._frontier: merkle.Frontier | None = None
        self._frontier_head = ""
        self._machine_clock = clock or _machine_clock
        self._server_clock: tuple[datetime, float] | None = None  # (server time, time.monotonic()) read together

    # ------------------------------------------------------------------ the clock

    @property
    def server_clock(self) -> bool:
        """Whether the database server keeps the ledger's clock (PostgreSQL) rather than this machine."""
        return self.engine.dialect.name == "postgresql"

    def now(self) -> datetime:
        """The ledger's clock now (UTC): what an append made now would record as its time.

        On PostgreSQL, the server's clock as last read (by an append, or here when none has
        been made yet) advanced by this machine's monotonic clock since: no query and no
        failure once read, and no step when this machine's wall clock is set. On SQLite,
        this machine's clock. The runner's budget reads it (``docs/window.md``): minutes
        between event times and now are then measured on one clock, whichever machine
        recorded the events and whichever resumes the window.
        """
        if not self.server_clock:
            return self._machine_clock().astimezone(UTC)
        if self._server_clock is None:
            try:
                with self.engine.connect() as conn:
                    self._note_server_time(conn.execute(text("SELECT clock_timestamp()")).scalar_one())
            except (SQLAlchemyError, sqlite3.Error) as exc:
                raise database_error(exc, self.engine) from None
        assert self._server_clock is not None
        server, read_at = self._server_clock
        return server + timedelta(seconds=time.monotonic() - read_at)

    def _note_server_time(self, value: datetime) -> datetime:
        moment = value.astimezone(UTC)
        self._server_clock = (moment, time.monotonic())
        return moment

    def _append_time(self, tx: RawTx) -> str:
        """The time of the append in ``tx``: the server's clock under the append lock, else this machine's."""
        if tx.dialect == "postgresql":
            row = tx.one("SELECT clock_timestamp()")
            assert row is not None
            return format_time(self._note_server_time(row[0]))
        return format_time(self._machine_clock())

    # ------------------------------------------------------------------ schema

    @classmethod
    def open(cls, url: str | None = None, **kwargs: Any) -> Ledger:
        """Open an existing ledger; refuses a database whose ledger tables are not this tally's (``LEDGER_REVISIONS``).

        A SQLite file tally may not write is opened read-only (``ledger.db``): reads and
        verification work, appends are refused. A directory, a file that is not a
        database, or a database that does not exist is a ``FormatError`` (exit 2); only a
        server that does not answer is an ``ExternalError`` (exit 3, retry).
        """
        ledger = cls(url, **kwargs)
        path = sqlite_path(ledger.url)
        if path is not None and not path.exists():
            raise FormatError(f"no tally ledger at {path}; run `tally init` first")
        revision = schema_revision(ledger.engine)
        if revision is None:
            raise FormatError(f"no tally ledger at {ledger.display_url}; run `tally init` first")
        if revision not in LEDGER_REVISIONS:
            raise StorageError(
                f"schema is at {revision}, this tally needs {HEAD_REVISION}; run `tally db upgrade`"
            )
        return ledger

    @property
    def display_url(self) -> str:
        return self.engine.url.render_as_string(hide_password=True)

    @property
    def read_only(self) -> bool:
        """True for a SQLite file opened read-only (it can be read and verified, not appended to)."""
        return read_only(self.engine) is not None

    def _require_writable(self) -> None:
        path = read_only(self.engine)
        if path is not None:
            raise FormatError(f"{path} is read-only (no write permission, or read-only media): "
                              "tally reads and verifies it but cannot write to it")

    def upgrade(self) -> str:
        """Bring the schema to the newest revision (Alembic); returns it."""
        from .migrate import upgrade

        self._require_writable()
        try:
            upgrade(self.engine)
        except (SQLAlchemyError, sqlite3.Error) as exc:
            raise database_error(exc, self.engine) from None
        return HEAD_REVISION

    def close(self) -> None:
        self.engine.dispose()

    # ------------------------------------------------------------------ genesis

    def check_init(self, origin: str) -> None:
        """Refuse, before anything is created, what ``init`` would refuse.

        A bad origin, a read-only or unusable database, a database with tables named
        like tally's that tally did not create (``StorageError``), or one that already
        holds a ledger (``PolicyError``).
        """
        if not origin or any(ch.isspace() for ch in origin) or "+" in origin:
            raise FormatError(f"origin {origin!r} must be non-empty, without spaces or '+'")
        self._require_writable()
        foreign = foreign_tables(self.engine)
        if foreign:
            raise StorageError(f"{self.display_url} already has table(s) {', '.join(foreign)} that tally did not "
                               "create (no alembic_version); use an empty database")
        if schema_revision(self.engine) is not None and self.size():
            raise PolicyError(f"{self.display_url} already holds a ledger")

    def init(self, origin: str, root: Signer, name: str = "root") -> Event:
        """Create the schema and the genesis event; refuses a ledger that has events (see ``check_init``)."""
        self.check_init(origin)
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
        needed: dict[str, str] = {}  # blobs the payloads refer to -> the path of the first reference
        attached: set[str] = set()
        for item in items:
            _check_name("stream", item.stream)
            _check_name("type", item.type)
            payload_json = check_payload(item.payload).decode("utf-8")
            if BLOB_MARK in payload_json:
                for name, path in blob_references(item.payload).items():
                    needed.setdefault(name, path)
            if item.type in KEY_EVENT_TYPES and item.stream != "ledger":
                raise FormatError(f"{item.type} events belong to stream 'ledger'")
            if item.type == "ledger.created" and ledger_id is None:
                raise PolicyError("ledger.created is written only by `tally init`")
            attached.update(blob.sha256 for blob in item.blobs)
            prepared.append((item, payload_json))
        integrity, operational, db_error = dbapi_errors(self.engine)
        with self._lock:
            for _attempt in range(APPEND_RETRIES):
                try:
                    with append_transaction(self.engine) as tx:
                        self._require_blobs(tx, {n: p for n, p in needed.items() if n not in attached})
                        return self._append_locked(tx, prepared, signer, ledger_id)
                except integrity:
                    self._frontier = None
                    continue  # lost a race for a seq: retry on the new head
                except (operational, OperationalError) as exc:
                    raise ExternalError(f"database did not answer: {_first_line(exc)}") from None
                except TallyError:
                    self._frontier = None
                    raise
                except (db_error, SQLAlchemyError) as exc:
                    raise StorageError(f"append failed: {_first_line(exc)}") from None
        raise StorageError(f"append hit a uniqueness conflict {APPEND_RETRIES} times (another writer bypassing "
                           "tally's lock, or a duplicate in the batch); nothing was appended")

    def _append_locked(
        self, tx: RawTx, prepared: list[tuple[NewEvent, str]], signer: Signer, ledger_id: str | None
    ) -> list[Event]:
        head = tx.one("SELECT seq, hash, ledger FROM events ORDER BY seq DESC LIMIT 1")
        if ledger_id is None:
            if head is None:
                raise FormatError("the ledger has no genesis; run `tally init`")
            size, prev, ledger_id = int(head[0]), head[1], head[2]
            self._authorise(tx, signer, prepared)
        else:
            if head is not None:
                raise PolicyError("the ledger already has a genesis event")
            size, prev = 0, GENESIS_PREV
        frontier = self._load_frontier(tx, size, prev) if self.tree else None

        rows: list[tuple[Any, ...]] = []
        nodes: list[tuple[int, int, bytes]] = []
        blobs: dict[str, Blob] = {}
        events: list[Event] = []
        actor = signer.id
        actor_json = json_string(actor)
        ledger_json = json_string(ledger_id)
        sha256 = hashlib.sha256
        leaf = merkle.hash_leaf
        now = self._append_time(tx)  # one append, one time: the ledger's clock, under the append lock
        digests: list[bytes] = []
        for item, payload_json in prepared:
            size += 1
            body = (
                '{"actor":' + actor_json + ',"ledger":' + ledger_json + ',"payload":' + payload_json
                + ',"prev":"' + prev + '","seq":' + str(size) + ',"stream":' + json_string(item.stream)
                + ',"time":"' + now + '","type":' + json_string(item.type) + ',"v":1}'
            ).encode("utf-8")
            check_body_size(len(body))
            digest = sha256(body).digest()
            hash_hex = digest.hex()
            digests.append(digest)
            rows.append((size, ledger_id, prev, item.stream, item.type, now, actor, payload_json, hash_hex, "", 1))
            if frontier is not None:
                nodes.extend(frontier.append(leaf(digest)))
            for blob in item.blobs:
                blobs[blob.sha256] = blob
            prev = hash_hex
        # The chain needs only hashes; signatures come after, on two threads for a big batch
        # (Ed25519 signing releases the GIL).
        sigs = _sign_all(signer, digests)
        for index, sig in enumerate(sigs):
            row = rows[index]
            rows[index] = (*row[:9], sig, 1)
            events.append(Event(row[1], row[0], row[2], row[3], row[4], row[5], row[6], row[7], row[8], sig))
        tx.many(_INSERT_EVENT, rows)
        if nodes:
            tx.many(_INSERT_NODE, nodes)
        if blobs:
            self._write_blobs(tx, blobs)
        for event in events:
            if event.type in KEY_EVENT_TYPES:
                self._cache_key_event(tx, event)
        if frontier is not None:
            self._frontier, self._frontier_head = frontier, prev
        return events

    @staticmethod
    def _require_blobs(tx: RawTx, needed: Mapping[str, str]) -> None:
        """Every blob a payload refers to is attached to this append or already stored."""
        if not needed:
            return
        names = sorted(needed)
        marks = ", ".join("?" for _ in names)
        stored = {row[0] for row in tx.all(f"SELECT sha256 FROM blobs WHERE sha256 IN ({marks})", names)}
        for name in names:
            if name not in stored:
                raise PayloadError(needed[name], f"blob sha256:{name[:16]}... is neither attached nor stored")

    def _authorise(self, tx: RawTx, signer: Signer, prepared: list[tuple[NewEvent, str]]) -> None:
        row = tx.one("SELECT roles, revoked_at_seq, name FROM keys WHERE id = ?", (signer.id,))
        if row is None:
            raise PolicyError(f"key {signer.id[:16]} is not known to this ledger; add it with `tally keys add`")
        roles, revoked, name = row[0].split(","), row[1], row[2]
        if revoked is not None:
            raise PolicyError(f"key {signer.id[:16]} ({name}) was revoked at seq {revoked}")
        if not set(roles) & set(APPEND_ROLES):
            raise PolicyError(f"key {signer.id[:16]} ({name}) has roles {roles}; appending needs root or signer")
        key_events = [item for item, _ in prepared if item.type in KEY_EVENT_TYPES]
        if key_events and "root" not in roles:
            raise PolicyError(f"key events must be signed by a root key; {name} is not root")
        added: set[str] = set()
        # Active root keys as the batch proceeds: revoking the last one would leave a ledger
        # that can never append a key event again (key events need a root signature). The
        # root keys this batch adds are kept as it goes; the database's active ones are
        # read once, at the first revocation.
        roots: set[str] = set()
        stored_roots_read = False
        for item in key_events:
            if item.type == "key.added":
                _, _, _, new_roles = parse_key_entry(item.payload, "key.added")
                if item.payload["id"] in added:
                    raise PolicyError(f"key {item.payload['id'][:16]} is added twice in one append")
                added.add(item.payload["id"])
                if tx.one("SELECT id FROM keys WHERE id = ?", (item.payload["id"],)):
                    raise PolicyError(f"key {item.payload['id'][:16]} is already in the ledger")
                if "root" in new_roles:
                    roots.add(item.payload["id"])
            elif item.type == "key.revoked":
                kid = item.payload.get("id")
                if not isinstance(kid, str):
                    raise FormatError(f"key.revoked: id must be a key id, not {kid!r}")
                found = tx.one("SELECT revoked_at_seq FROM keys WHERE id = ?", (kid,))
                if found is None:
                    raise FormatError(f"key.revoked: unknown key {kid!r}")
                if found[0] is not None:
                    raise PolicyError(f"key {kid[:16]} is already revoked")
                if not stored_roots_read:
                    roots |= {str(row[0]) for row in tx.all("SELECT id, roles FROM keys WHERE revoked_at_seq IS NULL")
                              if "root" in str(row[1]).split(",")}
                    stored_roots_read = True
                if kid in roots and len(roots) == 1:
                    raise PolicyError(f"key {kid[:16]} is the last active root key; add another root key "
                                      "(tally keys add --role root) before revoking it")
                roots.discard(kid)

    def _cache_key_event(self, tx: RawTx, event: Event) -> None:
        payload = event.payload
        if event.type == "key.revoked":
            tx.run("UPDATE keys SET revoked_at_seq = ? WHERE id = ?", (event.seq, payload["id"]))
            return
        entries = payload["keys"] if event.type == "ledger.created" else [payload]
        for entry in entries:
            kid, name, public_raw, roles = parse_key_entry(entry, f"seq {event.seq}")
            tx.run("INSERT INTO keys (id, name, public_key, roles, added_seq, revoked_at_seq) "
                   "VALUES (?, ?, ?, ?, ?, NULL)",
                   (kid, name, base64.b64encode(public_raw).decode("ascii"), ",".join(roles), event.seq))

    def _write_blobs(self, tx: RawTx, blobs: Mapping[str, Blob]) -> None:
        for sha, blob in blobs.items():
            if tx.one("SELECT 1 FROM blobs WHERE sha256 = ?", (sha,)) is None:
                tx.run("INSERT INTO blobs (sha256, size, media_type, data) VALUES (?, ?, ?, ?)",
                       (sha, len(blob.data), blob.media_type, blob.data))

    def _load_frontier(self, tx: RawTx, size: int, head_hash: str) -> merkle.Frontier:
        cached = self._frontier
        if cached is not None and cached.size == size and self._frontier_head == head_hash:
            return cached.copy()
        nodes = merkle.frontier_nodes(size)
        hashes = _fetch_nodes(tx, nodes)
        return merkle.Frontier(size, [(level, hashes[(level, index)]) for level, index in nodes])

    # ------------------------------------------------------------------ read

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        """A connection for reads; the driver's errors become tally's (``ledger.db.database_error``)."""
        try:
            with self.engine.connect() as conn:
                yield conn
        except _READ_ERRORS as exc:
            raise database_error(exc, self.engine) from None

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
        check_seq(seq, "seq")
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
        for rows in self.rows(after, until=until, stream=stream, types=types, batch=batch):
            for row in rows:
                yield Event(*row)

    def rows(
        self,
        after: int = 0,
        *,
        until: int | None = None,
        stream: str | None = None,
        types: Sequence[str] | None = None,
        batch: int = 5000,
    ) -> Iterator[list[tuple[Any, ...]]]:
        """Batches of event rows as tuples in ``Event`` field order (the fast path for scans).

        Keyset pagination on ``seq``: each batch is one short read on the raw DB-API
        connection, so a long scan holds no transaction open.
        """
        check_seq(after, "after", low=0)
        if until is not None:
            check_seq(until, "until", low=0)
        where = ["seq > ?"]
        params: list[Any] = []
        if stream is not None:
            where.append("stream = ?")
            params.append(stream)
        if types:
            where.append("type IN (" + ", ".join("?" for _ in types) + ")")
            params.extend(types)
        if until is not None:
            where.append("seq <= ?")
            params.append(until)
        sql = f"SELECT {_ROW_COLUMNS} FROM events WHERE {' AND '.join(where)} ORDER BY seq LIMIT {int(batch)}"
        last = after
        while True:
            rows = self._fetch_batch(sql, (last, *params))
            if rows:
                yield rows
            if len(rows) < batch:
                return
            last = int(rows[-1][1])

    def _fetch_batch(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        with self._raw_read() as tx:
            return tx.all(sql, params)

    @contextmanager
    def _raw_read(self) -> Iterator[RawTx]:
        with read_transaction(self.engine) as tx:  # maps the driver's errors (database_error)
            yield tx

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

    def node_count(self) -> int:
        """How many complete-subtree hashes are stored."""
        with self._raw_read() as tx:
            row = tx.one("SELECT COUNT(*) FROM merkle_nodes")
        return int(row[0]) if row else 0

    def fetch_nodes(self, nodes: Sequence[tuple[int, int]]) -> dict[tuple[int, int], bytes]:
        with self._raw_read() as tx:
            return _fetch_nodes(tx, nodes)

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
        self._require_writable()
        with self.engine.begin() as conn:
            conn.execute(_CHECKPOINTS.insert().values(size=size, note=note))

