"""Version 9: the pool-state CHECKs take the domain's whole vocabulary again (``drifting``
joined it), through ``migrations.replace_check`` (on a SQLite ledger where version 4 made
them triggers, the triggers are re-created). Existing rows stay valid: the list only grows.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

from alembic import op

from gpufleet.store.migrations import replace_check

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

POOL_STATES = "'ready', 'validated', 'drifting', 'degraded', 'suspect', 'transitioning', 'retired'"


def upgrade() -> None:
    conn = op.get_bind()
    for table in ("gf_pool_state", "gf_pool_events"):
        replace_check(conn, table, f"ck_{table}_state", f"{{c}}state IN ({POOL_STATES})")


def downgrade() -> None:
    raise NotImplementedError("the ledger only moves forward")
