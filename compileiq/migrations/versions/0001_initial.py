"""Initial schema: studies, trials, the build cache and the measurement cache.

Revision ID: 0001
Revises:
Create Date: 2026-11-20
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KEY_COLUMNS = (
    "kernel",
    "source_sha256",
    "space_id",
    "space_sha256",
    "toolchain",
    "arch",
    "evaluator",
    "objective",
)


def _timestamp(name: str, nullable: bool = False) -> sa.Column:  # type: ignore[type-arg]
    default = None if nullable else sa.func.now()
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable, server_default=default)


def upgrade() -> None:
    op.create_table(
        "studies",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(200), nullable=False, unique=True),
        *(sa.Column(name, sa.String(200), nullable=False) for name in KEY_COLUMNS),
        sa.Column("next_number", sa.Integer, nullable=False, server_default="0"),
        _timestamp("created_at"),
    )
    op.create_table(
        "trials",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column(
            "study_id",
            sa.Integer,
            sa.ForeignKey("studies.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("number", sa.Integer, nullable=False),
        sa.Column("config_key", sa.String(200), nullable=False),
        sa.Column("config", sa.JSON, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("value", sa.Float, nullable=True),
        sa.Column("reason", sa.Text, nullable=True),
        sa.Column("retryable", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("metrics", sa.JSON, nullable=False),
        sa.Column("code_hash", sa.String(64), nullable=True),
        sa.Column("compile_seconds", sa.Float, nullable=True),
        sa.Column("worker", sa.String(200), nullable=False),
        _timestamp("started_at"),
        _timestamp("heartbeat_at"),
        _timestamp("finished_at", nullable=True),
        sa.UniqueConstraint("study_id", "config_key", name="uq_trials_study_config"),
        sa.UniqueConstraint("study_id", "number", name="uq_trials_study_number"),
    )
    op.create_index("ix_trials_study_state", "trials", ["study_id", "state"])
    op.create_table(
        "builds",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("ok", sa.Boolean, nullable=False),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("metrics", sa.JSON, nullable=False),
        sa.Column("code_hash", sa.String(64), nullable=True),
        sa.Column("seconds", sa.Float, nullable=False),
        _timestamp("created_at"),
    )
    op.create_table(
        "measurements",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("code_hash", sa.String(64), nullable=False),
        sa.Column("device", sa.String(200), nullable=False),
        sa.Column("driver", sa.String(64), nullable=False),
        sa.Column("harness_args_hash", sa.String(64), nullable=False),
        sa.Column("samples", sa.JSON, nullable=False),
        sa.Column("median", sa.Float, nullable=False),
        _timestamp("created_at"),
        sa.UniqueConstraint(
            "code_hash", "device", "driver", "harness_args_hash", name="uq_measurements_key"
        ),
    )


def downgrade() -> None:
    op.drop_table("measurements")
    op.drop_table("builds")
    op.drop_index("ix_trials_study_state", table_name="trials")
    op.drop_table("trials")
    op.drop_table("studies")
