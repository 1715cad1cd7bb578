"""Window execution commands (run, resume, abort, report), chain preflight, replay verdict, demo."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ledger.errors import FormatError

from .common import EXIT_FAILED, command, print_json, state

if TYPE_CHECKING:
    from runner.drivers.base import HostDriver
    from runner.execution.window import RunResult


def register(app: typer.Typer, groups: dict[str, typer.Typer]) -> None:
    """Add window execution, ``chain preflight``, ``replay verdict`` and ``demo``."""
    window = groups["window"]
    command(window, "run")(window_run)
    command(window, "resume")(window_resume)
    command(window, "abort")(window_abort)
    command(window, "report")(window_report)
    command(groups["chain"], "preflight")(chain_preflight)
    command(groups["replay"], "verdict")(replay_verdict)
    command(app, "demo")(demo)


SiteOpt = Annotated[Path, typer.Option("--site", help="Site file (docs/site.md): hosts, endpoints, actions.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Quiet; print the result as JSON.")]


def _site(path: Path) -> tuple[HostDriver, float]:
    from runner.drivers.site import load_site, site_time_scale

    driver = load_site(path)
    return driver, site_time_scale(driver)


def _execute(window: str, site: Path, json_out: bool, *, resume: bool = False, abort: bool = False) -> None:
    from runner.execution.lock import window_lock
    from runner.execution.progress import Progress
    from runner.execution.window import WindowRunner, owner_name

    book = state.ledger()
    signer = state.signer(book.url)
    driver, scale = _site(site)
    with window_lock(book, window), Progress(enabled=not json_out and sys.stdout.isatty(),
                                             echo=not json_out) as progress:
        runner = WindowRunner(book, signer, window, driver, time_scale=scale,
                              say=(lambda _t: None) if json_out else progress.say,
                              on_wave=progress.wave, owner=window)
        progress.begin(len(runner.plan.waves), runner.plan)
        if not resume and not abort and (runner.ws.actions or runner.ws.ending is not None):
            raise FormatError(f"window {window} has already run (phase {runner.ws.phase}); "
                              "use `tally window resume` to continue it")
        result = runner.run(resume=resume, abort=abort)
    driver.close()
    if not json_out and result.decision is not None:
        print_verdict(book, window)
    _print_result(result, json_out, owner_name())


def print_verdict(book: Any, window: str) -> None:
    """The recorded decision as the verdict table of `tally verdict compute`."""
    from .verdict_cmds import print_result, verdict_console

    for event in book.events(stream=f"window/{window}", types=["decision.recorded"]):
        result = event.payload["result"]
        if "cells" in result or "per_pair" in result:
            print_result(event.payload["input"], result, verdict_console())
        else:
            print(f"Decision: {result.get('decision')}")
            for reason in result.get("reasons", []):
                print(f"  - {reason}")
        return


def _print_result(result: RunResult, json_out: bool, runner: str) -> None:
    if json_out:
        print_json(result.to_json() | {"runner": runner})
    else:
        print(f"\nwindow {result.window}: ending {result.ending or '-'}, decision {result.decision or '-'}")
        for reason in result.reasons:
            print(f"  reason: {reason}")
        if result.waves:
            share = result.overhead_s / (result.overhead_s + result.measuring_s) if result.measuring_s else 0.0
            print(f"  {result.waves} waves measured in {result.measuring_s:.2f} s; runner overhead "
                  f"{result.overhead_s:.2f} s ({share:.1%} of the run)")
        if result.blocked:
            print(f"  stopped: {result.blocked}", file=sys.stderr)
    if result.blocked or result.escalated:
        raise typer.Exit(EXIT_FAILED)


def window_run(
    window: Annotated[str, typer.Argument(help="Registered window id.")],
    site: SiteOpt,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan, gates and timeline; touch nothing.")] = False,
    execute: Annotated[bool, typer.Option("--execute", help="Run the window for real (needs admission).")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Dry-run or execute a registered window against a site."""
    if dry_run == execute:
        raise FormatError("pass exactly one of --dry-run and --execute")
    if dry_run:
        from runner.execution.dryrun import dry_run_report

        driver, scale = _site(site)
        report = dry_run_report(state.ledger(), window, driver, scale)
        if json_out:
            print_json(report)
        else:
            for line in report["lines"]:
                print(line)
        return
    _execute(window, site, json_out)


