"""Version 12: node snapshots (``gf_node_snapshots``): each pool's nodes as a task that listed
them last saw them, so the read paths never list a cluster. Starts empty: the next validation
of each pool fills its row.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "gf_node_snapshots",
        sa.Column("cluster", sa.String(63), primary_key=True),
        sa.Column("pool", sa.String(63), primary_key=True),
        sa.Column("taken_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("source", sa.String(32), nullable=False),
        sa.Column("run_id", sa.String(250)),
        sa.Column("nodes", sa.Integer, nullable=False),
        sa.Column("ready", sa.Integer, nullable=False),
        sa.Column("free", sa.Integer, nullable=False),
        sa.Column("quarantined", sa.Integer, nullable=False),
        sa.Column("busy", sa.Integer, nullable=False),
        sa.Column("detail", sa.JSON, nullable=False),
        sa.CheckConstraint(
            "nodes >= 0 AND ready >= 0 AND free >= 0 AND quarantined >= 0 AND busy >= 0 "
            "AND ready <= nodes AND free <= nodes AND quarantined <= nodes AND busy <= nodes",
            name="ck_gf_node_snapshots_counts",
        ),
    )


def downgrade() -> None:
    raise NotImplementedError("the ledger only moves forward")
