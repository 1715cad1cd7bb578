"""Checking a ledger: verify it, export it as a bundle, audit it (or an exported bundle).

::

    from runner.app import Session, audit_ledger, export_ledger, verify_stored

    session = Session(db="tally.db")
    verify_stored(session).summary()                 # VerificationError names the first failing seq and rule
    export_ledger(session, Path("bundle"))["events"]
    audit_ledger(session, Path("bundle")).ok
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ledger.errors import FormatError

if TYPE_CHECKING:
    from ledger.stored import LedgerReport

    from ..audit import FullAudit
    from .session import Session

__all__ = ["audit_ledger", "export_ledger", "verify_stored"]


def verify_stored(session: Session, *, root_key: str | None = None, jobs: int = 1,
                  since: Path | None = None) -> LedgerReport:
    """Every event against the verification rules (``docs/format.md``); ``VerificationError`` on the first failure."""
    from ledger.stored import verify_ledger

    return verify_ledger(session.ledger(), root_key=root_key, jobs=jobs, since=since)


def export_ledger(session: Session, out: Path, *, stream: str | None = None) -> dict[str, Any]:
    """Write an audit bundle to ``out`` (a window's stream with its companions); its manifest."""
    from ledger.bundle import export_bundle

    from ..events import bundle_companions

    book = session.ledger()
    signer = None
    try:
        signer = session.signer(book.url)
    except FormatError:
        signer = None  # no key: export still works if a checkpoint covers the events
    return export_bundle(book, out, stream=stream, signer=signer, with_streams=bundle_companions(stream))


def audit_ledger(session: Session, bundle: Path | None, *, root_key: str | None = None,
                 vkeys: list[str] | None = None, witness_threshold: int = 0, jobs: int = 1) -> FullAudit:
    """Cryptography first, then every protocol invariant: of ``bundle`` when given, else of the database."""
    from ..audit import run_audit

    if bundle is not None:
        return run_audit(bundle=bundle, root_key=root_key, vkeys=vkeys or [], witness_threshold=witness_threshold)
    return run_audit(book=session.ledger(), root_key=root_key, jobs=jobs)
