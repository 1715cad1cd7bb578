"""``tally demo``: a simulated window end to end, with no setup."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Annotated, Any

import typer

from ledger.errors import FormatError

from .common import EXIT_FAILED, JsonOpt, command, print_json
from .window import print_verdict

SCENARIOS = ("window", "chain", "pp3", "faults", "power", "ledger")


def demo(
    directory: Annotated[Path, typer.Option("--dir", help="Where to leave everything.")] = Path("tally-demo"),
    scenario: Annotated[str | None, typer.Option(help="window (default), chain, pp3, faults, power, or ledger.")] = None,
    plan_file: Annotated[Path | None, typer.Option("--plan", help="Your own plan (TOML), run end to end on a "
                                                   "simulated pair built from its arms.")] = None,
    sim_file: Annotated[Path | None, typer.Option("--sim", help="With --plan: simulator settings (TOML) laid "
                                                  "over the pair derived from the plan.")] = None,
    force: Annotated[bool, typer.Option(help="Reuse a non-empty --dir (its content is removed).")] = False,
    json_out: JsonOpt = False,
) -> None:
    """A simulated window end to end, with no setup; everything is left in --dir.

    With --plan: dress-rehearse your own window (gates, execute, restore, decide, verify,
    audit, report) on a simulated pair before touching production.
    """
    if plan_file is not None and scenario is not None:
        raise FormatError("give --plan or --scenario, not both")
    if sim_file is not None and plan_file is None:
        raise FormatError("--sim needs --plan (it describes the simulated pair your plan runs on)")
    scenario = scenario or "window"
    if scenario not in SCENARIOS:
        raise FormatError(f"--scenario {scenario!r}: expected one of {', '.join(SCENARIOS)}")
    prepared = None
    if plan_file is not None:  # every input checked before anything is made
        from runner.demo.pair import prepare_plan_demo
        from runner.demo.scenarios import DEMO_TIME_SCALE

        prepared = prepare_plan_demo(plan_file, sim_file, time_scale=DEMO_TIME_SCALE)
    if directory.is_symlink():
        raise FormatError(f"--dir {directory} is a symbolic link; give the directory itself")
    if directory.exists() and not directory.is_dir():
        raise FormatError(f"--dir {directory} exists and is not a directory")
    if directory.exists() and any(directory.iterdir()):
        if not force:
            raise FormatError(f"{directory} is not empty; pass --force to replace it, or --dir elsewhere")
        shutil.rmtree(directory)
    if scenario == "ledger":
        from runner.demo.ledger_tour import ledger_tour

        result = ledger_tour(directory)
        if result.caught_seq != result.tampered_seq:
            raise typer.Exit(EXIT_FAILED)
        print(f"\nShown: a signed, hash-chained ledger verifies; an edit made behind its back is caught at "
              f"seq {result.caught_seq} (rule {result.caught_rule}). Inspect {directory}/ (tally.db, bundle/).")
        return
    from runner.demo.scenarios import result_lines, run_demo

    summary: dict[str, Any] = run_demo(directory, scenario, quiet=json_out, plan=prepared)
    if json_out:
        print_json(summary)
    else:
        from ledger.store import Ledger

        book = Ledger.open(summary["db"])
        for entry in summary["windows"]:
            if "decision" in entry:
                print(f"\n== verdict of window {entry['window']} ==")
                print_verdict(book, entry["window"])
        book.close()
        print("\n== result ==")
        print("\n".join(result_lines(summary)))
    if not summary["ok"]:
        raise typer.Exit(EXIT_FAILED)


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    command(app, "demo")(demo)
