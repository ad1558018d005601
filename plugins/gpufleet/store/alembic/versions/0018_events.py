"""Version 18: the event path's tables (``store/schema_events.py``): the signals a cluster's
events gave (``gf_node_signals``), each node as the event path last saw it
(``gf_watched_nodes``), the version each watch stream was acknowledged at
(``gf_watch_cursors``) and re-admission sessions (``gf_admission_sessions``). All start empty:
the first list of a cluster is its baseline.

Revision ID: 0018
Revises: 0017
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "gf_node_signals",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("cluster", sa.String(63), nullable=False),
        sa.Column("node", sa.String(253), nullable=False),
        sa.Column("pool", sa.String(63)),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("what", sa.String(253), nullable=False),
        sa.Column("response", sa.String(16), nullable=False),
        sa.Column("action", sa.String(32)),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("observed_at", TS, nullable=False),
        sa.Column("version", sa.String(64), nullable=False),
        sa.Column("count", sa.Integer, nullable=False),
        sa.Column("recorded_at", TS, nullable=False),
        sa.Column("run_id", sa.String(250)),
        sa.UniqueConstraint(
            "cluster", "node", "source", "what", "version", name="uq_gf_node_signals"
        ),
        sa.CheckConstraint(
            "response IN ('note', 'forget', 'admit', 'quarantine')",
            name="ck_gf_node_signals_response",
        ),
        sa.CheckConstraint("count >= 1", name="ck_gf_node_signals_count"),
    )
    op.create_index(
        "ix_gf_node_signals_node", "gf_node_signals", ["cluster", "node", "observed_at"]
    )
    op.create_table(
        "gf_watched_nodes",
        sa.Column("cluster", sa.String(63), primary_key=True),
        sa.Column("node", sa.String(253), primary_key=True),
        sa.Column("pool", sa.String(63)),
        sa.Column("uid", sa.String(128)),
        sa.Column("boot_id", sa.String(128)),
        sa.Column("provider_id", sa.String(400)),
        sa.Column("unschedulable", sa.Boolean, nullable=False),
        sa.Column("conditions", sa.JSON, nullable=False),
        sa.Column("labels", sa.JSON, nullable=False),
        sa.Column("version", sa.String(64), nullable=False),
        sa.Column("seen_at", TS, nullable=False),
        sa.Column("gone", sa.Boolean, nullable=False),
    )
    op.create_table(
        "gf_watch_cursors",
        sa.Column("cluster", sa.String(63), primary_key=True),
        sa.Column("stream", sa.String(32), primary_key=True),
        sa.Column("version", sa.String(64), nullable=False),
        sa.Column("acked_at", TS, nullable=False),
        sa.Column("run_id", sa.String(250)),
    )
    op.create_table(
        "gf_admission_sessions",
        sa.Column("id", sa.String(400), primary_key=True),
        sa.Column("cluster", sa.String(63), nullable=False),
        sa.Column("pool", sa.String(63), nullable=False),
        sa.Column("opened_at", TS, nullable=False),
        sa.Column("window_s", sa.Float, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("nodes", sa.JSON, nullable=False),
        sa.Column("run_id", sa.String(250)),
        sa.Column("judged_at", TS),
        sa.Column("outcome", sa.JSON),
        sa.CheckConstraint(
            "state IN ('open', 'validating', 'done')", name="ck_gf_admission_sessions_state"
        ),
        sa.CheckConstraint("window_s > 0", name="ck_gf_admission_sessions_window"),
    )
    op.create_index(
        "ix_gf_admission_sessions_pool", "gf_admission_sessions", ["cluster", "pool", "state"]
    )


def downgrade() -> None:
    raise NotImplementedError("the ledger only moves forward")
