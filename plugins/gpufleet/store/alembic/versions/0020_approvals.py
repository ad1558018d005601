"""Version 20: the approvals table (``store/schema_approvals.py``, docs/remediation.md#approvals):
``gf_approvals``, one request for a person's approval before a destructive step (a
transition's retire, a sub-block report, a repair below a pool's floor, a breaker reset), who
answered it, when and how, and when the approved step was done. Starts empty.

Revision ID: 0020
Revises: 0019
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "gf_approvals",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("key", sa.String(300), nullable=False),
        sa.Column("subject", sa.Text, nullable=False),
        sa.Column("detail", sa.JSON, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("requested_at", TS, nullable=False),
        sa.Column("requested_by", sa.String(250), nullable=False),
        sa.Column("dag_id", sa.String(250)),
        sa.Column("run_id", sa.String(250)),
        sa.Column("task_id", sa.String(250)),
        sa.Column("map_index", sa.Integer),
        sa.Column("answered_at", TS),
        sa.Column("answered_by", sa.String(250)),
        sa.Column("answer", sa.String(16)),
        sa.Column("acted_at", TS),
        sa.Column("outcome", sa.Text),
        sa.CheckConstraint(
            "kind IN ('retire_pool', 'report_subblock', 'repair_below_floor', 'breaker_reset')",
            name="ck_gf_approvals_kind",
        ),
        sa.CheckConstraint(
            "state IN ('pending', 'approved', 'rejected', 'timed_out', 'done')",
            name="ck_gf_approvals_state",
        ),
    )
    op.create_index("ix_gf_approvals_key", "gf_approvals", ["kind", "key", "state"])
    op.create_index("ix_gf_approvals_state", "gf_approvals", ["state", "id"])


def downgrade() -> None:
    raise NotImplementedError("the ledger only moves forward")
