"""Check a gate and record its ``gate.result``: what `tally gate ...` and `tally demo` both do.

Each function checks one gate for a registered window, appends ``gate.result`` (admitting
the window when that was its last required gate) and returns a ``GateOutcome`` for the
caller to print.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..plan.register import registered_plan
from ..vocabulary import GateVerdict
from .admission import GateRecord, record_gate

if TYPE_CHECKING:
    from ledger.keys import Signer
    from ledger.store import Ledger

    from ..plan.model import Carry
    from ..rehearsal.rehearsal import Rehearsal

__all__ = ["GateOutcome", "budget_gate", "qualification_gate", "rehearsal_gate", "rng_gate"]


@dataclass(frozen=True)
class GateOutcome:
    gate: str
    verdict: str
    summary: str
    evidence: dict[str, Any]
    record: GateRecord


def qualification_gate(ledger: Ledger, signer: Signer, window: str, *, repo: Path, qualified_commit: str,
                       admission: Path, head: str | None = None, carry: Carry | None = None) -> GateOutcome:
    """Carry a QUALIFIED admission at Q to HEAD (the plan's commit unless ``head``)."""
    from .qualification import qualify
    from .receipts import read_admission_receipt

    plan = registered_plan(ledger, window).plan
    result = qualify(repo, qualified_commit, head or plan.commit, carry or plan.qualification,
                     read_admission_receipt(admission))
    failures = list(result.failures)
    evidence = dict(result.evidence)
    if result.head != plan.commit:
        failures.append(f"HEAD {result.head[:12]} is not the plan's commit {plan.commit[:12]}")
        evidence["failures"] = failures
    verdict: GateVerdict = "FAIL" if failures else "PASS"
    summary = result.summary if verdict == result.verdict else f"FAIL: {'; '.join(failures)}"
    record = record_gate(ledger, signer, window, "qualification", verdict, evidence, commit=result.head,
                         summary=summary)
    return GateOutcome("qualification", verdict, summary, evidence, record)


def rng_gate(ledger: Ledger, signer: Signer, window: str, *, receipt: Path, admission: Path) -> GateOutcome:
    """A PASS RNG receipt at the plan's commit whose kernel is the admission's prepared verifier."""
    from .receipts import read_admission_receipt, read_rng_receipt
    from .rng import check_rng

    plan = registered_plan(ledger, window).plan
    result = check_rng(read_rng_receipt(receipt), read_admission_receipt(admission), plan.commit, plan.rng_tests)
    record = record_gate(ledger, signer, window, "rng", result.verdict, result.evidence, commit=plan.commit,
                         summary=result.summary)
    return GateOutcome("rng", result.verdict, result.summary, result.evidence, record)


def budget_gate(ledger: Ledger, signer: Signer, window: str, *, pair_reserve_s: float | None = None) -> GateOutcome:
    """The plan's stage estimates against its limits (a measured pair reserve decides when given)."""
    from .budget import budget_report

    plan = registered_plan(ledger, window).plan
    report = budget_report(plan.budget, measured_reserve_s=pair_reserve_s)
    evidence = report.to_json()
    record = record_gate(ledger, signer, window, "budget", report.verdict, evidence, commit=plan.commit,
                         summary=report.summary)
    return GateOutcome("budget", report.verdict, report.summary, evidence, record)


def rehearsal_gate(ledger: Ledger, signer: Signer, window: str, rehearsal: Rehearsal,
                   responses: bytes) -> GateOutcome:
    """Record a rehearsal's result, its responses kept as a blob."""
    from ledger.store import Blob

    plan = registered_plan(ledger, window).plan
    blob = Blob(responses, "application/x-ndjson")
    evidence = dict(rehearsal.to_json(), responses=blob.ref())
    record = record_gate(ledger, signer, window, "rehearsal", rehearsal.verdict, evidence, commit=plan.commit,
                         summary=rehearsal.summary, blobs=[blob])
    return GateOutcome("rehearsal", rehearsal.verdict, rehearsal.summary, evidence, record)
