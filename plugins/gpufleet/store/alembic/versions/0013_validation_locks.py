"""Version 13: a pool's validation lock (``gf_validation_locks``): one run validates a pool's
fabric, or its filesystem, at a time. Starts empty.

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "gf_validation_locks",
        sa.Column("cluster", sa.String(63), primary_key=True),
        sa.Column("pool", sa.String(63), primary_key=True),
        sa.Column("kind", sa.String(16), primary_key=True),
        sa.Column("dag_id", sa.String(250), nullable=False),
        sa.Column("run_id", sa.String(250), nullable=False),
        sa.Column("taken_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    raise NotImplementedError("the ledger only moves forward")
