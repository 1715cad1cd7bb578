"""Run Alembic migrations programmatically (``tally db upgrade``, ``tally init``)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Engine

__all__ = ["alembic_config", "upgrade"]




def alembic_config():  # type: ignore[no-untyped-def]
    from alembic.config import Config

    import migrations

    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).parent))
    return config


def upgrade(engine: Engine, revision: str = "head") -> None:
    from alembic import command

    config = alembic_config()
    with engine.connect() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, revision)
        conn.commit()
