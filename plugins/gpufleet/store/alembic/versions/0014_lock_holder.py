"""Version 14: a validation lock names its holder inside its run (``gf_validation_locks.holder``):
a filesystem's full-test lock is held by one pool of a run whose other pools, in the same
run, must see it held by another. NULL: the run itself (a pool's own lock).

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("gf_validation_locks") as batch:
        batch.add_column(sa.Column("holder", sa.String(127), nullable=True))


def downgrade() -> None:
    raise NotImplementedError("the ledger only moves forward")
