"""The audit: protocol invariants over events, and the full audit (cryptography first).

- ``invariants``: ``audit_report(events)``, every invariant, each breach naming its seq;
- ``full``: ``run_audit`` on a database or an exported bundle (``tally audit``).
"""
