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

from .files import read_bounded

if TYPE_CHECKING:
    from ..state import ArchiveRow
    from .session import Session

__all__ = ["MAX_ARCHIVE_BYTES", "import_archive", "list_archive"]

MAX_ARCHIVE_BYTES = 8 << 20   # an imported archive file; its rows travel in one event


def import_archive(session: Session, source: Path) -> dict[str, Any]:
    """Append the file's rows as one signed ``archive.imported`` event (the file kept as a blob).

    Every row is checked (``docs/events.md``, archive.imported) before anything is appended: a
    bad row refuses the whole file, naming its line. The same file cannot be imported twice.
    """
    from ledger.store import Blob
    from ledger.strictjson import read_json

    from ..events import ARCHIVE_STREAM, read_payload, window_event
    from ..events import payloads as p
    from ..state import MAX_IMPORT_ROWS, validate_import_row

    data = read_bounded(source, "control archive", MAX_ARCHIVE_BYTES)
    rows: list[dict[str, Any]] = []
    for number, line in enumerate(data.split(b"\n"), 1):
        if not line.strip():
            continue
        if len(rows) >= MAX_IMPORT_ROWS:
            raise FormatError(f"control archive {source} has more than {MAX_IMPORT_ROWS} rows")
        rows.append(validate_import_row(read_json(line, f"control archive {source} line {number}"), number))
    if not rows:
        raise FormatError(f"control archive {source} has no rows")
    sha = hashlib.sha256(data).hexdigest()
    book, signer = session.ledger_and_signer()
    for event in book.events(stream=ARCHIVE_STREAM, types=["archive.imported"]):
        if read_payload(event, p.ArchiveImported).plan_sha256 == sha:
            raise PolicyError(f"control archive {source} (sha256 {sha[:12]}) was imported already at seq {event.seq}")
    blob = Blob(data, "application/x-ndjson")
    name = f"import-{sha[:12]}"
    item = window_event(name, sha, "archive.imported",
                        p.ArchiveImported(source=p.BlobRef.of(blob), rows=rows, filename=source.name[:200]),
                        (blob,), ledger=book)
    stored = book.append(item.stream, item.type, item.payload, signer, item.blobs)
    return {"seq": stored.seq, "rows": len(rows), "source_sha256": sha, "import": name}


def list_archive(session: Session) -> list[ArchiveRow]:
    """Every archive row (finished control starts and imported rows) with its comparability key."""
    from ..events import ARCHIVE_STREAM
    from ..state import ARCHIVE_TYPES, archive_rows

    return archive_rows(session.ledger().events(stream=ARCHIVE_STREAM, types=list(ARCHIVE_TYPES)))
