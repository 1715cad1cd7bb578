"""``tally archive``: the control archive: import an existing ``control-archive.jsonl``, list the rows."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from runner.app import import_archive, list_archive

from .common import JsonOpt, command, print_json, session


def archive_import(
    source: Annotated[Path, typer.Argument(help="A control-archive.jsonl: one JSON object per finished control start.")],
    mapping: Annotated[Path | None, typer.Option(
        "--map", help="A TOML mapping of the file's cells and fields onto tally's (docs/window.md).")] = None,
    for_window: Annotated[str | None, typer.Option(
        "--for", help="A registered window: every row must be of one of its plan's cells.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Append the file's rows as one signed archive.imported event (the file kept as a blob).

    Every row is checked (docs/events.md, archive.imported) before anything is appended: a
    bad row refuses the whole file, naming its line. The same file cannot be imported twice.
    With --map the rows are first mapped (an existing archive's own cell and field names);
    with --for they must be of that window's cells (the refusal names the unmatched ones).
    """
    result = import_archive(session, source, mapping=mapping, for_window=for_window)
    if json_out:
        print_json(result)
    else:
        rows = result["rows"]
        print(f"imported {rows} control archive row{'s' if rows != 1 else ''} from {source} "
              f"as archive.imported at seq {result['seq']}"
              + (f" (mapped by {mapping})" if mapping is not None else ""))
        for cell, count in result["cells"].items():
            print(f"  cell {cell}: {count} row{'s' if count != 1 else ''}")


def archive_list(json_out: JsonOpt = False) -> None:
    """Every archive row (finished control starts and imported rows) with its comparability key."""
    rows = list_archive(session)
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
