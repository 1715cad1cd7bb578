"""The rehearsal gate: a rehearsal's result (``runner.rehearsal``) recorded, its responses kept as a blob.

The rehearsal itself talks to production (``tally rehearse``); the gate only records what
it found against the window's registered plan (``docs/gates.md``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .gate import Finding

if TYPE_CHECKING:
    from ledger.store import Ledger

    from ..plan.model import Plan
    from ..rehearsal.rehearsal import Rehearsal

__all__ = ["RehearsalGate"]


@dataclass(frozen=True)
class RehearsalGate:
    """The gate: ``rehearsal``'s verdict, with ``responses`` (its ``responses.jsonl``) kept as a blob."""

    rehearsal: Rehearsal
    responses: bytes

    def check(self, ledger: Ledger, plan: Plan) -> Finding:
        from ledger.store import Blob

        blob = Blob(self.responses, "application/x-ndjson")
        evidence = dict(self.rehearsal.to_json(), responses=blob.ref())
        return Finding("rehearsal", self.rehearsal.verdict, self.rehearsal.summary, evidence, commit=plan.commit,
                       blobs=(blob,))
