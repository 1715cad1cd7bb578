"""Fixtures for the runner tests: a working directory with a ledger and a key, the CLI."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.app import app
from ledger.keys import Signer, generate_key_file
from ledger.store import Ledger


@dataclass
class Result:
    code: int
    out: str
    err: str


def tally(*args: str | Path) -> Result:
    """Run the CLI in-process (global options from the environment / working directory)."""
    result = CliRunner().invoke(app, [str(a) for a in args])
    return Result(result.exit_code, result.stdout, result.stderr)


@dataclass
class Site:
    """A working directory holding ``tally.db`` and ``.tally/root.pem``."""

    path: Path
    book: Ledger
    signer: Signer

    def size(self) -> int:
        return self.book.size()


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    monkeypatch.chdir(tmp_path)
    for name in ("TALLY_DB", "TALLY_KEY", "TALLY_KEY_PASSPHRASE"):
        monkeypatch.delenv(name, raising=False)
    signer = generate_key_file(tmp_path / ".tally" / "root.pem", "root")
    book = Ledger(f"sqlite:///{tmp_path / 'tally.db'}")
    book.init("tally.test/runner", signer)
    yield Site(tmp_path, book, signer)
    book.close()
