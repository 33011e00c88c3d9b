"""Indexes for a team database of many studies: a warm start finds the studies of the same
kernel source, toolchain, arch and space by index (it read the whole trials table on SQLite).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

RELATED = ("source_sha256", "toolchain", "arch", "space_id")


def upgrade() -> None:
    op.create_index("ix_studies_related", "studies", list(RELATED))


def downgrade() -> None:
    op.drop_index("ix_studies_related", table_name="studies")
