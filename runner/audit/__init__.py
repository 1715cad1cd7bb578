"""The audit: protocol invariants over events, and the full audit (cryptography first).

::

    from runner.audit import run_audit

    report = run_audit(bundle=Path("bundle"), vkeys=[vkey])   # or run_audit(book=ledger)
    report.ok, report.lines()

- ``invariants``: ``audit_report(events)``, every invariant, each breach naming its seq;
- ``full``: ``run_audit`` on a database or an exported bundle (``tally audit``).
"""

from __future__ import annotations

from .full import FullAudit, run_audit
from .invariants import INVARIANTS, AuditReport, Violation, audit_protocol, audit_report

__all__ = [
    "INVARIANTS",
    "AuditReport",
    "FullAudit",
    "Violation",
    "audit_protocol",
    "audit_report",
    "run_audit",
]