def window_resume(window: Annotated[str, typer.Argument(help="Window id.")], site: SiteOpt,
                  json_out: JsonOpt = False) -> None:
    """Continue a window from replayed state (after a crash or an escalated restore)."""
    _execute(window, site, json_out, resume=True)


def window_abort(window: Annotated[str, typer.Argument(help="Window id.")], site: SiteOpt,
                 json_out: JsonOpt = False) -> None:
    """Stop a window: restore production and record decision REJECT."""
    _execute(window, site, json_out, abort=True)


def window_report(
    window: Annotated[str, typer.Argument(help="Decided window id.")],
    out: Annotated[Path, typer.Option("--out", help="Directory for report.html and report.md.")],
    json_out: JsonOpt = False,
) -> None:
    """Write the window's report (decision, reasons, plots) from its recorded decision."""
    from runner.report.window import window_report as build

    paths = build(state.ledger(), window, out)
    if json_out:
        print_json(paths)
    else:
        print(f"wrote {paths['html']} and {paths['markdown']}")


def chain_preflight(
    site: SiteOpt,
    window: Annotated[str | None, typer.Argument(help="Window id for the site commands' {window}; nothing is appended.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Serving state, HOLD and (only while the marker is present) placeholders; appends nothing."""
    from runner.execution.preflight import chain_preflight as run

    driver, _ = _site(site)
    report = run(state.ledger(), driver, window)
    driver.close()
    if json_out:
        print_json(report)
    else:
        for line in report["lines"]:
            print(line)
    if not report["ok"]:
        raise typer.Exit(EXIT_FAILED)


def replay_verdict(window: Annotated[str, typer.Argument(help="Window id.")], json_out: JsonOpt = False) -> None:
    """Recompute the window's decision from its recorded measurements; MATCH exit 0, MISMATCH exit 1."""
    from runner.decide.inputs import replay_window

    result = replay_window(state.ledger(), window)
    if json_out:
        print_json(result.to_json())
    else:
        verdict = "MATCH" if result.match else "MISMATCH"
        print(f"{verdict}: window {window}, decision seq {result.decision_seq}: recorded "
              f"{result.recorded.get('result', {}).get('decision')}, recomputed "
              f"{result.recomputed.get('result', {}).get('decision')}")
        for difference in result.differences:
            print(f"  {difference}")
    if not result.match:
        raise typer.Exit(EXIT_FAILED)


SCENARIOS = ("window", "chain", "pp3", "faults", "ledger")


def demo(
    directory: Annotated[Path, typer.Option("--dir", help="Where to leave everything.")] = Path("tally-demo"),
    scenario: Annotated[str, typer.Option(help="window (default), chain, pp3, faults, or ledger.")] = "window",
    force: Annotated[bool, typer.Option(help="Reuse a non-empty --dir (its content is removed).")] = False,
    json_out: JsonOpt = False,
) -> None:
    """A simulated window end to end, with no setup; everything is left in --dir."""
    if scenario not in SCENARIOS:
        raise FormatError(f"--scenario {scenario!r}: expected one of {', '.join(SCENARIOS)}")
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
    from runner.demo.scenarios import run_demo

    summary: dict[str, Any] = run_demo(directory, scenario, quiet=json_out)
    if json_out:
        print_json(summary)
    else:
        from ledger.store import Ledger

        book = Ledger.open(summary["db"])
        for entry in summary["windows"]:
            print(f"\n== verdict of window {entry['window']} ==")
            print_verdict(book, entry["window"])
        book.close()
    if not summary["ok"]:
        raise typer.Exit(EXIT_FAILED)
