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
