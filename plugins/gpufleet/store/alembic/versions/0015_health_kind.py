"""Version 15: the validation kind CHECK takes ``health`` (a pool's GPU health check:
one row per pool and night beside its fabric and storage rows), through
``migrations.replace_check`` (on a SQLite ledger where version 4 made it triggers, the triggers
are re-created). Existing rows stay valid: the list only grows.

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

from alembic import op

from gpufleet.store.migrations import replace_check

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

KINDS = "'fabric', 'storage', 'health'"


def upgrade() -> None:
    replace_check(
        op.get_bind(), "gf_validations", "ck_gf_validations_kind", f"{{c}}kind IN ({KINDS})"
    )


def downgrade() -> None:
    raise NotImplementedError("the ledger only moves forward")
