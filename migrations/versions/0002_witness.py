"""The HTTP witness's tables: the checkpoints it cosigned (append-only) and its evidence log.

Revision ID: 0002_witness
Revises: 0001_ledger
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_witness"
down_revision = "0001_ledger"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "witness_cosigned",
        sa.Column("origin_hash", sa.String(length=64), nullable=False),
        sa.Column("step", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("origin", sa.Text(), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("root", sa.LargeBinary(length=32), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("time", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("origin_hash", "step"),
    )
    op.create_table(
        "witness_evidence",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("origin", sa.Text(), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("old_size", sa.BigInteger(), nullable=False),
        sa.Column("proof", sa.Text(), nullable=False),
        sa.Column("cosigned_note", sa.Text(), nullable=False),
        sa.Column("submitted_note", sa.Text(), nullable=False),
        sa.Column("time", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )


def downgrade() -> None:
    op.drop_table("witness_evidence")
    op.drop_table("witness_cosigned")
