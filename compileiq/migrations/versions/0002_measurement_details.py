"""Measurement details: interquartile range, minimum, SM clocks per sample and a status.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-24
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("measurements") as batch:
        batch.add_column(sa.Column("iqr", sa.Float, nullable=True))
        batch.add_column(sa.Column("min", sa.Float, nullable=True))
        batch.add_column(sa.Column("clocks", sa.JSON, nullable=True))
        batch.add_column(sa.Column("status", sa.String(32), nullable=False, server_default="ok"))


def downgrade() -> None:
    with op.batch_alter_table("measurements") as batch:
        for column in ("status", "clocks", "min", "iqr"):
            batch.drop_column(column)
