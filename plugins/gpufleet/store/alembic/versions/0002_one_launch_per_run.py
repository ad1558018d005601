"""Version 2: one launch per (cluster, namespace, job, run), ``uq_gf_launches_run``, so a
retried submit finds its launch instead of recording a second one.

Rows without a run id get ``legacy-<id>`` (SQL's NULLs are never equal, so they would escape
the key); where earlier retries recorded one launch several times, the newest row (the one the
confirm step updated) is kept.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

KEY = ("cluster", "namespace", "job", "run_id")


def upgrade() -> None:
    t = sa.table("gf_launches", *(sa.column(c) for c in ("id", *KEY)))
    op.execute(
        t.update()
        .where(t.c.run_id.is_(None))
        .values(run_id=sa.literal("legacy-") + sa.cast(t.c.id, sa.String))
    )
    newest = sa.select(sa.func.max(t.c.id)).group_by(*(t.c[c] for c in KEY))
    op.execute(t.delete().where(t.c.id.not_in(newest)))
    op.create_index("uq_gf_launches_run", "gf_launches", list(KEY), unique=True)


def downgrade() -> None:
    raise NotImplementedError("the ledger only moves forward")
