"""``tally audit``: the cryptographic checks, then every protocol invariant (``docs/events.md``, the audit).

Works on the database (``verify_ledger``) or on an exported bundle with nothing else
(``verify_bundle``). When the cryptography fails, the protocol is not audited: its
events cannot be trusted. Decisions are recomputed from the recorded measurements
(``decision-recomputes``) with ``runner.decide.inputs``. The JSON form is shaped as a
SLSA verification summary (an in-toto Statement) with tally's findings beside it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ledger.errors import VerificationError

from ..events.catalogue import ARCHIVE_STREAM
from ..state.archive import ARCHIVE_TYPES
from .invariants import AuditReport, RecomputeHook, audit_report

if TYPE_CHECKING:
    from ledger.event import Event
    from ledger.store import Ledger

    from ..plan.model import Plan

__all__ = ["FullAudit", "recompute_hook", "run_audit"]


def recompute_hook(all_events: Sequence[Event]) -> RecomputeHook:
    """The ``decision-recomputes`` hook: rebuild the input from events, recompute the rule."""
    from ..decide.inputs import decision_for, recorded_builder
    from ..events import payloads, read_payload

    archive = [e for e in all_events if e.stream == ARCHIVE_STREAM and e.type in ARCHIVE_TYPES]

    def hook(plan: Plan, window_events: Sequence[Event], decision: Event) -> Mapping[str, Any] | None:
        rebuilt, outcome = decision_for(plan, window_events, archive, before=decision.seq,
                                        builder=recorded_builder(decision))
        recorded = read_payload(decision, payloads.DecisionRecorded)
        if recorded.inputs_digest != rebuilt.digest:
            raise ValueError(f"inputs_digest {recorded.inputs_digest} is not the digest of the events "
                             f"used ({rebuilt.digest})")
        if recorded.input != rebuilt.input:
            raise ValueError("the recorded input differs from the input rebuilt from the window's events")
        return outcome

    return hook


@dataclass
class FullAudit:
    source: str
    crypto: dict[str, Any] = field(default_factory=dict)
    crypto_error: VerificationError | None = None
    protocol: AuditReport | None = None
    subjects: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.crypto_error is None and self.protocol is not None and self.protocol.ok

    def lines(self) -> list[str]:
        """The audit for a terminal; a cryptographic failure is one line (``tally audit`` prints it on stderr)."""
        if self.crypto_error is not None:
            return [f"FAIL cryptographic checks: {self.crypto_error} "
                    "(protocol invariants not audited: the events cannot be trusted)"]
        out = []
        c = self.crypto
        size = c.get("checkpoint_size")
        checkpoint = "no checkpoint" if size is None else f"checkpoint size {size}"
        out.append(f"OK cryptographic checks: {c.get('events')} events of {c.get('origin')} "
                   f"({checkpoint}, {c.get('blobs', 0)} blob(s)); trust: "
                   f"{'; '.join(c.get('trust', [])) or 'the database'}")
        assert self.protocol is not None
        p = self.protocol
        if p.ok:
            out.append(f"OK protocol: {p.events} events, {p.windows} window(s), every invariant holds")
        else:
            out.append(f"FAIL protocol: {len(p.violations)} violation(s); first: {p.violations[0]}")
            out.extend(f"  {v}" for v in p.violations)
        out.extend(f"  skipped: {s}" for s in p.skipped)
        return out

    def to_json(self) -> dict[str, Any]:
        from importlib.metadata import version

        from ledger.event import format_time
        from ledger.receipt import verification_summary

        statement = verification_summary(
            verifier_id="https://github.com/tally/tally#audit",
            time_verified=format_time(),
            resource_uri=self.source,
            passed=self.ok,
            subjects=self.subjects or [{"name": self.source, "digest": {"sha256": self.crypto.get("head", "0" * 64)}}],
            policy={"uri": "urn:tally:audit:spec-3.3+5.4"},
            verifier_version=version("tally"),
        )
        first = None
        if self.crypto_error is not None:
            first = {"check": "crypto", "seq": self.crypto_error.seq, "rule": self.crypto_error.rule,
                     "message": str(self.crypto_error.args[0])}
        elif self.protocol is not None and self.protocol.violations:
            v = self.protocol.violations[0]
            first = {"check": "protocol", "seq": v.seq, "invariant": v.invariant, "message": v.message}
        return {
            "ok": self.ok,
            "verificationResult": "PASSED" if self.ok else "FAILED",
            "first_failure": first,
            "crypto": self.crypto,
            "protocol": self.protocol.to_json() if self.protocol else None,
            "statement": statement,
        }


def run_audit(
    *,
    bundle: Path | None = None,
    book: Ledger | None = None,
    root_key: str | None = None,
    vkeys: Sequence[str] = (),
    witness_threshold: int = 0,
    jobs: int = 1,
) -> FullAudit:
    """Audit a bundle directory or a database: crypto first, then the protocol."""
    events: Sequence[Event]
    if bundle is not None:
        from ledger.bundle import verify_bundle

        result = FullAudit(str(bundle))
        try:
            verified = verify_bundle(bundle, root_key=root_key, vkeys=vkeys, witness_threshold=witness_threshold)
        except VerificationError as error:
            result.crypto_error = error
            return result
        events = verified.events
        result.crypto = {"events": len(events), "origin": verified.origin, "ledger": verified.ledger_id,
                         "checkpoint_size": verified.checkpoint.size, "root": verified.checkpoint.root.hex(),
                         "blobs": verified.blobs, "partial": verified.partial, "trust": list(verified.trust),
                         "head": events[-1].hash}
        result.subjects = [{"name": f"{verified.origin}@{verified.checkpoint.size}",
                            "digest": {"sha256": verified.checkpoint.root.hex()}}]
    else:
        assert book is not None
        from ledger.stored import verify_ledger

        result = FullAudit(book.display_url)
        try:
            report = verify_ledger(book, root_key=root_key, jobs=jobs)
        except VerificationError as error:
            result.crypto_error = error
            return result
        v = report.verified
        events = list(book.events(0, until=v.size))
        result.crypto = {"events": v.size, "origin": v.origin, "ledger": v.ledger_id, "head": v.head,
                         "root": v.root.hex(), "checkpoint_size": v.checkpoints[-1] if v.checkpoints else None,
                         "blobs": report.blobs_checked, "trust": [f"root key {root_key} pinned"] if root_key else []}
        result.subjects = [{"name": f"{v.origin}@{v.size}", "digest": {"sha256": v.root.hex()}}]
    partial = bool(result.crypto.get("partial"))
    result.protocol = audit_report(events, recompute=recompute_hook(events), partial=partial)
    return result
