"""``tally promote check`` / ``register``: is a decision receipt enough to promote? (offline; promotes nothing)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from runner.app import promotion_check, promotion_register

from .common import EXIT_FAILED, JsonOpt, check_seq, command, print_json, printable, session


def promote_check(
    receipt_dir: Annotated[Path, typer.Argument(metavar="RECEIPT_DIR",
                                                help="Directory of an exported decision receipt "
                                                     "(`tally receipt export SEQ --window-context`).")],
    policy_file: Annotated[Path, typer.Option("--policy", metavar="POLICY.toml",
                                              help="The promotion policy (docs/promotion.md).")],
    seq: Annotated[int | None, typer.Option(help="The decision's seq, when RECEIPT_DIR holds several.")] = None,
    ledger: Annotated[Path | None, typer.Option("--ledger", metavar="BUNDLE",
                                                help="The ledger the looks are counted in: a full `tally export` "
                                                     "covering the receipt's checkpoint.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Check a decision receipt offline against a promotion policy: PROMOTABLE (exit 0) or NOT PROMOTABLE (exit 1).

    Verifies the receipt (DSSE signature, inclusion proof, checkpoint, k-of-n witness
    cosignatures), then the policy: rule and metric set, mode, decision WIN, the
    carried-qualification binding, clock and archive conditions, and the candidate's looks
    counted in the ledger presented (--ledger) against the registered error budget.
    Promotes nothing. Bad input (a missing or malformed file, a bad policy) exits 2.
    """
    if seq is not None:
        check_seq(seq, "--seq")
    result, policy = promotion_check(receipt_dir, policy_file, seq, ledger=ledger)
    if json_out:
        print_json(result.to_json())
    else:
        verdict = "PROMOTABLE" if result.verdict == "PROMOTABLE" else "NOT PROMOTABLE"
        print(f"{verdict}: decision receipt seq {result.seq}"
              f"{f' of window {result.window}' if result.window else ''} under policy {policy.name}")
        for check in result.checks:
            print(f"  {'ok  ' if check.ok else 'FAIL'} {check.name}: {printable(check.detail)}")
    if result.verdict != "PROMOTABLE":
        raise typer.Exit(EXIT_FAILED)


def promote_register(
    policy_file: Annotated[Path, typer.Option("--policy", metavar="POLICY.toml",
                                              help="The promotion policy whose [looks] budget to register.")],
    json_out: JsonOpt = False,
) -> None:
    """Register a promotion policy's error budget over looks in the ledger, before the first look it judges."""
    out = promotion_register(session, policy_file)
    if json_out:
        print_json(out)
    else:
        looks = out["looks"]
        print(f"registered policy {out['policy']}'s budget at seq {out['seq']}: "
              f"alpha {looks['alpha']} over at most {looks['max_looks']} looks, {looks['spending']} spending")


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    promote = typer.Typer(help="The promotion gate: decision receipts checked offline against a policy.",
                          no_args_is_help=True)
    command(promote, "check")(promote_check)
    command(promote, "register")(promote_register)
    app.add_typer(promote, name="promote")
