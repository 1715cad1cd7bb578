"""The session every command runs in: the global options (``--db``, ``--key``), the ledger and the signing key.

::

    from runner.app import Session

    session = Session(db="tally.db", key=None)
    book, signer = session.ledger_and_signer()        # the key: --key, $TALLY_KEY, or .tally/root.pem
    registered(book, "w1").plan                         # one error (exit 2) for a window never registered

Light on purpose: ``tally --version`` builds one; the ledger's store is imported when a
command first opens it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ledger.errors import FormatError

if TYPE_CHECKING:
    from ledger.keys import Signer
    from ledger.store import Ledger

    from ..drivers import HostDriver
    from ..plan import Registration

__all__ = ["Session", "default_key_path", "registered", "site_driver"]


@dataclass
class Session:
    """Global options (``--db``, ``--key``), read by every command."""

    db: str | None = None
    key: str | None = None

    def ledger(self) -> Ledger:
        """The ledger the global options name; it must exist."""
        from ledger.store import Ledger

        return Ledger.open(self.db)

    def key_path(self, ledger_url: str | None = None) -> Path:
        """``--key``, else ``$TALLY_KEY``, else ``.tally/root.pem`` beside the database."""
        if self.key:
            return Path(self.key)
        if os.environ.get("TALLY_KEY"):
            return Path(os.environ["TALLY_KEY"])
        return default_key_path(ledger_url or self.db)

    def signer(self, ledger_url: str | None = None) -> Signer:
        from ledger.keys import load_signer

        path = self.key_path(ledger_url)
        if not path.exists():
            raise FormatError(f"no signing key at {path}; pass --key PATH or set TALLY_KEY")
        return load_signer(path)

    def ledger_and_signer(self) -> tuple[Ledger, Signer]:
        """The ledger of the global options and its signing key."""
        book = self.ledger()
        return book, self.signer(book.url)


def default_key_path(db: str | None) -> Path:
    """``.tally/root.pem`` in the directory of a SQLite file, else the working directory."""
    from ledger.db import normalise_url

    url = normalise_url(db)
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        base = Path(url[len("sqlite:///"):]).expanduser().resolve().parent
    else:
        base = Path.cwd()
    return base / ".tally" / "root.pem"


def registered(book: Ledger, window: str) -> Registration:
    """The window's registration; one error (exit 2) when it has none."""
    from ..plan import registered_plan

    return registered_plan(book, window)


def site_driver(path: Path) -> tuple[HostDriver, float]:
    """The driver a site file describes, and its time scale."""
    from ..drivers import load_site, site_time_scale

    driver = load_site(path)
    return driver, site_time_scale(driver)
