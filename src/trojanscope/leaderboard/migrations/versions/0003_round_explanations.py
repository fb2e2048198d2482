"""Rounds may score the explanation tracks (target class and trigger) beside the probability.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("rounds", sa.Column("explanations", sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("rounds") as batch:  # SQLite drops a column by copying the table
        batch.drop_column("explanations")
