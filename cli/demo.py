"""``tally demo``: a simulated window end to end, with no setup."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from runner.app import DEMO_SCENARIOS as SCENARIOS
from runner.app import demo_result_lines, run_demo_in

from .common import EXIT_FAILED, JsonOpt, QuietOpt, VerboseOpt, command, print_json
from .window import print_verdict


def demo(
    directory: Annotated[Path, typer.Option("--dir", help="Where to leave everything.")] = Path("tally-demo"),
    scenario: Annotated[str | None, typer.Option(help="One of: " + ", ".join(SCENARIOS) + " (default window).")] = None,
    plan_file: Annotated[Path | None, typer.Option("--plan", help="Your own plan (TOML), run end to end on a "
                                                   "simulated pair built from its arms.")] = None,
    sim_file: Annotated[Path | None, typer.Option("--sim", help="With --plan: simulator settings (TOML) laid "
                                                  "over the pair derived from the plan.")] = None,
    force: Annotated[bool, typer.Option(help="Reuse a non-empty --dir that no demo made (its content is "
                                        "removed); a previous demo's --dir is always refreshed.")] = False,
    verbose: VerboseOpt = False,
    quiet: QuietOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """A simulated window end to end, with no setup; everything is left in --dir.

    With --plan: dress-rehearse your own window (gates, execute, restore, decide, verify,
    audit, report) on a simulated pair before touching production.
    """
    outcome = run_demo_in(directory, scenario, plan_file=plan_file, sim_file=sim_file, force=force,
                          quiet=json_out, verdicts=not json_out, verbosity=-1 if quiet else int(verbose),
                          progress=sys.stdout.isatty())
    if outcome.tour is not None:
        result = outcome.tour
        if result.caught_seq != result.tampered_seq:
            raise typer.Exit(EXIT_FAILED)
        print(f"\nShown: a signed, hash-chained ledger verifies; an edit made behind its back is caught at "
              f"seq {result.caught_seq} (rule {result.caught_rule}). Inspect {directory}/ (tally.db, bundle/).")
        return
    summary = outcome.summary
    if json_out:
        print_json(summary)
    else:
        for window, decision in outcome.verdicts:
            print(f"\n== verdict of window {window} ==")
            print_verdict(decision)
        print("\n== result ==")
        print("\n".join(demo_result_lines(summary)))
    if not summary["ok"]:
        raise typer.Exit(EXIT_FAILED)


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    command(app, "demo")(demo)
