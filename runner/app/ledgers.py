"""The ledger itself: create it (``tally init``), upgrade its schema, append one event, read a blob.

::

    from runner.app import Session, init_ledger

    created = init_ledger(Session(db="tally.db"), origin="example.org/log")
    created["root_key"]["created"]     # True when .tally/root.pem was made for it
"""

from __future__ import annotations

import hashlib
import os
import re
from typing import TYPE_CHECKING, Any

from ledger.errors import FormatError, IntegrityError

from .files import read_json_arg

if TYPE_CHECKING:
    from ledger.event import Event

    from .session import Session

__all__ = ["append_event", "get_blob", "init_ledger", "upgrade_ledger"]


def init_ledger(session: Session, origin: str | None) -> dict[str, Any]:
    """Create the schema and the genesis event (and the root key file when no key is given); what was made."""
    from ledger.db import sqlite_path
    from ledger.keys import generate_key_file, load_signer
    from ledger.store import Ledger

    book = Ledger(session.db)
    path = sqlite_path(book.url)
    if path is not None and path.is_symlink():  # init creates the file: never through a planted link
        raise FormatError(f"the database path {path} is a symbolic link; refusing to create a ledger through it "
                          "(give its real path)")
    origin = origin or f"tally.local/{os.urandom(4).hex()}"
    book.check_init(origin)  # refuse a database init would refuse before a key is created
    key_path = session.key_path(book.url)
    created_key = False
    if session.key or os.environ.get("TALLY_KEY") or key_path.exists():
        root = load_signer(key_path, "root")
    else:
        root = generate_key_file(key_path, "root")
        created_key = True
    genesis = book.init(origin, root)
    return {
        "ledger": genesis.ledger,
        "origin": origin,   # what the genesis event records (init refused anything else)
        "db": book.display_url,
        "root_key": {"id": root.id, "path": str(key_path), "created": created_key},
        "seq": genesis.seq,
        "hash": genesis.hash,
    }


def upgrade_ledger(session: Session) -> str:
    """Bring the database schema to the newest revision; that revision."""
    from ledger.store import Ledger

    return Ledger(session.db).upgrade()


def append_event(session: Session, stream: str, type_: str, payload: str) -> Event:
    """Append one signed event; ``payload`` is JSON given inline or as ``@FILE``."""
    value = read_json_arg(payload, payload_rules=True)
    book = session.ledger()
    return book.append(stream, type_, value, session.signer(book.url))


def get_blob(session: Session, sha256: str) -> bytes:
    """A blob's bytes, checked against its digest (hex, optionally ``sha256:``)."""
    digest = sha256.removeprefix("sha256:").lower()
    if not re.fullmatch(r"[0-9a-f]{64}", digest):
        raise FormatError(f"{sha256!r} is not a SHA-256 digest (64 hex characters)")
    blob = session.ledger().blob(digest)
    if blob is None:
        raise FormatError(f"no blob sha256:{digest} in this ledger")
    if hashlib.sha256(blob.data).hexdigest() != digest:
        raise IntegrityError(f"stored blob sha256:{digest} does not match its digest")
    return blob.data
