"""``tally window``: register, admit, run, resume, abort and report windows.

A window is admitted automatically when the last gate its plan requires passes (``window
admit`` does it on demand and says what is missing). ``run --execute``, ``resume`` and
``abort`` hold the window's runner lock for as long as they run.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ledger.errors import FormatError

from .common import (
    EXIT_FAILED,
    JsonOpt,
    SiteOpt,
    WindowArg,
    command,
    discard_stdout,
    ledger_and_signer,
    never_fails,
    print_json,
    registered,
    restage,
    site_driver,
    staged_out,
    state,
)

if TYPE_CHECKING:
    from runner.execution.window import RunResult


def window_register(
    plan: Annotated[Path, typer.Argument(metavar="PLAN.toml", help="The plan file (schema: docs/plan.md).")],
    commit: Annotated[str | None, typer.Option(help="Set the plan's commit before registering.")] = None,
    window_id: Annotated[str | None, typer.Option("--window-id", help="Set the plan's window_id.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Validate and print the digest; append nothing.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Validate a plan and append window.registered (plan + plan_sha256); prints the window id."""
    from runner.plan.parse import read_plan_file

    overrides = {k: v for k, v in (("commit", commit), ("window_id", window_id)) if v is not None}
    loaded = read_plan_file(plan, overrides=overrides)
    result: dict[str, Any] = {"window": loaded.plan.window_id, "plan_sha256": loaded.plan.sha256,
                              "protocol": loaded.plan.protocol, "mode": loaded.plan.mode, "seq": None,
                              "already": False}
    if not dry_run:
        from runner.plan.register import register_plan

        book, signer = ledger_and_signer()
        reg = register_plan(book, signer, loaded)
        result.update(seq=reg.seq, already=reg.already)
    if json_out:
        print_json(result)
        return
    print(result["window"])
    if dry_run:
        print(f"plan {result['plan_sha256']} is valid (dry run: nothing appended)")
    elif result["already"]:
        print(f"already registered at seq {result['seq']} with the same plan {result['plan_sha256']}")
    else:
        print(f"registered at seq {result['seq']}: plan {result['plan_sha256']}")


def window_admit(window: WindowArg, json_out: JsonOpt = False) -> None:
    """Append window.admitted if every required gate has a PASS at the plan's commit."""
    from runner.gates.admission import admit

    book, signer = ledger_and_signer()
    registered(book, window)
    admission = admit(book, signer, window)
    if json_out:
        print_json({"window": window, "admitted_seq": admission.seq, "already": admission.already})
    else:
        print(f"window {window} admitted at seq {admission.seq}" + (" (already)" if admission.already else ""))


def _execute(window: str, site: Path, json_out: bool, *, resume: bool = False, abort: bool = False,
             chain_production: Path | None = None) -> None:
    from runner.execution.lock import window_lock
    from runner.execution.progress import Progress
    from runner.execution.window import WindowRunner, owner_name

    book = state.ledger()
    signer = state.signer(book.url)
    registered(book, window)  # an unknown window is refused before the site is read or touched
    driver, scale = site_driver(site)
    # Output written while the window runs never stops it: a closed pipe or a terminal gone mid-HOLD
    # must not leave production drained (never_fails); the window runs on to its recorded end.
    with window_lock(book, window), Progress(enabled=not json_out and sys.stdout.isatty(),
                                             echo=not json_out) as progress:
        runner = WindowRunner(book, signer, window, driver, time_scale=scale,
                              say=(lambda _t: None) if json_out else never_fails(progress.say),
                              on_wave=never_fails(progress.wave), owner=window, chain_production=chain_production)
        never_fails(progress.begin)(len(runner.plan.waves), runner.plan)
        if not resume and not abort and (runner.ws.actions or runner.ws.ending is not None):
            raise FormatError(f"window {window} has already run (phase {runner.ws.phase}); "
                              "use `tally window resume` to continue it")
        result = runner.run(resume=resume, abort=abort)
    driver.close()
    try:  # the window is over and recorded: a failed print loses only the report, never the exit code
        if not json_out and result.decision is not None:
            print_verdict(book, window)
        _print_result(result, json_out, owner_name())
    except (OSError, ValueError):
        discard_stdout()
    if result.blocked or result.escalated or (not abort and result.ending == "aborted"):
        raise typer.Exit(EXIT_FAILED)


def print_verdict(book: Any, window: str) -> None:
    """The recorded decision as the verdict table of `tally verdict compute`."""
    from .verdict import print_result, verdict_console

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
    """Print the run's outcome (``_execute`` then exits 1 when it stopped, escalated, or (run/resume)
    ended aborted).

    An aborted window is restored and decided REJECT: the run did its job safely, but the
    window failed, and a script that runs it must see that. ``tally window abort`` asked
    for that ending, so there it is success.
    """
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


ChainProductionOpt = Annotated[Path | None, typer.Option(
    "--chain-production", help="Production capture ({sha256, identity}) for a window opened under another "
                               "window's chain marker; its sha256 must be the marker's.")]


