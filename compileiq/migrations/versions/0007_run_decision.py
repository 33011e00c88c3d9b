"""What each run chose: ``runs.decision`` holds the trial its ACF cites and how it was decided.

A runtime objective's choice rests on its confirmation (interleaved A/B rounds against the
baseline), which the trials alone cannot replay: without the run's record, `show`, `show --why`
and the report would name the screening's fastest trial while the ACF holds the confirmed one
(or the defaults). Rows from before this revision have no decision; views then replay the choice
from the trials and say so.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("decision", sa.JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("decision")
