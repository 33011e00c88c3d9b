"""Builds findable by what ptxas was given (``builds.ptx_key``), and claims of builds in flight
(``build_claims``), so that tuners on one database never run ptxas twice on the same PTX with the
same flags: configurations that differ only in a front-end setting that leaves the PTX unchanged
share one build, within a run and across tuners.

A claim is a row under the PTX key's primary key (insert-if-absent), beaten by its tuner's
heartbeat thread and deleted in the transaction that records the build; a claim whose heartbeat
is older than a study's stale timeout is taken over. Builds from before this revision have no
PTX key: they are found by their configuration's key, as before.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("builds") as batch:
        batch.add_column(sa.Column("ptx_key", sa.String(64), nullable=True))
    op.create_index("ix_builds_ptx_key", "builds", ["ptx_key"])
    op.create_table(
        "build_claims",
        sa.Column("ptx_key", sa.String(64), primary_key=True),
        sa.Column("worker", sa.String(200), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    )


def downgrade() -> None:
    op.drop_table("build_claims")
    op.drop_index("ix_builds_ptx_key", table_name="builds")
    with op.batch_alter_table("builds") as batch:
        batch.drop_column("ptx_key")
