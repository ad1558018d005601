"""Version 8: the node lifecycle (``gf_node_states``: where each node out of service stands;
``gf_node_events``: every move, timed, with its evidence and who made it).

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "gf_node_states",
        sa.Column("cluster", sa.String(63), primary_key=True),
        sa.Column("node", sa.String(253), primary_key=True),
        sa.Column("pool", sa.String(63), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("reason", sa.Text),
        sa.Column("failed_repairs", sa.Integer, nullable=False),
        sa.Column("evidence", sa.JSON, nullable=False),
        sa.Column("since", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "gf_node_events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("cluster", sa.String(63), nullable=False),
        sa.Column("node", sa.String(253), nullable=False),
        sa.Column("pool", sa.String(63), nullable=False),
        sa.Column("from_state", sa.String(32)),
        sa.Column("to_state", sa.String(32), nullable=False),
        sa.Column("reason", sa.Text),
        sa.Column("evidence", sa.JSON, nullable=False),
        sa.Column("by", sa.String(253)),
        sa.Column("run_id", sa.String(250)),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_gf_node_events_node", "gf_node_events", ["cluster", "node", "id"])


def downgrade() -> None:
    raise NotImplementedError("the ledger only moves forward")
