"""Version 6: regions and what onboarding found, created, would create or refused
(``gf_regions``, ``gf_onboarding_actions``).

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "gf_regions",
        sa.Column("region", sa.String(63), primary_key=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text),
        sa.Column("run_id", sa.String(250)),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ready_at", sa.DateTime(timezone=True)),
        sa.CheckConstraint(
            "state IN ('onboarding', 'ready', 'failed')", name="ck_gf_regions_state"
        ),
    )
    op.create_table(
        "gf_onboarding_actions",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("region", sa.String(63), nullable=False),
        sa.Column("run_id", sa.String(250), nullable=False),
        sa.Column("step", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("name", sa.String(253), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16)),
        sa.Column("differences", sa.JSON, nullable=False),
        sa.Column("console_url", sa.Text),
        sa.Column("detail", sa.JSON, nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_gf_onboarding_actions_run", "gf_onboarding_actions", ["region", "run_id"])


def downgrade() -> None:
    raise NotImplementedError("the ledger only moves forward")
