"""The ledger: events, Merkle nodes, checkpoints, blobs, key cache.

Revision ID: 0001_ledger
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001_ledger"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "events",
        sa.Column("seq", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=False, nullable=False),
        sa.Column("ledger", sa.String(length=32), nullable=False),
        sa.Column("prev", sa.String(length=64), nullable=False),
        sa.Column("stream", sa.Text(), nullable=False),
        sa.Column("type", sa.Text(), nullable=False),
        sa.Column("time", sa.String(length=27), nullable=False),
        sa.Column("actor", sa.String(length=64), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.Column("sig", sa.Text(), nullable=False),
        sa.Column("v", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("seq"),
        sa.UniqueConstraint("hash"),
    )
    op.create_index("ix_events_stream_seq", "events", ["stream", "seq"])
    op.create_index("ix_events_type", "events", ["type"])
    op.create_table(
        "merkle_nodes",
        sa.Column("level", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("index", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("hash", sa.LargeBinary(length=32), nullable=False),
        sa.PrimaryKeyConstraint("level", "index"),
        sqlite_with_rowid=False,
    )
    op.create_table(
        "checkpoints",
        sa.Column("size", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("size"),
    )
    op.create_table(
        "blobs",
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("media_type", sa.Text(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("sha256"),
    )
    op.create_table(
        "keys",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("public_key", sa.Text(), nullable=False),
        sa.Column("roles", sa.Text(), nullable=False),
        sa.Column("added_seq", sa.BigInteger(), nullable=False),
        sa.Column("revoked_at_seq", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )


def downgrade() -> None:
    op.drop_table("keys")
    op.drop_table("blobs")
    op.drop_table("checkpoints")
    op.drop_table("merkle_nodes")
    op.drop_index("ix_events_type", table_name="events")
    op.drop_index("ix_events_stream_seq", table_name="events")
    op.drop_table("events")
