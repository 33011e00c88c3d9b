"""Unbounded text for names, keys and labels: a config of the default search space renders to
~400 characters, past the VARCHAR(200) of ``trials.config_key``; PostgreSQL refused such trials
(SQLite does not enforce VARCHAR lengths, so it changes nothing there).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KEY_COLUMNS = ("kernel", "source_sha256", "space_id", "space_sha256", "toolchain", "arch", "evaluator", "objective")
WIDENED = {
    "studies": {"name": 200, **dict.fromkeys(KEY_COLUMNS, 200)},
    "trials": {"config_key": 200, "state": 16, "code_hash": 64, "worker": 200},
    "builds": {"key": 64, "code_hash": 64},
    "measurements": {"code_hash": 64, "device": 200, "driver": 64, "harness_args_hash": 64, "status": 32},
}


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table, columns in WIDENED.items():
        for column, length in columns.items():
            op.alter_column(table, column, type_=sa.Text, existing_type=sa.String(length))


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table, columns in WIDENED.items():
        for column, length in columns.items():
            op.alter_column(table, column, type_=sa.String(length), existing_type=sa.Text)
