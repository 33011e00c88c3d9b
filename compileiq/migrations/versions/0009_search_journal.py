"""The searcher's calls, per claim (``search_journal``), so that ``tune --resume`` replays them.

A searcher's state is the sequence of calls it was given: the batches it was asked for (its
initial design and its random draws go on from one to the next), the results it was told, and the
front-end/ptxas cost ratio the run measured. A resumed study rebuilt from its trials alone started
that sequence over, and its proposals were not the uninterrupted run's with the same seed. Each
row holds the calls one tuner made since its previous claim (each ask with what it proposed), the
trial numbers the claim took, and the run's compile counters at the claim. Studies from before
this revision have none: their resume rebuilds the searcher from the trials, as before.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-07
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "search_journal",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("study_id", sa.Integer, sa.ForeignKey("studies.id", ondelete="CASCADE"), nullable=False),
        sa.Column("run_id", sa.Integer, nullable=False),
        sa.Column("entry", sa.JSON, nullable=False),
    )
    op.create_index("ix_search_journal_study", "search_journal", ["study_id"])


def downgrade() -> None:
    op.drop_index("ix_search_journal_study", table_name="search_journal")
    op.drop_table("search_journal")
