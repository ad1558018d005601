"""Version 17: each cluster's ledger version (``gf_cluster_versions``), moved by triggers on
every write a fleet-wide read depends on (``store.schema_versions``), so the api-server keeps
what it read between requests and re-reads only the clusters that changed
(``services.views.fleet_cache``). Filled with version 1 for every cluster the ledger knows;
a reader that finds no row reads the cluster (version 0).

Revision ID: 0017
Revises: 0016
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from gpufleet.store.schema_versions import keep_cluster_versions

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "gf_cluster_versions",
        sa.Column("cluster", sa.String(63), primary_key=True),
        sa.Column("version", sa.BigInteger, nullable=False),
    )
    keep_cluster_versions(op.get_bind())


def downgrade() -> None:
    raise NotImplementedError("the ledger only moves forward")
