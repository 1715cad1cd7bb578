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

from ledger import FormatError
from runner.app import (
    admit_window,
    describe_power,
    dry_run_window,
    owner_name,
    power_spread_lines,
    recorded_decision,
    register_window,
    run_window,
    window_power,
    write_window_report,
)

from .common import (
    EXIT_FAILED,
    EXIT_OK,
    JsonOpt,
    QuietOpt,
    SiteOpt,
    VerboseOpt,
    WindowArg,
    command,
    discard_stdout,
    never_fails,
    print_json,
    session,
)

if TYPE_CHECKING:
    from runner.app import Decision
    from runner.execution import RunResult


def window_register(
    plan: Annotated[Path, typer.Argument(metavar="PLAN.toml", help="The plan file (schema: docs/plan.md).")],
    commit: Annotated[str | None, typer.Option(help="Set the plan's commit before registering.")] = None,
    window_id: Annotated[str | None, typer.Option("--window-id", help="Set the plan's window_id.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Validate and print the digest; append nothing.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Validate a plan and append window.registered (plan + plan_sha256); prints the window id."""
    result = register_window(session, plan, commit=commit, window_id=window_id, dry_run=dry_run)
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
    admission = admit_window(session, window)
    if json_out:
        print_json({"window": window, "admitted_seq": admission.seq, "already": admission.already})
    else:
        print(f"window {window} admitted at seq {admission.seq}" + (" (already)" if admission.already else ""))


def _execute(window: str, site: Path, json_out: bool, *, quiet: bool = False, verbose: bool = False,
             resume: bool = False, abort: bool = False, chain_production: Path | None = None,
             wait_hosts: float = 0.0) -> None:
    # Output written while the window runs never stops it: a closed pipe or a terminal gone mid-HOLD
    # must not leave production drained (never_fails); the window runs on to its recorded end.
    result = run_window(session, window, site, resume=resume, abort=abort, chain_production=chain_production,
                        wait_hosts_s=wait_hosts,
                        progress=not json_out and sys.stdout.isatty(), echo=not (json_out or quiet), verbose=verbose,
                        guard=never_fails)
    _ignore_signals()   # the window is over and safe: a late Ctrl-C must not cut its result or its exit code
    try:  # the window is over and recorded: a failed print loses only the report, never the exit code
        if not json_out and result.decision is not None:
            print_verdict(recorded_decision(session.ledger(), window))
        _print_result(result, json_out, owner_name())
    except (OSError, ValueError):
        discard_stdout()
    code = result.exit_code(abort=abort)
    if code != EXIT_OK:
        raise typer.Exit(code)


def _ignore_signals() -> None:
    """SIGINT and SIGTERM ignored from here on (the main thread only: the rest of the command prints and exits)."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


def print_verdict(decision: Decision | None) -> None:
    """The recorded decision as the verdict table of `tally verdict compute`."""
    from .verdict import print_result, verdict_console

    if decision is None:
        return
    result = decision.result
    if "cells" in result or "per_pair" in result:
        print_result(decision.input, result, verdict_console())
    else:
        print(f"Decision: {result.get('decision')}")
        for reason in result.get("reasons", []):
            print(f"  - {reason}")


def _print_result(result: RunResult, json_out: bool, runner: str) -> None:
    """Print the run's outcome (``_execute`` then exits with ``RunResult.exit_code``: 1 when it stopped,
    escalated, (run/resume) ended aborted, or did not decide because a step failed; 130 when a signal
    stopped it and it then ended safely).

    An aborted window is restored and decided REJECT: the run did its job safely, but the
    window failed, and a script that runs it must see that. ``tally window abort`` asked
    for that ending, so there it is success.
    """
    if json_out:
        print_json(result.to_json() | {"runner": runner})
    else:
        print(f"\nwindow {result.window}: ending {result.ending or '-'}, decision {result.decision or '-'}")
        for cause in result.causes:
            print(f"  cause: {cause}")
        for reason in result.reasons:
            print(f"  reason: {reason}")
        if result.waves:
            share = result.overhead_s / (result.overhead_s + result.measuring_s) if result.measuring_s else 0.0
            print(f"  {result.waves} waves measured in {result.measuring_s:.2f} s; runner overhead "
                  f"{result.overhead_s:.2f} s ({share:.1%} of the run)")
        if result.blocked:
            print(f"  stopped: {result.blocked}", file=sys.stderr)


WaitHostsOpt = Annotated[float, typer.Option(
    "--wait-hosts", min=0.0, max=86400.0, metavar="SECONDS",
    help="Wait this long for another runner to let go of the site's hosts (default: refuse at once, exit 3).")]
ChainProductionOpt = Annotated[Path | None, typer.Option(
    "--chain-production", help="Production capture ({sha256, identity}) for a window opened under another "
                               "window's chain marker; its sha256 must be the marker's.")]


def window_run(
    window: Annotated[str, typer.Argument(help="Registered window id.")],
    site: SiteOpt,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan, gates and timeline; touch nothing.")] = False,
    execute: Annotated[bool, typer.Option("--execute", help="Run the window for real (needs admission).")] = False,
    chain_production: ChainProductionOpt = None,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
    json_out: JsonOpt = False,
    wait_hosts: WaitHostsOpt = 0.0,
) -> None:
    """Dry-run or execute a registered window against a site."""
    if dry_run == execute:
        raise FormatError("pass exactly one of --dry-run and --execute")
    if dry_run:
        report = dry_run_window(session, window, site)
        if json_out:
            print_json(report)
        else:
            for line in report["lines"]:
                print(line)
        if report["refusals"]:  # the site cannot give the window what its rule needs
            raise typer.Exit(EXIT_FAILED)
        return
    _execute(window, site, json_out, quiet=quiet, verbose=verbose, chain_production=chain_production,
             wait_hosts=wait_hosts)


def window_resume(window: Annotated[str, typer.Argument(help="Window id.")], site: SiteOpt,
                  chain_production: ChainProductionOpt = None, quiet: QuietOpt = False,
                  verbose: VerboseOpt = False, json_out: JsonOpt = False, wait_hosts: WaitHostsOpt = 0.0) -> None:
    """Continue a window from replayed state (after a crash or an escalated restore); a window not yet run
    starts, a decided one is left as it is."""
    _execute(window, site, json_out, quiet=quiet, verbose=verbose, resume=True, chain_production=chain_production,
             wait_hosts=wait_hosts)


def window_abort(window: Annotated[str, typer.Argument(help="Window id.")], site: SiteOpt,
                 quiet: QuietOpt = False, verbose: VerboseOpt = False, json_out: JsonOpt = False,
                 wait_hosts: WaitHostsOpt = 0.0) -> None:
    """Stop a window: restore production and record decision REJECT."""
    _execute(window, site, json_out, quiet=quiet, verbose=verbose, abort=True, wait_hosts=wait_hosts)


def window_report(
    window: Annotated[str, typer.Argument(help="Decided window id.")],
    out: Annotated[Path, typer.Option("--out", help="Directory for report.html and report.md.")],
    json_out: JsonOpt = False,
) -> None:
    """Write the window's report (decision, reasons, plots) from its recorded decision."""
    paths = write_window_report(session, window, out)
    if json_out:
        print_json(paths)
    else:
        print(f"wrote {paths['html']} and {paths['markdown']}")


def power_command(
    window: WindowArg,
    effect: Annotated[float | None, typer.Option(help="The true effect (default: the plan's [power] effect, else the registered bar).")] = None,
    spread_from: Annotated[str, typer.Option("--spread-from", help="archive (other windows' control starts), pilot (--pilot FILE) or twin (--twin TWIN.toml).")] = "archive",
    pilot: Annotated[Path | None, typer.Option(help="Pilot file (JSON, docs/power.md) with --spread-from pilot.")] = None,
    target: Annotated[float | None, typer.Option(help="The power the MDE is taken at (default: the plan's min_power, else 0.8).")] = None,
    windows: Annotated[int | None, typer.Option(help="Simulated windows (default: the plan's, else 10000).")] = None,
    seed: Annotated[int | None, typer.Option(help="Their seed (default: the plan's, else 1).")] = None,
    twin: Annotated[Path | None, typer.Option(help="A calibrated twin (tally sim calibrate) with --spread-from twin.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """What the registered rule and design can detect: outcome probabilities, MDE, repeats or pairs needed.

    Appends nothing. Exit 1 when the spread cannot be estimated (too few comparable archive entries).
    """
    result = window_power(session, window, effect=effect, spread_from=spread_from, pilot=pilot, target=target,
                          windows=windows, seed=seed, twin=twin)
    figures = result.evidence.get("figures")
    if not json_out and "noise_source" in result.evidence:
        print(result.evidence["noise_source"])
    if json_out:
        print_json({"window": window, "verdict": result.verdict, "summary": result.summary, **result.evidence})
    elif figures is None:
        print(result.summary.removeprefix("FAIL (closed): "))
    else:
        _print_power(figures)
    if figures is None:
        raise typer.Exit(EXIT_FAILED)


def _print_power(f: dict[str, Any]) -> None:
    positive = "WIN" if f["rule"] == "win2-v1" else "CANDIDATE"
    print(f"{f['rule']}: {describe_power(f)}")
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
    for line in power_spread_lines(f):
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
    command(window, "power")(power_command)
    app.add_typer(window, name="window")
