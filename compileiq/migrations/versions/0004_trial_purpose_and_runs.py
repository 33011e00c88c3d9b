"""Why each trial was built, and each run's limits: the budget counts search trials only.

``trials.purpose`` is ``search`` (the budget counts these), ``simplify``, ``ablation`` or
``confirm`` (built after the search to explain or shrink its winner; never counted). Rows from
before this revision were recorded as search trials and stay so. ``runs`` records each tuning
run's limits (budget, time budget, patience) and which one ended it.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.add_column(sa.Column("purpose", sa.Text, nullable=False, server_default="search"))
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("study_id", sa.Integer, sa.ForeignKey("studies.id", ondelete="CASCADE"), nullable=False),
        sa.Column("worker", sa.Text, nullable=False),
        sa.Column("limits", sa.JSON, nullable=False),
        sa.Column("stopped", sa.Text, nullable=True),
        sa.Column("search_trials", sa.Integer, nullable=True),
        sa.Column("extra_trials", sa.Integer, nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_runs_study", "runs", ["study_id"])


def downgrade() -> None:
    op.drop_index("ix_runs_study", table_name="runs")
    op.drop_table("runs")
    with op.batch_alter_table("trials") as batch:
        batch.drop_column("purpose")
