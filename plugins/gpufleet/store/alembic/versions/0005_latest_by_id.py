"""Version 5: readers take a pool's latest validation by id, so the index is (cluster, pool,
kind, id) instead of version 1's, which ended in ``finished_at`` (nothing orders by it).

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_gf_validations_latest", "gf_validations", ["cluster", "pool", "kind", "id"])
    op.drop_index("ix_gf_validations_pool", table_name="gf_validations")


def downgrade() -> None:
    raise NotImplementedError("the ledger only moves forward")
