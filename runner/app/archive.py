"""The control archive: import an existing ``control-archive.jsonl`` as one event, list every row.

::

    from runner.app import Session, import_archive, list_archive

    session = Session(db="tally.db")
    import_archive(session, Path("control-archive.jsonl"))["seq"]    # one archive.imported, the file a blob
    [row.key.cell for row in list_archive(session)]
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ledger.errors import FormatError, PolicyError

from ..state import UnmappedCell
from .files import read_bounded

if TYPE_CHECKING:
    from ledger.store import Ledger

    from ..state import ArchiveMapping, ArchiveRow
    from .session import Session

__all__ = ["MAX_ARCHIVE_BYTES", "import_archive", "list_archive"]

MAX_ARCHIVE_BYTES = 8 << 20   # an imported archive file; its rows travel in one event


def import_archive(session: Session, source: Path, *, mapping: Path | None = None,
                   for_window: str | None = None) -> dict[str, Any]:
    """Append the file's rows as one signed ``archive.imported`` event (the file kept as a blob).

    Every row is checked (``docs/events.md``, archive.imported) before anything is appended: a
    bad row refuses the whole file, naming its line. The same file cannot be imported twice.
    ``mapping``: a TOML file (``runner.state.archive_map``) that turns an existing archive's
    cells and fields into tally's before the check; it is kept as a second blob, and a source
    cell it has no table for refuses the file, naming every such cell. ``for_window``: the
    rows must be of that registered window's cells (refused otherwise, naming the unmatched
    cells), so that they count for its spread and its power gate.
    """
    from ledger.store import Blob
    from ledger.strictjson import read_json

    from ..events import ARCHIVE_STREAM, read_payload, window_event
    from ..events import payloads as p
    from ..state import MAX_IMPORT_ROWS, validate_import_row

    data = read_bounded(source, "control archive", MAX_ARCHIVE_BYTES)
    mapped = _read_mapping(mapping) if mapping is not None else None
    rows: list[dict[str, Any]] = []
    unmapped: dict[str, int] = {}
    for number, line in enumerate(data.split(b"\n"), 1):
        if not line.strip():
            continue
        if len(rows) >= MAX_IMPORT_ROWS:
            raise FormatError(f"control archive {source} has more than {MAX_IMPORT_ROWS} rows")
        row = read_json(line, f"control archive {source} line {number}")
        if mapped is not None:
            try:
                row = mapped[1].apply(row, number)
            except UnmappedCell as missing:
                unmapped[missing.cell] = unmapped.get(missing.cell, 0) + 1
                continue
        rows.append(validate_import_row(row, number))
    if unmapped:
        raise FormatError(f"control archive {source}: source cells not in the mapping {mapping}: "
                          + ", ".join(f"{cell[:100]} ({n} rows)" for cell, n in sorted(unmapped.items()))
                          + " (give each a [cells.<name>] table, or leave its rows out of the file)")
    if not rows:
        raise FormatError(f"control archive {source} has no rows")
    sha = hashlib.sha256(data).hexdigest()
    book, signer = session.ledger_and_signer()
    if for_window is not None:
        _check_cells(book, for_window, rows, source, mapping)
    for event in book.events(stream=ARCHIVE_STREAM, types=["archive.imported"]):
        if read_payload(event, p.ArchiveImported).plan_sha256 == sha:
            raise PolicyError(f"control archive {source} (sha256 {sha[:12]}) was imported already at seq {event.seq}")
    blob = Blob(data, "application/x-ndjson")
    name = f"import-{sha[:12]}"
    blobs = [blob]
    extra: dict[str, Any] = {}
    if mapped is not None:
        map_blob = Blob(mapped[0], "application/toml")
        blobs.append(map_blob)
        extra = {"mapping": p.BlobRef.of(map_blob),
                 "mapped_cells": {k: str(v["cell"]) for k, v in mapped[1].cells.items()}}
    item = window_event(name, sha, "archive.imported",
                        p.ArchiveImported(source=p.BlobRef.of(blob), rows=rows, filename=source.name[:200], **extra),
                        tuple(blobs), ledger=book)
    stored = book.append(item.stream, item.type, item.payload, signer, item.blobs)
    cells: dict[str, int] = {}
    for row in rows:
        cells[row["cell"]] = cells.get(row["cell"], 0) + 1
    result = {"seq": stored.seq, "rows": len(rows), "source_sha256": sha, "import": name, "cells": cells}
    if mapped is not None:
        result["mapping_sha256"] = hashlib.sha256(mapped[0]).hexdigest()
    return result


MAX_MAPPING_BYTES = 1 << 20


def _read_mapping(path: Path) -> tuple[bytes, ArchiveMapping]:
    """The mapping file's bytes (kept as a blob) and its parsed form; one line (exit 2) when it is not one."""
    import tomllib

    from ..state import parse_archive_mapping

    data = read_bounded(path, "archive mapping", MAX_MAPPING_BYTES)
    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise FormatError(f"archive mapping {path} is not TOML: {str(error)[:200]}") from None
    return data, parse_archive_mapping(doc, f"archive mapping {path}")


def _check_cells(book: Ledger, window: str, rows: list[dict[str, Any]], source: Path, mapping: Path | None) -> None:
    """Refuse rows of cells the window's plan does not have (they would never count for it)."""
    from ..plan import registered_plan

    plan = registered_plan(book, window).plan
    known = {cell.name: cell for cell in plan.cells}
    unmatched: dict[str, int] = {}
    for row in rows:
        if row["cell"] not in known:
            unmatched[row["cell"]] = unmatched.get(row["cell"], 0) + 1
    if unmatched:
        hint = f"fix the mapping {mapping}" if mapping is not None else "give --map MAPPING.toml (docs/window.md)"
        raise FormatError(f"control archive {source}: cells match no cell of window {window}'s plan: "
                          + ", ".join(f"{cell[:100]} ({n} rows)" for cell, n in sorted(unmatched.items()))
                          + f" (the plan's cells: {', '.join(sorted(known))[:400]}); {hint}")


def list_archive(session: Session) -> list[ArchiveRow]:
    """Every archive row (finished control starts and imported rows) with its comparability key."""
    from ..events import ARCHIVE_STREAM
    from ..state import ARCHIVE_TYPES, archive_rows

    return archive_rows(session.ledger().events(stream=ARCHIVE_STREAM, types=list(ARCHIVE_TYPES)))
