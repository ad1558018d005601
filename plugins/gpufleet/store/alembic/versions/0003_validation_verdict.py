"""Version 3: ``gf_validations.verdict`` (pass | fail | error: ``error`` = the validation
could not finish); existing rows get pass or fail from ``passed``.

One ADD COLUMN with its CHECK, which SQLite and PostgreSQL both accept in place (no batch
rebuild: rebuilding ``gf_validations`` would cascade deletes into its pairs).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "ALTER TABLE gf_validations ADD COLUMN verdict VARCHAR(8) NOT NULL DEFAULT 'fail' "
        "CONSTRAINT ck_gf_validations_verdict CHECK (verdict IN ('pass', 'fail', 'error'))"
    )
    v = sa.table("gf_validations", sa.column("passed", sa.Boolean), sa.column("verdict"))
    op.execute(v.update().where(v.c.passed.is_(True)).values(verdict="pass"))


def downgrade() -> None:
    raise NotImplementedError("the ledger only moves forward")
