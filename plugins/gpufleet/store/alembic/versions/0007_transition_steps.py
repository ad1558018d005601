"""Version 7: a transition's step and drain settings (``gf_transitions.step``, ``.params``),
each step's end time (``gf_transition_steps.finished_at``), and one running transition per
cluster (``uq_gf_transitions_running``, the transition lock).

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("gf_transitions") as batch:  # in place: nullable columns
        batch.add_column(sa.Column("step", sa.String(32)))
        batch.add_column(sa.Column("params", sa.JSON))
    with op.batch_alter_table("gf_transition_steps") as batch:
        batch.add_column(sa.Column("finished_at", sa.DateTime(timezone=True)))
    running = sa.text("state = 'running'")
    op.create_index(
        "uq_gf_transitions_running",
        "gf_transitions",
        ["cluster"],
        unique=True,
        sqlite_where=running,
        postgresql_where=running,
    )


def downgrade() -> None:
    raise NotImplementedError("the ledger only moves forward")
