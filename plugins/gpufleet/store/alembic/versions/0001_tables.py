"""Version 1: the tables (validations and their pairs, pool state and events, quarantined
nodes, transitions and their steps, gate decisions, launches), as version 1 created them.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def _ts(name: str, nullable: bool = True) -> sa.Column:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def _id() -> sa.Column:
    return sa.Column("id", sa.Integer, primary_key=True, autoincrement=True)


def upgrade() -> None:
    op.create_table(
        "gf_validations",
        _id(),
        sa.Column("run_id", sa.String(250), nullable=False),
        sa.Column("cluster", sa.String(63), nullable=False),
        sa.Column("pool", sa.String(63), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("passed", sa.Boolean, nullable=False),
        sa.Column("expected_transport", sa.String(32)),
        sa.Column("transport", sa.String(64)),
        sa.Column("busbw_gbps", sa.Float),
        sa.Column("baseline_gbps", sa.Float),
        sa.Column("read_mb_s", sa.Float),
        sa.Column("write_mb_s", sa.Float),
        sa.Column("expected_mb_s", sa.Float),
        sa.Column("nodes_tested", sa.Integer),
        sa.Column("reasons", sa.JSON, nullable=False),
        sa.Column("details", sa.JSON, nullable=False),
        _ts("started_at", nullable=False),
        _ts("finished_at", nullable=False),
    )
    op.create_index(
        "ix_gf_validations_pool", "gf_validations", ["cluster", "pool", "kind", "finished_at"]
    )
    op.create_table(
        "gf_validation_pairs",
        _id(),
        sa.Column(
            "validation_id",
            sa.Integer,
            sa.ForeignKey("gf_validations.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("pass_no", sa.Integer, nullable=False),
        sa.Column("node_a", sa.String(253), nullable=False),
        sa.Column("node_b", sa.String(253), nullable=False),
        sa.Column("passed", sa.Boolean, nullable=False),
        sa.Column("transport", sa.String(64)),
        sa.Column("gdrdma", sa.Boolean),
        sa.Column("busbw_gbps", sa.Float),
        sa.Column("small_latency_us", sa.Float),
        sa.Column("wrong", sa.Integer),
        sa.Column("nccl_version", sa.String(64)),
        sa.Column("reasons", sa.JSON, nullable=False),
    )
    op.create_index(
        "ix_gf_validation_pairs_validation_id", "gf_validation_pairs", ["validation_id"]
    )
    op.create_table(
        "gf_pool_state",
        sa.Column("cluster", sa.String(63), primary_key=True),
        sa.Column("pool", sa.String(63), primary_key=True),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("reason", sa.Text),
        _ts("updated_at", nullable=False),
    )
    op.create_table(
        "gf_pool_events",
        _id(),
        sa.Column("cluster", sa.String(63), nullable=False),
        sa.Column("pool", sa.String(63), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("reason", sa.Text),
        sa.Column("run_id", sa.String(250)),
        _ts("at", nullable=False),
    )
    op.create_index("ix_gf_pool_events_pool", "gf_pool_events", ["cluster", "pool", "at"])
    op.create_table(
        "gf_quarantined_nodes",
        _id(),
        sa.Column("cluster", sa.String(63), nullable=False),
        sa.Column("pool", sa.String(63), nullable=False),
        sa.Column("node", sa.String(253), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("run_id", sa.String(250)),
        _ts("quarantined_at", nullable=False),
        _ts("released_at"),
    )
    op.create_index(
        "ix_gf_quarantine_active", "gf_quarantined_nodes", ["cluster", "node", "released_at"]
    )
    op.create_table(
        "gf_transitions",
        _id(),
        sa.Column("cluster", sa.String(63), nullable=False),
        sa.Column("from_pool", sa.String(63), nullable=False),
        sa.Column("to_pool", sa.String(63), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("run_id", sa.String(250)),
        _ts("started_at", nullable=False),
        _ts("finished_at"),
    )
    op.create_table(
        "gf_transition_steps",
        _id(),
        sa.Column(
            "transition_id",
            sa.Integer,
            sa.ForeignKey("gf_transitions.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("step", sa.String(64), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("detail", sa.JSON, nullable=False),
        _ts("at", nullable=False),
        sa.UniqueConstraint("transition_id", "step", name="uq_gf_transition_step"),
    )
    op.create_index(
        "ix_gf_transition_steps_transition_id", "gf_transition_steps", ["transition_id"]
    )
    op.create_table(
        "gf_gate_decisions",
        _id(),
        sa.Column("cluster", sa.String(63), nullable=False),
        sa.Column("pools", sa.JSON, nullable=False),
        sa.Column("nodes", sa.Integer, nullable=False),
        sa.Column("launch", sa.Boolean, nullable=False),
        sa.Column("reasons", sa.JSON, nullable=False),
        sa.Column("job", sa.String(253)),
        sa.Column("run_id", sa.String(250)),
        _ts("decided_at", nullable=False),
    )
    op.create_table(
        "gf_launches",
        _id(),
        sa.Column("cluster", sa.String(63), nullable=False),
        sa.Column("pool", sa.String(63), nullable=False),
        sa.Column("namespace", sa.String(63), nullable=False),
        sa.Column("job", sa.String(253), nullable=False),
        sa.Column("gate_decision_id", sa.Integer, sa.ForeignKey("gf_gate_decisions.id")),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("expected_transport", sa.String(32)),
        sa.Column("confirmed_transport", sa.String(64)),
        sa.Column("ranks", sa.JSON, nullable=False),
        sa.Column("reasons", sa.JSON, nullable=False),
        sa.Column("run_id", sa.String(250)),
        _ts("created_at", nullable=False),
        _ts("updated_at", nullable=False),
    )


def downgrade() -> None:
    raise NotImplementedError("the ledger only moves forward")
