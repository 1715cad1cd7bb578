"""Alembic owns the schema: migrations give exactly what the models describe."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory

from ledger.db import HEAD_REVISION, make_engine, schema_revision
from ledger.migrate import alembic_config, upgrade
from ledger.models import Base


def test_head_revision_constant_is_alembic_head() -> None:
    assert ScriptDirectory.from_config(alembic_config()).get_current_head() == HEAD_REVISION


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_upgrade_head_matches_models(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}" if backend == "sqlite" else request.getfixturevalue("pg_url")
    engine = make_engine(url)
    assert schema_revision(engine) is None
    upgrade(engine)
    assert schema_revision(engine) == HEAD_REVISION
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        assert compare_metadata(context, Base.metadata) == []
    upgrade(engine)  # idempotent
    engine.dispose()


def test_alembic_command_line_migrates_tally_db(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    env = dict(os.environ, TALLY_DB=str(tmp_path / "cli.db"))
    subprocess.run([sys.executable, "-m", "alembic", "upgrade", "head"], cwd=repo, env=env, check=True,
                   capture_output=True)
    assert schema_revision(make_engine(f"sqlite:///{tmp_path / 'cli.db'}")) == HEAD_REVISION


def _stamped_before_the_witness(path: Path) -> None:
    """A ledger database as a tally before migration 0002 made it (Alembic's own downgrade)."""
    from alembic import command

    engine = make_engine(f"sqlite:///{path}")
    config = alembic_config()
    with engine.connect() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, "0001_ledger")
        conn.commit()
    assert schema_revision(engine) == "0001_ledger"
    engine.dispose()


def test_a_ledger_made_before_the_witness_tables_opens_verifies_and_appends(tmp_path: Path) -> None:
    """0002 adds only the HTTP witness's tables: a ledger that never runs a witness needs no upgrade (read-only
    media cannot take one); the witness's store adds them when it is given that database."""
    from ledger.keys import Signer
    from ledger.store import Ledger, NewEvent
    from ledger.verify import verify_events
    from ledger.witness_store import WitnessStore

    path = tmp_path / "old.db"
    root = Signer.generate()
    book = Ledger(str(path))
    book.init("tally.test/old", root)
    book.close()
    _stamped_before_the_witness(path)

    book = Ledger.open(str(path))
    book.append_many([NewEvent("s", "test.event", {"i": 1})], root)
    assert verify_events(book.events()).size == 2
    book.close()
    assert schema_revision(make_engine(f"sqlite:///{path}")) == "0001_ledger"  # nothing was migrated behind its back

    WitnessStore(str(path)).close()  # the witness upgrades the database it is given
    assert schema_revision(make_engine(f"sqlite:///{path}")) == HEAD_REVISION


def test_a_ledger_of_an_unknown_revision_is_refused(tmp_path: Path) -> None:
    import sqlite3

    from ledger.errors import StorageError
    from ledger.keys import Signer
    from ledger.store import Ledger

    path = tmp_path / "future.db"
    Ledger(str(path)).init("tally.test/future", Signer.generate())
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '0099_future'")
    with pytest.raises(StorageError, match="schema is at 0099_future"):
        Ledger.open(str(path))
