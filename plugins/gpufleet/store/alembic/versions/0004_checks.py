"""Version 4: CHECK constraints on the state, verdict, kind and boolean columns the gate
reads, and the pool a gate decision chose (``gf_gate_decisions.pool``).

On PostgreSQL the CHECKs are added ``NOT VALID`` (new rows are checked; old rows are refused by
the readers' strict parsing); SQLite cannot add a CHECK to a table in place, so there they are
triggers aborting the same inserts and updates (``migrations.add_check``). The pool states are
version 4's (``drifting`` joined in version 9).

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from gpufleet.store.migrations import add_check

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

POOL_STATES = "'ready', 'validated', 'degraded', 'suspect', 'transitioning', 'retired'"
CHECKS = [
    ("gf_validations", "ck_gf_validations_kind", "{c}kind IN ('fabric', 'storage')"),
    ("gf_validations", "ck_gf_validations_verdict_passed", "{c}passed = ({c}verdict = 'pass')"),
    ("gf_pool_state", "ck_gf_pool_state_state", f"{{c}}state IN ({POOL_STATES})"),
    ("gf_pool_events", "ck_gf_pool_events_state", f"{{c}}state IN ({POOL_STATES})"),
    (
        "gf_transitions",
        "ck_gf_transitions_state",
        "{c}state IN ('running', 'done', 'rolled_back', 'failed')",
    ),
]
# Booleans: a CHECK of 0/1 where the database has no boolean type (SQLite).
FLAGS = [
    ("gf_validations", "passed"),
    ("gf_validation_pairs", "passed"),
    ("gf_validation_pairs", "gdrdma"),
    ("gf_gate_decisions", "launch"),
]


def upgrade() -> None:
    with op.batch_alter_table("gf_gate_decisions") as batch:  # in place: a nullable column
        batch.add_column(sa.Column("pool", sa.String(63)))
    conn = op.get_bind()
    checks = list(CHECKS)
    if conn.dialect.name == "sqlite":
        checks += [(t, f"ck_{t}_{c}", f"{{c}}{c} IN (0, 1)") for t, c in FLAGS]
    for table, name, expr in checks:
        add_check(conn, table, name, expr)


def downgrade() -> None:
    raise NotImplementedError("the ledger only moves forward")
