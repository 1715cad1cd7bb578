"""Check a gate and record its ``gate.result``: what `tally gate ...`, `tally rehearse` and `tally demo` all do.

``run_gate(ledger, signer, window, gate)`` checks any :class:`.gate.Gate` against the
window's registered plan and appends what it found (admitting the window when that was
its last required gate); the :class:`GateOutcome` it returns is for the caller to print.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..plan.register import registered_plan
from .admission import GateRecord, record_gate

if TYPE_CHECKING:
    from ledger.keys import Signer
    from ledger.store import Ledger

    from .gate import Finding, Gate

__all__ = ["GateOutcome", "record_finding", "run_gate"]


@dataclass(frozen=True)
class GateOutcome:
    """A recorded gate: what it found and the ``gate.result`` (and admission) appended."""

    gate: str
    verdict: str
    summary: str
    evidence: dict[str, Any]
    record: GateRecord


def record_finding(ledger: Ledger, signer: Signer, window: str, found: Finding) -> GateOutcome:
    """Append ``found`` as the window's ``gate.result`` (admitting the window if it was the last gate)."""
    record = record_gate(ledger, signer, window, found.gate, found.verdict, found.evidence, commit=found.commit,
                         summary=found.summary, start=found.start, blobs=found.blobs)
    return GateOutcome(found.gate, found.verdict, found.summary, found.evidence, record)


def run_gate(ledger: Ledger, signer: Signer, window: str, gate: Gate) -> GateOutcome:
    """Check ``gate`` against the window's registered plan and record what it found."""
    plan = registered_plan(ledger, window).plan
    return record_finding(ledger, signer, window, gate.check(ledger, plan))
