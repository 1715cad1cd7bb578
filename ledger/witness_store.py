"""The HTTP witness's database: what it cosigned (append-only, compare-and-swap) and its evidence log.

SQLite by default, PostgreSQL by URL (``ledger.db.make_engine``); the tables come from
the migrations (``0002_witness``). For each origin the cosigned checkpoints are steps
``1, 2, ...``; the latest step is the witness's state. ``advance`` inserts step
``n + 1`` only if it is still free: two requests that both judged against step ``n``
cannot both write (the primary key refuses the second), so a witness never rolls back
(the race in the tlog-witness spec). Every row is read back as hostile input: a note
larger than ``MAX_NOTE_BYTES`` or a root that is not 32 bytes is a ``StorageError``.
"""

from __future__ import annotations

import hashlib
import sqlite3
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Engine, Table, func, select
from sqlalchemy.exc import IntegrityError as SAIntegrityError
from sqlalchemy.exc import SQLAlchemyError

from . import note as notes
from .checkpoint import Checkpoint, parse_checkpoint
from .db import HEAD_REVISION, database_error, make_engine, normalise_url, schema_revision, sqlite_path
from .errors import FormatError, StorageError
from .models import WitnessCosignedRow, WitnessEvidenceRow

__all__ = ["MAX_EVIDENCE", "Cosigned", "Evidence", "WitnessStore", "origin_hash"]

MAX_EVIDENCE = 10_000  # evidence rows kept per origin; later refusals are still refused, not kept
_COSIGNED = cast(Table, WitnessCosignedRow.__table__)
_EVIDENCE = cast(Table, WitnessEvidenceRow.__table__)


def origin_hash(origin: str) -> str:
    """Lowercase hex SHA-256 of the origin (the tlog-witness monitor path, the state key)."""
    return hashlib.sha256(origin.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Cosigned:
    """The latest checkpoint cosigned for an origin: its step, the checkpoint, the stored note."""

    step: int
    checkpoint: Checkpoint
    note: str
    time: int


@dataclass(frozen=True)
class Evidence:
    """A log-signed submission refused as inconsistent, with the checkpoint cosigned before it."""

    id: int
    origin: str
    kind: str
    old_size: int
    proof: str
    cosigned_note: str
    submitted_note: str
    time: int

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "origin": self.origin, "kind": self.kind, "old_size": self.old_size,
                "time": self.time, "cosigned_size": _size_of(self.cosigned_note),
                "submitted_size": _size_of(self.submitted_note)}


def _size_of(note: str) -> int | None:
    try:
        return parse_checkpoint(notes.parse_note(note).text).size
    except FormatError:
        return None


def _checked_note(note: Any, what: str) -> str:
    if not isinstance(note, str) or len(note) > notes.MAX_NOTE_BYTES:
        raise StorageError(f"witness database: {what} is not a note of at most {notes.MAX_NOTE_BYTES} bytes")
    return note


class WitnessStore:
    """The witness tables of one database (created by ``tally witness serve`` on first use)."""

    def __init__(self, url: str | None, *, create: bool = True) -> None:
        normalised = normalise_url(url)
        path = sqlite_path(normalised)
        if not create and path is not None and not path.exists():
            raise FormatError(f"no witness database at {path}; `tally witness serve --db` creates one")
        self.engine: Engine = make_engine(normalised)
        revision = schema_revision(self.engine)
        if revision != HEAD_REVISION:
            if not create:
                raise FormatError(f"no witness database at {self.display_url} (schema {revision}); "
                                  "`tally witness serve --db` creates one")
            from .migrate import upgrade

            try:
                upgrade(self.engine)
            except (SQLAlchemyError, sqlite3.Error) as exc:
                raise database_error(exc, self.engine) from None

    @property
    def display_url(self) -> str:
        return self.engine.url.render_as_string(hide_password=True)

    def close(self) -> None:
        self.engine.dispose()

    def latest(self, origin: str) -> Cosigned | None:
        """The last checkpoint cosigned for ``origin``, or None."""
        query = (select(_COSIGNED).where(_COSIGNED.c.origin_hash == origin_hash(origin))
                 .order_by(_COSIGNED.c.step.desc()).limit(1))
        try:
            with self.engine.connect() as conn:
                row = conn.execute(query).first()
        except (SQLAlchemyError, sqlite3.Error) as exc:
            raise database_error(exc, self.engine) from None
        if row is None:
            return None
        note = _checked_note(row.note, f"the checkpoint at step {row.step}")
        try:
            checkpoint = parse_checkpoint(notes.parse_note(note).text)
        except FormatError as exc:
            raise StorageError(f"witness database: the checkpoint at step {row.step} is corrupt: {exc}") from None
        if checkpoint.origin != origin or checkpoint.size != row.size or checkpoint.root != row.root:
            raise StorageError(f"witness database: the row at step {row.step} does not match its note")
        return Cosigned(int(row.step), checkpoint, note, int(row.time))

    def advance(self, origin: str, step: int, checkpoint: Checkpoint, note: str, time: int) -> bool:
        """Write step ``step`` for ``origin``; False when another request wrote it first (compare-and-swap)."""
        values = {"origin_hash": origin_hash(origin), "step": step, "origin": origin, "size": checkpoint.size,
                  "root": checkpoint.root, "note": note, "time": time}
        try:
            with self.engine.begin() as conn:
                conn.execute(_COSIGNED.insert().values(**values))
        except SAIntegrityError:
            return False
        except (SQLAlchemyError, sqlite3.Error) as exc:
            raise database_error(exc, self.engine) from None
        return True

    def record_evidence(self, origin: str, kind: str, old_size: int, proof: str, cosigned_note: str,
                        submitted_note: str, time: int) -> int | None:
        """Keep a refused, log-signed, inconsistent submission; its id (None past ``MAX_EVIDENCE``)."""
        try:
            with self.engine.begin() as conn:
                count = conn.execute(select(func.count()).select_from(_EVIDENCE)
                                     .where(_EVIDENCE.c.origin == origin)).scalar_one()
                if count >= MAX_EVIDENCE:
                    return None
                result = conn.execute(_EVIDENCE.insert().values(
                    origin=origin, kind=kind, old_size=old_size, proof=proof, cosigned_note=cosigned_note,
                    submitted_note=submitted_note, time=time))
                key = result.inserted_primary_key
        except (SQLAlchemyError, sqlite3.Error) as exc:
            raise database_error(exc, self.engine) from None
        return int(key[0]) if key else None

    def evidence(self, evidence_id: int | None = None) -> list[Evidence]:
        """The evidence log (oldest first), or the one entry ``evidence_id``."""
        query = select(_EVIDENCE).order_by(_EVIDENCE.c.id)
        if evidence_id is not None:
            query = query.where(_EVIDENCE.c.id == evidence_id)
        try:
            with self.engine.connect() as conn:
                rows = conn.execute(query.limit(MAX_EVIDENCE * 4)).all()
        except (SQLAlchemyError, sqlite3.Error) as exc:
            raise database_error(exc, self.engine) from None
        return [Evidence(int(r.id), str(r.origin), str(r.kind), int(r.old_size), str(r.proof),
                         _checked_note(r.cosigned_note, f"evidence {r.id}"),
                         _checked_note(r.submitted_note, f"evidence {r.id}"), int(r.time)) for r in rows]
