"""Version 22: a node signal keeps when the response acted on it (``gf_node_signals.acted_at``):
a response whose run died or failed (the cluster's API busy past its retries) between recording
a signal and acting on it acts on it when the batch is handed over again, instead of finding it
recorded and doing nothing. The rows already there were acted on when recorded: their
``acted_at`` is their ``recorded_at``.

Revision ID: 0022
Revises: 0021
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("gf_node_signals") as batch:
        batch.add_column(sa.Column("acted_at", sa.DateTime(timezone=True), nullable=True))
    op.execute("UPDATE gf_node_signals SET acted_at = recorded_at")


def downgrade() -> None:
    raise NotImplementedError("the ledger only moves forward")
