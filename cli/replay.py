"""``tally replay``: state and verdicts derived by replaying the ledger."""

from __future__ import annotations

from typing import Annotated

import typer

from runner.app import replay_power, replay_state, replay_verdict

from .common import EXIT_FAILED, JsonOpt, command, print_json, session


def state_command(
    window: Annotated[str | None, typer.Option("--window", help="Only this window's state.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Fold the ledger into the runner's state (docs/events.md): marker, HOLD, production, windows."""
    data = replay_state(session, window)
    if json_out:
        print_json(data)
        return
    marker = data["chain"]["marker"]
    print(f"ledger     size {data['ledger']['size']}, head {data['ledger']['head'][:16]}")
    print(f"production {data['production']}")
    print(f"hold       {'none' if data['hold'] is None else data['hold']['owner'] + ' since seq ' + str(data['hold']['seq'])}")
    print(f"marker     {'none' if marker is None else marker['window'] + ' (snapshot ' + str(marker['production_snapshot_sha256'])[:12] + ')'}")
    placeholders = ", ".join(data["chain"]["placeholders"]) or "none"
    print(f"placeholders {placeholders}")
    for wid, ws in data["windows"].items():
        gates = ", ".join(f"{name} {g['verdict']}" for name, g in ws["gates"].items()) or "no gates"
        decision = ws["decision"]["result"] if ws["decision"] else "-"
        print(f"window {wid}: {ws['phase']}; {gates}; starts {', '.join(ws['starts']) or '-'}; "
              f"waves {ws['waves']}; decision {decision}")
        for action in ws["open_actions"]:
            print(f"  open host action {action['action']} on {action['host']} (seq {action['seq']}): unknown outcome")


def verdict_command(window: Annotated[str, typer.Argument(help="Window id.")], json_out: JsonOpt = False) -> None:
    """Recompute the window's decision from its recorded measurements; MATCH exit 0, MISMATCH exit 1."""
    result = replay_verdict(session, window)
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


def power_command(window: Annotated[str, typer.Argument(help="Window id.")], json_out: JsonOpt = False) -> None:
    """Recompute every power gate result of the window from the ledger; MATCH exit 0, MISMATCH exit 1."""
    results = replay_power(session, window)
    match = all(not r.differences for r in results)
    if json_out:
        print_json({"window": window, "verdict": "MATCH" if match else "MISMATCH",
                    "results": [{"seq": r.seq, "verdict": r.verdict, "differences": r.differences} for r in results]})
    else:
        for r in results:
            print(f"{'MATCH' if not r.differences else 'MISMATCH'}: window {window}, power gate seq {r.seq} "
                  f"({r.verdict})")
            for difference in r.differences:
                print(f"  {difference}")
    if not match:
        raise typer.Exit(EXIT_FAILED)


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    replay = typer.Typer(help="Derive state and verdicts by replaying the ledger.", no_args_is_help=True)
    command(replay, "state")(state_command)
    command(replay, "verdict")(verdict_command)
    command(replay, "power")(power_command)
    app.add_typer(replay, name="replay")
