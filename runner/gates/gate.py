"""One protocol for the gates checked before a window opens, and the one way their results are recorded.

A gate is built with what it reads (receipts, a repository, a pilot file, a rehearsal's
result, a site to probe) and checked against the window's registered plan::

    from runner.gates import RngGate, run_gate

    outcome = run_gate(ledger, signer, "w1", RngGate(receipt=Path("rng.json"), admission=Path("adm.json")))
    outcome.verdict, outcome.summary, outcome.record.event.seq

``Gate.check(ledger, plan)`` returns a :class:`Finding` (verdict, one line, the evidence
recorded, the blobs kept with it) and appends nothing; ``run_gate`` (:mod:`.record`)
reads the window's registration, checks the gate and appends its ``gate.result``,
admitting the window when that was the last gate it required (:mod:`.admission`). The gates:
``QualificationGate``, ``RngGate``, ``BudgetGate``, ``PowerGate``, ``StandardSpecGate``,
``RehearsalGate``, ``ChainPrevOkGate`` (``docs/gates.md``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ..vocabulary import GateName, GateVerdict

if TYPE_CHECKING:
    from ledger.store import Blob, Ledger

    from ..plan.model import Plan

__all__ = ["Finding", "Gate"]


@dataclass(frozen=True)
class Finding:
    """What a gate found: the ``gate.result`` to record (nothing is appended yet)."""

    gate: GateName
    verdict: GateVerdict
    summary: str
    evidence: dict[str, Any]
    commit: str | None                 # the commit the result is at
    start: str | None = None           # a start's gate (standard_spec) names its start
    blobs: Sequence[Blob] = field(default=())


class Gate(Protocol):
    """A gate: checks a registered plan (and what the gate was built with) and says what it found."""

    def check(self, ledger: Ledger, plan: Plan) -> Finding:
        """The finding for ``plan``; raises ``FormatError`` for bad input, appends nothing."""
        ...
