"""SQLAlchemy 2 models of the ledger's tables (``docs/deploy.md``).

Alembic owns the schema (``migrations/``); a test checks that the migrations give
exactly these tables. ``events`` is append-only: nothing in tally updates or deletes
its rows; ``keys`` is a cache derived from key events.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Index, Integer, LargeBinary, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

__all__ = ["Base", "BlobRow", "CheckpointRow", "EventRow", "KeyRow", "MerkleNodeRow", "WitnessCosignedRow",
           "WitnessEvidenceRow"]


SEQ_TYPE = BigInteger().with_variant(Integer(), "sqlite")


class Base(DeclarativeBase):
    pass


class EventRow(Base):
    """One event; the body is re-derivable from these columns byte for byte."""

    __tablename__ = "events"

    # INTEGER on SQLite makes seq the rowid itself: one B-tree fewer to write and to read in order.
    seq: Mapped[int] = mapped_column(SEQ_TYPE, primary_key=True, autoincrement=False)
    ledger: Mapped[str] = mapped_column(String(32))
    prev: Mapped[str] = mapped_column(String(64))
    stream: Mapped[str] = mapped_column(Text)
    type: Mapped[str] = mapped_column(Text)
    time: Mapped[str] = mapped_column(String(27))
    actor: Mapped[str] = mapped_column(String(64))
    payload: Mapped[str] = mapped_column(Text)  # JCS text of the payload, as hashed
    hash: Mapped[str] = mapped_column(String(64), unique=True)
    sig: Mapped[str] = mapped_column(Text)
    v: Mapped[int] = mapped_column(Integer, default=1)

    __table_args__ = (
        Index("ix_events_stream_seq", "stream", "seq"),
        Index("ix_events_type", "type"),
    )


class MerkleNodeRow(Base):
    """Hash of a complete subtree: leaves [index * 2^level, (index + 1) * 2^level).

    Level 0 (leaf hashes) is not stored: it is derived from ``events.hash``.
    """

    __tablename__ = "merkle_nodes"
    __table_args__ = ({"sqlite_with_rowid": False},)

    level: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    index: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    hash: Mapped[bytes] = mapped_column(LargeBinary(32))


class CheckpointRow(Base):
    """A signed C2SP checkpoint note the ledger issued (witness cosignatures appended)."""

    __tablename__ = "checkpoints"

    size: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    note: Mapped[str] = mapped_column(Text)


class BlobRow(Base):
    """Content-addressed evidence referenced by events (``docs/format.md``, blobs)."""

    __tablename__ = "blobs"

    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    size: Mapped[int] = mapped_column(BigInteger)
    media_type: Mapped[str] = mapped_column(Text)
    data: Mapped[bytes] = mapped_column(LargeBinary)


class KeyRow(Base):
    """Cache of the key ring, rebuilt from key events; never trusted by ``verify``."""

    __tablename__ = "keys"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(Text)
    public_key: Mapped[str] = mapped_column(Text)
    roles: Mapped[str] = mapped_column(Text)  # comma-separated
    added_seq: Mapped[int] = mapped_column(BigInteger)
    revoked_at_seq: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class WitnessCosignedRow(Base):
    """A checkpoint the HTTP witness cosigned: the log-signed note with its cosignature, kept whole.

    Append-only: step ``n + 1`` of an origin is written only in the transaction that read
    step ``n`` as the latest (the primary key makes a second writer from the same state
    fail), which is the compare-and-swap the tlog-witness spec asks for.
    """

    __tablename__ = "witness_cosigned"

    origin_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    step: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    origin: Mapped[str] = mapped_column(Text)
    size: Mapped[int] = mapped_column(BigInteger)
    root: Mapped[bytes] = mapped_column(LargeBinary(32))
    note: Mapped[str] = mapped_column(Text)
    time: Mapped[int] = mapped_column(BigInteger)


class WitnessEvidenceRow(Base):
    """A log-signed submission the HTTP witness refused as inconsistent, with what it had cosigned."""

    __tablename__ = "witness_evidence"

    id: Mapped[int] = mapped_column(SEQ_TYPE, primary_key=True, autoincrement=True)
    origin: Mapped[str] = mapped_column(Text)
    kind: Mapped[str] = mapped_column(String(32))
    old_size: Mapped[int] = mapped_column(BigInteger)
    proof: Mapped[str] = mapped_column(Text)
    cosigned_note: Mapped[str] = mapped_column(Text)
    submitted_note: Mapped[str] = mapped_column(Text)
    time: Mapped[int] = mapped_column(BigInteger)
