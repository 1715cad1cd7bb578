"""``tally archive``: the control archive: import an existing ``control-archive.jsonl``, list the rows."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from .common import JsonOpt, command, ledger_and_signer, print_json, read_bounded, state

MAX_ARCHIVE_BYTES = 8 << 20   # an imported archive file; its rows travel in one event


def archive_import(
    source: Annotated[Path, typer.Argument(help="A control-archive.jsonl: one JSON object per finished control start.")],
    json_out: JsonOpt = False,
) -> None:
    """Append the file's rows as one signed archive.imported event (the file kept as a blob).

    Every row is checked (docs/events.md, archive.imported) before anything is appended: a
    bad row refuses the whole file, naming its line. The same file cannot be imported twice.
    """
    import hashlib

    from ledger.errors import FormatError, PolicyError
    from ledger.store import Blob
    from ledger.strictjson import read_json
    from runner.events import payloads as p
    from runner.events.catalogue import ARCHIVE_STREAM, window_event
    from runner.state.archive import MAX_IMPORT_ROWS, validate_import_row

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
    book, signer = ledger_and_signer()
    for event in book.events(stream=ARCHIVE_STREAM, types=["archive.imported"]):
        if event.payload.get("plan_sha256") == sha:
            raise PolicyError(f"control archive {source} (sha256 {sha[:12]}) was imported already at seq {event.seq}")
    blob = Blob(data, "application/x-ndjson")
    name = f"import-{sha[:12]}"
    item = window_event(name, sha, "archive.imported",
                        p.ArchiveImported(source=p.BlobRef.of(blob), rows=rows, filename=source.name[:200]),
                        (blob,), ledger=book)
    stored = book.append(item.stream, item.type, item.payload, signer, item.blobs)
    if json_out:
        print_json({"seq": stored.seq, "rows": len(rows), "source_sha256": sha, "import": name})
    else:
        print(f"imported {len(rows)} control archive row{'s' if len(rows) != 1 else ''} from {source} "
              f"as archive.imported at seq {stored.seq}")


def archive_list(json_out: JsonOpt = False) -> None:
    """Every archive row (finished control starts and imported rows) with its comparability key."""
    from runner.events.catalogue import ARCHIVE_STREAM
    from runner.state.archive import ARCHIVE_TYPES, archive_rows

    rows = archive_rows(state.ledger().events(stream=ARCHIVE_STREAM, types=list(ARCHIVE_TYPES)))
    if json_out:
        print_json({"rows": [r.to_json() for r in rows]})
        return
    if not rows:
        print("the control archive is empty")
        return
    for r in rows:
        k = r.key
        rate = "-" if r.pooled_rate_tps is None else f"{r.pooled_rate_tps:.2f} tok/s"
        print(f"seq {r.seq} {r.source} {r.window}/{r.start} cell {k.cell} max_tokens {k.max_tokens} "
              f"cap {k.clock_cap_mhz if k.clock_cap_mhz is not None else '-'} MHz "
              f"control {(k.control_config_digest or '-')[:12]} production {(k.production_commit or '-')[:12]} "
              f"{rate}{' DIAL-BACK (not in the day-to-day spread)' if r.dial_back else ''}")


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    group = typer.Typer(help="The control archive: import an existing archive file, list the rows.",
                        no_args_is_help=True)
    command(group, "import")(archive_import)
    command(group, "list")(archive_list)
    app.add_typer(group, name="archive")
