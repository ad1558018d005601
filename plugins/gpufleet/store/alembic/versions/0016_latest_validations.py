"""Version 16: each (cluster, pool, kind)'s latest validation (``gf_latest_validations``: the id
of its row with the highest id), kept by triggers on ``gf_validations``
(``store.schema_latest``), so a fleet-wide read joins a table the size of the fleet instead of
probing a year of history once per pool and kind. The triggers are created before the table is
filled from the rows already there: on PostgreSQL creating them locks out writers until the
upgrade commits, so no row is missed.

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from gpufleet.store.schema_latest import FILL, keep_latest_validations

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "gf_latest_validations",
        sa.Column("cluster", sa.String(63), primary_key=True),
        sa.Column("pool", sa.String(63), primary_key=True),
        sa.Column("kind", sa.String(16), primary_key=True),
        sa.Column("validation_id", sa.Integer, nullable=False),
    )
    conn = op.get_bind()
    keep_latest_validations(conn)
    conn.exec_driver_sql(FILL)


def downgrade() -> None:
    raise NotImplementedError("the ledger only moves forward")
