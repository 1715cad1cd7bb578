"""Alembic environment for tally.

``ledger.migrate.upgrade`` passes an open connection in ``config.attributes``; the
``alembic`` command line (``alembic.ini`` at the repository root) reads the URL from
``$TALLY_DB`` (default ``tally.db``).
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from ledger.db import make_engine, normalise_url
from ledger.models import Base

config = context.config
target_metadata = Base.metadata


def _run(connection: Connection) -> None:
    context.configure(connection=connection, target_metadata=target_metadata, compare_type=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = make_engine(normalise_url(config.get_main_option("sqlalchemy.url") or None))
    with engine.connect() as conn:
        _run(conn)
        conn.commit()
    engine.dispose()


def run_migrations_offline() -> None:
    context.configure(
        url=normalise_url(config.get_main_option("sqlalchemy.url") or None),
        target_metadata=target_metadata,
        literal_binds=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
