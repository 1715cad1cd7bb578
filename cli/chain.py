"""``tally chain``: chain mode: the previous-window check and the read-only preflight."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from runner.app import chain_preflight_report, check_chain_prev_ok, record_chain_prev_ok

from .common import EXIT_FAILED, JsonOpt, SiteOpt, WindowArg, command, print_json, session


def chain_prev_ok(
    window: WindowArg,
    site: Annotated[Path | None, typer.Option("--site", help="Also probe the hosts through this site file "
                                              "(preflight, and placeholder_proof on every host under the marker).")] = None,
    check: Annotated[bool, typer.Option(
        "--check", help="Check only: print the result, append nothing (no gate result, no chain abort).")] = False,
    json_out: JsonOpt = False,
) -> None:
    """The previous window left a consistent chain: from replayed state and, with --site, from the hosts
    themselves (aborts the chain on refusal). With --check nothing is appended: the same result and
    exit code, the JSON with seq null and recorded false."""
    if check:
        found = check_chain_prev_ok(session, window, site)
        if json_out:
            print_json({"window": window, "gate": "chain_prev_ok", "verdict": found.verdict,
                        "summary": found.summary, "seq": None, "chain_aborted_seq": None,
                        "evidence": found.evidence, "recorded": False})
        else:
            print(f"chain_prev_ok {found.summary}")
            print(f"checked only (--check): nothing recorded for window {window}")
        if found.verdict != "PASS":
            raise typer.Exit(EXIT_FAILED)
        return
    record = record_chain_prev_ok(session, window, site)
    result = record.result
    if json_out:
        print_json({"window": window, "gate": "chain_prev_ok", "verdict": result.verdict, "summary": result.summary,
                    "seq": record.gate_event.seq,
                    "chain_aborted_seq": None if record.aborted_event is None else record.aborted_event.seq,
                    "evidence": result.evidence})
    else:
        print(f"chain_prev_ok {result.summary}")
        print(f"recorded gate.result at seq {record.gate_event.seq} for window {window}")
        if record.aborted_event is not None:
            print(f"chain aborted at seq {record.aborted_event.seq}: the window must restore production "
                  f"(tally window abort {window})")
    if result.verdict != "PASS":
        raise typer.Exit(EXIT_FAILED)


def chain_preflight(
    site: SiteOpt,
    window: Annotated[str | None, typer.Argument(help="Window id for the site commands' {window}; nothing is appended.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Serving state, HOLD and (only while the marker is present) placeholders; appends nothing."""
    report = chain_preflight_report(session, site, window)
    if json_out:
        print_json(report)
    else:
        for line in report["lines"]:
            print(line)
    if not report["ok"]:
        raise typer.Exit(EXIT_FAILED)


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    chain = typer.Typer(help="Chain mode: preflight and the previous-window check.", no_args_is_help=True)
    command(chain, "prev-ok")(chain_prev_ok)
    command(chain, "preflight")(chain_preflight)
    app.add_typer(chain, name="chain")
