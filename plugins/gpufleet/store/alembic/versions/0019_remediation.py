"""Version 19: the remediation tables (``store/schema_remediation.py``, docs/remediation.md):
the blast-radius breakers' trips and their resets by a person (``gf_breakers``) and what the
machine did not do to a node and why (``gf_remediation_holds``: ``would_have`` under a pool's
behaviour profile or the fleet's dry run, ``held`` by a tripped breaker). Both start empty; the
ladder's memory is the node lifecycle's events (``gf_node_events``), already there.

Revision ID: 0019
Revises: 0018
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "gf_breakers",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("scope", sa.String(16), nullable=False),
        sa.Column("key", sa.String(128), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("affected", sa.Integer, nullable=False),
        sa.Column("limit_nodes", sa.Integer, nullable=False),
        sa.Column("tripped_at", TS, nullable=False),
        sa.Column("run_id", sa.String(250)),
        sa.Column("reset_at", TS),
        sa.Column("reset_by", sa.String(128)),
        sa.Column("reset_reason", sa.Text),
        sa.CheckConstraint("scope IN ('pool', 'cluster', 'fleet')", name="ck_gf_breakers_scope"),
    )
    op.create_index("ix_gf_breakers_key", "gf_breakers", ["scope", "key", "reset_at"])
    op.create_table(
        "gf_remediation_holds",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("cluster", sa.String(63), nullable=False),
        sa.Column("pool", sa.String(63), nullable=False),
        sa.Column("node", sa.String(253), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("at", TS, nullable=False),
        sa.Column("run_id", sa.String(250)),
        sa.CheckConstraint("kind IN ('would_have', 'held')", name="ck_gf_remediation_holds_kind"),
    )
    op.create_index(
        "ix_gf_remediation_holds_node", "gf_remediation_holds", ["cluster", "node", "at"]
    )


def downgrade() -> None:
    raise NotImplementedError("the ledger only moves forward")
