"""Database engines: URL handling, SQLite pragmas, the append lock, schema state.

SQLite (default, ``tally.db``) runs in WAL mode with a busy timeout and
``synchronous=FULL``; an append transaction starts with ``BEGIN IMMEDIATE`` so that
one writer at a time extends the chain. A SQLite file tally may not write (no write
permission bits, or on read-only media) is opened read-only (``mode=ro``, and
``immutable=1`` when it has no ``-wal`` file): it reads and verifies, and an append is
refused with one line. PostgreSQL (psycopg 3) serialises appends with a
transaction-scoped advisory lock.

``database_error`` is the one map from a driver's error to tally's error tree: only a
server that did not answer (connection refused, timeout, shutting down, a lock held
past the busy timeout) is an ``ExternalError`` (retry); a wrong ``--db`` (a directory,
a file that is not a database, a read-only file, a database that does not exist) is a
``FormatError``; anything else the database says is a ``StorageError``.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import urllib.parse
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import ArgumentError, OperationalError, SQLAlchemyError
from sqlalchemy.pool import StaticPool

from .errors import ExternalError, FormatError, StorageError, TallyError

__all__ = [
    "APPEND_LOCK_KEY",
    "DEFAULT_DB",
    "HEAD_REVISION",
    "TALLY_TABLES",
    "RawTx",
    "append_transaction",
    "database_error",
    "dbapi_errors",
    "foreign_tables",
    "make_engine",
    "normalise_url",
    "read_only",
    "read_transaction",
    "schema_revision",
    "sqlite_path",
]

DEFAULT_DB = "tally.db"
HEAD_REVISION = "0002_witness"  # the newest Alembic revision; tests check it is head
APPEND_LOCK_KEY = 0x7A11E9  # pg_advisory_xact_lock key for appends
BUSY_TIMEOUT_MS = 60_000
TALLY_TABLES = ("events", "merkle_nodes", "blobs", "keys", "checkpoints")  # what migration 0001 creates
_READ_ONLY = "tally_read_only"  # execution option of a read-only engine: the file's path


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


def _check_sqlite_file(path: Path) -> None:
    """Refuse, before SQLite does something odd with it, a ``--db`` that cannot be a database file."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise FormatError(f"cannot use {path} as a SQLite database: {exc.strerror}") from None
    if stat.S_ISDIR(mode):
        raise FormatError(f"{path} is a directory, not a SQLite database file")
    if not stat.S_ISREG(mode):
        raise FormatError(f"{path} is not a regular file; a SQLite database is a file")


def _sqlite_read_only(path: Path) -> bool:
    """True for an existing file tally must not write: no write bits, no write access, or a read-only directory.

    WAL mode creates ``-wal`` and ``-shm`` files beside the database, so a database in
    a directory tally cannot write is read-only too. The permission bits count even
    for root: a ledger chmod'ed read-only is meant to be read, not extended.
    """
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    if not mode & 0o222 or not os.access(path, os.W_OK):
        return True
    return not os.access(path.parent, os.W_OK | os.X_OK)


def _read_only_uri(path: Path) -> str:
    """SQLite URI of ``path`` opened read-only; ``immutable=1`` when no ``-wal`` file holds newer pages."""
    uri = "file:" + urllib.parse.quote(str(path.resolve()), safe="/") + "?mode=ro"
    if not Path(f"{path}-wal").exists():
        uri += "&immutable=1"  # nothing to read from a WAL, and no -shm to create on read-only media
    return uri


def read_only(engine: Engine) -> str | None:
    """The file of a SQLite engine opened read-only (see the module docstring), else None."""
    value = engine.get_execution_options().get(_READ_ONLY)
    return str(value) if value else None