def window_run(
    window: Annotated[str, typer.Argument(help="Registered window id.")],
    site: SiteOpt,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan, gates and timeline; touch nothing.")] = False,
    execute: Annotated[bool, typer.Option("--execute", help="Run the window for real (needs admission).")] = False,
    chain_production: ChainProductionOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Dry-run or execute a registered window against a site."""
    if dry_run == execute:
        raise FormatError("pass exactly one of --dry-run and --execute")
    if dry_run:
        from runner.execution.dryrun import dry_run_report

        book = state.ledger()
        registered(book, window)  # an unknown window is refused before the site is read
        driver, scale = site_driver(site)
        report = dry_run_report(book, window, driver, scale)
        if json_out:
            print_json(report)
        else:
            for line in report["lines"]:
                print(line)
        if report["refusals"]:  # the site cannot give the window what its rule needs
            raise typer.Exit(EXIT_FAILED)
        return
    _execute(window, site, json_out, chain_production=chain_production)


def window_resume(window: Annotated[str, typer.Argument(help="Window id.")], site: SiteOpt,
                  chain_production: ChainProductionOpt = None, json_out: JsonOpt = False) -> None:
    """Continue a window from replayed state (after a crash or an escalated restore)."""
    _execute(window, site, json_out, resume=True, chain_production=chain_production)


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

    book = state.ledger()
    with staged_out(out) as stage:  # refuses a symlinked or non-directory --out first
        staged = build(book, window, stage)
    paths = {**staged, "html": restage(staged["html"], stage, out), "markdown": restage(staged["markdown"], stage, out),
             "figures": [restage(p, stage, out) for p in staged["figures"]]}
    if json_out:
        print_json(paths)
    else:
        print(f"wrote {paths['html']} and {paths['markdown']}")


def window_power(
    window: WindowArg,
    effect: Annotated[float | None, typer.Option(help="The true effect (default: the plan's [power] effect, else the registered bar).")] = None,
    spread_from: Annotated[str, typer.Option("--spread-from", help="archive (other windows' control starts) or pilot (--pilot FILE).")] = "archive",
    pilot: Annotated[Path | None, typer.Option(help="Pilot file (JSON, docs/power.md) with --spread-from pilot.")] = None,
    target: Annotated[float | None, typer.Option(help="The power the MDE is taken at (default: the plan's min_power, else 0.8).")] = None,
    windows: Annotated[int | None, typer.Option(help="Simulated windows (default: the plan's, else 10000).")] = None,
    seed: Annotated[int | None, typer.Option(help="Their seed (default: the plan's, else 1).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """What the registered rule and design can detect: outcome probabilities, MDE, repeats or pairs needed.

    Appends nothing. Exit 1 when the spread cannot be estimated (too few comparable archive entries).
    """
    from runner.gates.power import check_power

    from .common import read_json_file

    if spread_from not in ("archive", "pilot"):
        raise FormatError(f"--spread-from must be archive or pilot, got {spread_from[:40]!r}")
    if (spread_from == "pilot") != (pilot is not None):
        raise FormatError("--spread-from pilot needs --pilot FILE (and --pilot needs --spread-from pilot)")
    if effect is not None and not 0 <= effect < 1:
        raise FormatError("--effect must be in [0, 1)")
    if target is not None and not 0 < target < 1:
        raise FormatError("--target must be in (0, 1)")
    if windows is not None and not 100 <= windows <= 1_000_000:
        raise FormatError("--windows must be in 100..1000000")
    if seed is not None and not 0 <= seed < 2**53:
        raise FormatError("--seed must be in 0..2^53-1")
    book = state.ledger()
    reg = registered(book, window)
    document = None if pilot is None else read_json_file(pilot, "--pilot", name=f"pilot file {pilot}")
    result = check_power(book, reg.plan, effect=effect, target=target, windows=windows, seed=seed, pilot=document,
                         until=book.size())
    figures = result.evidence.get("figures")
    if json_out:
        print_json({"window": window, "verdict": result.verdict, "summary": result.summary, **result.evidence})
    elif figures is None:
        print(result.summary.removeprefix("FAIL (closed): "))
    else:
        _print_power(figures)
    if figures is None:
        raise typer.Exit(EXIT_FAILED)


def _print_power(f: dict[str, Any]) -> None:
    from runner.decide.power import spread_lines
    from runner.gates.power import describe

    positive = "WIN" if f["rule"] == "win2-v1" else "CANDIDATE"
    print(f"{f['rule']}: {describe(f)}")
    for label, key, effect in (("at the effect", "at_effect", f["effect"]), ("at 0", "at_zero", 0.0)):
        probs = ", ".join(f"{k} {v['p']:.3f}" for k, v in f["outcomes"][key].items())
        extra = ""
        if "analytic" in f:
            extra = "; analytic " + ", ".join(f"{k} {v:.3f}" for k, v in f["analytic"][key].items()
                                              if isinstance(v, float))
        print(f"  {label} ({effect:+.2%}): {probs} (MC error <= {max(v['mc_error'] for v in f['outcomes'][key].values()):.3f}){extra}")
    if "analytic" in f:
        mde = f["analytic"]["mde"]
        approximates = f["analytic"].get("approximates")
        print(f"  analytic MDE: {'none' if mde is None else f'{mde:.2%}'}" + (f" ({approximates})" if approximates else ""))
    if "nominal_false_win_rate" in f:
        above = ("; ABOVE nominal: the start-to-start spread is shared by every repeat and the paired t cannot "
                 "see it") if f.get("false_win_above_nominal") else ""
        loss = f", false-LOSS rate {f['false_loss_rate']:.3f}" if "false_loss_rate" in f else ""
        print(f"  false-{positive} rate {f['false_positive_rate']:.3f} (nominal {f['nominal_false_win_rate']:.3f}){above}{loss}")
    for line in spread_lines(f):
        print(f"  {line}")
    print(f"  noise model: {f['noise_model']}")
    print(f"  {f['windows']} simulated windows, seed {f['seed']}, through the rule's own formulas"
          + (f" (power model {f['model']})" if "model" in f else ""))


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    window = typer.Typer(help="Register, run, resume, abort and report windows.", no_args_is_help=True)
    command(window, "register")(window_register)
    command(window, "admit")(window_admit)
    command(window, "run")(window_run)
    command(window, "resume")(window_resume)
    command(window, "abort")(window_abort)
    command(window, "report")(window_report)
    command(window, "power")(window_power)
    app.add_typer(window, name="window")
