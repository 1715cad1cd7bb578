"""Database engines: URL handling, SQLite pragmas, the append lock, schema state.

SQLite (default, ``tally.db``) runs in WAL mode with a busy timeout and
``synchronous=FULL``; an append transaction starts with ``BEGIN IMMEDIATE`` so that
one writer at a time extends the chain. PostgreSQL (psycopg 3) serialises appends
with a transaction-scoped advisory lock.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import ArgumentError, OperationalError, SQLAlchemyError
from sqlalchemy.pool import StaticPool

from .errors import ExternalError, FormatError, StorageError

__all__ = [
    "APPEND_LOCK_KEY",
    "DEFAULT_DB",
    "HEAD_REVISION",
    "RawTx",
    "append_transaction",
    "dbapi_errors",
    "make_engine",
    "normalise_url",
    "read_transaction",
    "schema_revision",
    "sqlite_path",
]

DEFAULT_DB = "tally.db"
HEAD_REVISION = "0001_ledger"  # the newest Alembic revision; tests check it is head
APPEND_LOCK_KEY = 0x7A11E9  # pg_advisory_xact_lock key for appends
BUSY_TIMEOUT_MS = 60_000


def normalise_url(db: str | None) -> str:
    """A SQLAlchemy URL from ``--db`` / ``$TALLY_DB``: a plain path means a SQLite file."""
    db = db or os.environ.get("TALLY_DB") or DEFAULT_DB
    if "://" not in db:
        return f"sqlite:///{Path(db).expanduser()}"
    if db.startswith("postgresql://") or db.startswith("postgres://"):
        return "postgresql+psycopg://" + db.split("://", 1)[1]
    return db


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite URL, or None (in-memory or another backend)."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
        return None
    return Path(parsed.database)


def make_engine(url: str) -> Engine:
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise FormatError(f"not a database URL: {url}") from None
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        return _sqlite_engine(url, parsed.database)
    if backend == "postgresql":
        try:
            return create_engine(url, pool_pre_ping=True, pool_size=2, max_overflow=4)
        except (ArgumentError, ImportError) as exc:
            raise FormatError(f"cannot use {url}: {exc}") from None
    raise FormatError(f"unsupported database {backend!r}; use SQLite or PostgreSQL")


def _sqlite_engine(url: str, database: str | None) -> Engine:
    memory = not database or database == ":memory:"
    kwargs: dict[str, Any] = {}
    if memory:
        kwargs = {"poolclass": StaticPool, "connect_args": {"check_same_thread": False}}
    else:
        kwargs = {"connect_args": {"timeout": BUSY_TIMEOUT_MS / 1000}}
    engine = create_engine(url, **kwargs)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" below decide how a transaction starts.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        if not memory:
            cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        mode = conn.get_execution_options().get("sqlite_begin", "DEFERRED")
        conn.exec_driver_sql(f"BEGIN {mode}")

    return engine


class RawTx:
    """The append transaction on the raw DB-API connection (the hot path skips SQLAlchemy).

    SQL is written with ``?`` placeholders and rewritten for psycopg's ``%s``.
    """

    def __init__(self, cursor: Any, qmark: bool, dialect: str) -> None:
        self.cursor = cursor
        self.qmark = qmark
        self.dialect = dialect

    def _sql(self, sql: str) -> str:
        return sql if self.qmark else sql.replace("?", "%s")

    def one(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        self.cursor.execute(self._sql(sql), params)
        row = self.cursor.fetchone()
        return tuple(row) if row is not None else None

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        self.cursor.execute(self._sql(sql), params)
        rows: list[tuple[Any, ...]] = self.cursor.fetchall()  # both drivers return tuples
        return rows

    def run(self, sql: str, params: Sequence[Any] = ()) -> None:
        self.cursor.execute(self._sql(sql), params)

    def many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self.cursor.executemany(self._sql(sql), rows)


@contextmanager
def append_transaction(engine: Engine) -> Iterator[RawTx]:
    """One transaction in which this process is the only appender to the ledger.

    SQLite: ``BEGIN IMMEDIATE`` takes the database's write lock (waiting up to the busy
    timeout). PostgreSQL: a transaction-scoped advisory lock; every statement after it
    sees what the previous holder committed (READ COMMITTED). Commits on success, rolls
    back on any exception. DB-API errors propagate as the driver raised them.
    """
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        sqlite = engine.dialect.name == "sqlite"
        if sqlite:
            cursor.execute("BEGIN IMMEDIATE")
        else:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", (APPEND_LOCK_KEY,))
        yield RawTx(cursor, engine.dialect.paramstyle == "qmark", engine.dialect.name)
        raw.commit()
    except BaseException:
        with suppress(Exception):  # the original error matters more
            raw.rollback()
        raise
    finally:
        raw.close()


@contextmanager
def read_transaction(engine: Engine) -> Iterator[RawTx]:
    """Reads on the raw DB-API connection (no lock; rolled back and returned to the pool)."""
    raw = engine.raw_connection()
    try:
        yield RawTx(raw.cursor(), engine.dialect.paramstyle == "qmark", engine.dialect.name)
    finally:
        with suppress(Exception):
            raw.rollback()
        raw.close()


def dbapi_errors(engine: Engine) -> tuple[type[Exception], type[Exception], type[Exception]]:
    """The driver's (IntegrityError, OperationalError, Error) classes."""
    dbapi = engine.dialect.loaded_dbapi
    return dbapi.IntegrityError, dbapi.OperationalError, dbapi.Error


def schema_revision(engine: Engine) -> str | None:
    """The Alembic revision the database is at, None when it has no tally schema."""
    try:
        with engine.connect() as conn:
            if not engine.dialect.has_table(conn, "alembic_version"):
                return None
            row = conn.execute(text("SELECT version_num FROM alembic_version")).first()
            return row[0] if row else None
    except OperationalError as exc:
        raise ExternalError(f"database did not answer: {_first_line(exc)}") from None
    except SQLAlchemyError as exc:
        raise StorageError(f"cannot open the database: {_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