def _sqlite_engine(url: str, database: str | None) -> Engine:
    memory = not database or database == ":memory:"
    kwargs: dict[str, Any] = {}
    path = None if memory or database is None else Path(database)
    locked = False
    if path is not None:
        _check_sqlite_file(path)
        locked = _sqlite_read_only(path)
    if memory:
        kwargs = {"poolclass": StaticPool, "connect_args": {"check_same_thread": False}}
    elif locked and path is not None:
        uri = _read_only_uri(path)
        kwargs = {"creator": lambda: sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_MS / 1000,
                                                     check_same_thread=False)}
    else:
        kwargs = {"connect_args": {"timeout": BUSY_TIMEOUT_MS / 1000}}
    engine = create_engine(url, **kwargs)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" below decide how a transaction starts.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        if not memory and not locked:
            cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        mode = conn.get_execution_options().get("sqlite_begin", "DEFERRED")
        conn.exec_driver_sql(f"BEGIN {mode}")

    if locked:
        return engine.execution_options(**{_READ_ONLY: str(path)})
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
    back on any exception. A read-only database is refused (``FormatError``) before any
    statement; the driver's OperationalError becomes tally's error (``database_error``);
    other DB-API errors (IntegrityError: a lost race) propagate as the driver raised them.
    """
    path = read_only(engine)
    if path is not None:
        raise FormatError(f"{path} is read-only (no write permission, or read-only media): "
                          "tally reads and verifies it but cannot append to it")
    operational = engine.dialect.loaded_dbapi.OperationalError
    try:
        raw = engine.raw_connection()
    except SQLAlchemyError as exc:
        raise database_error(exc, engine) from None
    try:
        cursor = raw.cursor()
        sqlite = engine.dialect.name == "sqlite"
        if sqlite:
            cursor.execute("BEGIN IMMEDIATE")
        else:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", (APPEND_LOCK_KEY,))
        yield RawTx(cursor, engine.dialect.paramstyle == "qmark", engine.dialect.name)
        raw.commit()
    except operational as exc:
        with suppress(Exception):  # the original error matters more
            raw.rollback()
        raise database_error(exc, engine) from None
    except BaseException:
        with suppress(Exception):  # the original error matters more
            raw.rollback()
        raise
    finally:
        raw.close()


@contextmanager
def read_transaction(engine: Engine) -> Iterator[RawTx]:
    """Reads on the raw DB-API connection (no lock; rolled back and returned to the pool).

    Driver errors (and a parameter SQLite cannot hold, ``OverflowError``) become tally's
    errors (``database_error``).
    """
    try:
        raw = engine.raw_connection()
    except SQLAlchemyError as exc:
        raise database_error(exc, engine) from None
    dbapi_error = engine.dialect.loaded_dbapi.Error
    try:
        yield RawTx(raw.cursor(), engine.dialect.paramstyle == "qmark", engine.dialect.name)
    except (dbapi_error, OverflowError) as exc:
        raise database_error(exc, engine) from None
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
    except (SQLAlchemyError, sqlite3.Error) as exc:
        raise database_error(exc, engine) from None


def foreign_tables(engine: Engine) -> list[str]:
    """Tables named like tally's in a database without tally's schema (``alembic_version``).

    ``tally init`` refuses such a database instead of failing half-way through creating
    its tables (or, worse, adopting a table someone else wrote).
    """
    from sqlalchemy import inspect

    try:
        with engine.connect() as conn:
            names = set(inspect(conn).get_table_names())
    except (SQLAlchemyError, sqlite3.Error) as exc:
        raise database_error(exc, engine) from None
    if "alembic_version" in names:
        return []
    return [name for name in TALLY_TABLES if name in names]


# SQLite's messages (sqlite3 carries no error code before Python 3.11's sqlite_errorname).
_SQLITE_RETRY = ("database is locked", "database table is locked", "database schema is locked")
_SQLITE_BAD_FILE = ("file is not a database", "not a database", "unable to open database file",
                    "readonly database", "read-only", "file is encrypted")
# PostgreSQL: classes and states where the server (or the way to it) is not answering now.
_PG_RETRY_CLASSES = ("08", "53", "57")  # connection exception, insufficient resources, operator intervention
_PG_RETRY_STATES = ("40001", "40P01", "55P03")  # serialization failure, deadlock, lock not available
_PG_BAD_INPUT_CLASSES = ("28", "3D", "3F", "22")  # auth, no such database / schema, data exception
_PG_FATAL_RETRY = ("starting up", "shutting down", "in recovery", "too many clients", "too many connections",
                   "terminating connection", "not accepting connections")


def database_error(exc: BaseException, engine: Engine | None = None) -> TallyError:
    """The tally error for a driver's (or SQLAlchemy's) error; see the module docstring."""
    orig = getattr(exc, "orig", None) or exc
    message = _first_line(orig)
    lowered = str(orig).lower()
    where = "" if engine is None else f"{engine.url.render_as_string(hide_password=True)}: "
    if isinstance(orig, OverflowError):
        return FormatError(f"{where}a number is out of range for the database: {message}")
    if isinstance(orig, sqlite3.Error) or (engine is not None and engine.dialect.name == "sqlite"):
        if any(text in lowered for text in _SQLITE_RETRY):
            return ExternalError(f"{where}database is locked by another writer past the busy timeout ({message}); "
                                 "retry")
        if "readonly" in lowered or "read-only" in lowered:
            return FormatError(f"{where}the database is read-only ({message})")
        if any(text in lowered for text in _SQLITE_BAD_FILE):
            return FormatError(f"{where}not a usable SQLite database ({message})")
        return StorageError(f"{where}the database failed: {message}")
    sqlstate = getattr(orig, "sqlstate", None)
    if isinstance(sqlstate, str) and sqlstate:
        if sqlstate.startswith(_PG_RETRY_CLASSES) or sqlstate in _PG_RETRY_STATES:
            return ExternalError(f"database did not answer: {message}")
        if sqlstate.startswith(_PG_BAD_INPUT_CLASSES):
            return FormatError(f"{where}{message}")
        return StorageError(f"{where}the database failed: {message}")
    # No SQLSTATE: the connection itself failed. A server that answered FATAL (no such
    # database, role or password) said no for good; anything else did not answer.
    if "fatal:" in lowered and not any(text in lowered for text in _PG_FATAL_RETRY):
        return FormatError(f"the database server refused the connection: {_fatal_line(str(orig))}")
    if isinstance(exc, OperationalError) or _is_operational(orig):
        return ExternalError(f"database did not answer: {message}")
    return StorageError(f"{where}the database failed: {message}")


def _is_operational(exc: BaseException) -> bool:
    """A DB-API OperationalError of any driver (each defines its own class)."""
    return any(cls.__name__ == "OperationalError" for cls in type(exc).__mro__)


def _fatal_line(text: str) -> str:
    for line in text.splitlines():
        if "FATAL:" in line:
            return " ".join(line[line.index("FATAL:"):].split())
    return _first_line(text)


def _first_line(exc: BaseException | str) -> str:
    text = str(exc).strip()
    return " ".join(text.splitlines()[0].split()) if text else type(exc).__name__
