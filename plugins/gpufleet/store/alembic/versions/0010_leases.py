"""Version 10: the locks' leases. ``gf_region_locks`` (a region's onboarding lock, with its
holder's ``heartbeat_at``); ``gf_transitions`` gains the holder's ``dag_id`` and
``heartbeat_at`` (NULL on old rows: the lease then counts from ``started_at``).

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "gf_region_locks",
        sa.Column("region", sa.String(63), primary_key=True),
        sa.Column("dag_id", sa.String(250), nullable=False),
        sa.Column("run_id", sa.String(250), nullable=False),
        sa.Column("taken_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
    )
    with op.batch_alter_table("gf_transitions") as batch:  # in place: nullable columns
        batch.add_column(sa.Column("dag_id", sa.String(250)))
        batch.add_column(sa.Column("heartbeat_at", sa.DateTime(timezone=True)))


def downgrade() -> None:
    raise NotImplementedError("the ledger only moves forward")
