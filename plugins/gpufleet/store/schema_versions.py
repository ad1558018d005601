"""Each cluster's ledger version (v17, part of ``store/schema.py``'s one ``metadata``, which
imports it back: ``schema.cluster_versions``): a counter the database moves on every write a
fleet-wide read depends on, so a long-lived reader (the api-server's fleet page and
``/metrics``, ``services.views.fleet_cache``) re-reads only the clusters that changed.

The database keeps it (``TRIGGERS``), whoever writes (the ledger's code, a migration, a hand
edit): an insert, delete or update of a cluster's validations, pool states, node states and
events, node snapshots or transitions (their state, step and pools, not a lease's heartbeat) moves
that cluster's row (both clusters' when a row changes cluster); a write to the regions moves
the row ``FLEET`` (what every cluster's pages show). The move is part of the writer's own
transaction, so a reader that reads the versions first and the rows after never keeps rows
older than the version it files them under (on PostgreSQL two writers of one cluster queue on
its row for the rest of their transactions: the ledger's are short).
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, String, Table

from gpufleet.store.schema_base import kept_by_triggers, metadata

FLEET = "*"  # the row the region writes move: every cluster's reads depend on them

cluster_versions = Table(
    "gf_cluster_versions",
    metadata,
    Column("cluster", String(63), primary_key=True),
    Column("version", BigInteger, nullable=False),
)

# table -> the columns of its writes that matter (None: every update); the cluster is the
# row's ``cluster`` column, or ``FLEET`` for the regions
WATCHED: dict[str, tuple[str, ...] | None] = {
    "gf_validations": None,
    "gf_pool_state": None,
    "gf_node_states": None,
    "gf_node_events": None,
    "gf_node_snapshots": None,
    "gf_transitions": ("cluster", "from_pool", "to_pool", "state", "step", "finished_at"),
    "gf_regions": None,
}
_BUMP = (
    "INSERT INTO gf_cluster_versions (cluster, version) VALUES ({cluster}, 1) "
    "ON CONFLICT (cluster) DO UPDATE SET version = gf_cluster_versions.version + 1"
)


def _cluster(table: str, row: str) -> str:
    return f"'{FLEET}'" if table == "gf_regions" else f"{row}.cluster"


def _sqlite(table: str, columns: tuple[str, ...] | None) -> list[str]:
    of = f" OF {', '.join(columns)}" if columns else ""
    name = f"gf_cluster_versions_{table.removeprefix('gf_')}"
    new, old = (
        _BUMP.format(cluster=_cluster(table, "NEW")),
        _BUMP.format(cluster=_cluster(table, "OLD")),
    )
    return [
        f"CREATE TRIGGER {name}_insert AFTER INSERT ON {table} BEGIN {new}; END",
        f"CREATE TRIGGER {name}_delete AFTER DELETE ON {table} BEGIN {old}; END",
        f"CREATE TRIGGER {name}_update AFTER UPDATE{of} ON {table} BEGIN {old}; "
        + (f"{new}; END" if table != "gf_regions" else "END"),
    ]


def _postgresql(table: str, columns: tuple[str, ...] | None) -> list[str]:
    of = f" OF {', '.join(columns)}" if columns else ""
    name = f"gf_cluster_versions_{table.removeprefix('gf_')}"
    function = "gf_fleet_version_bump" if table == "gf_regions" else "gf_cluster_version_bump"
    return [
        f"DROP TRIGGER IF EXISTS {name} ON {table}",
        f"CREATE TRIGGER {name} AFTER INSERT OR DELETE OR UPDATE{of} ON {table} "
        f"FOR EACH ROW EXECUTE FUNCTION {function}()",
    ]


TRIGGERS = {
    "sqlite": [sql for table, cols in WATCHED.items() for sql in _sqlite(table, cols)],
    "postgresql": [
        "CREATE OR REPLACE FUNCTION gf_cluster_version_bump() RETURNS trigger "
        "LANGUAGE plpgsql AS $$ BEGIN "
        f"IF TG_OP <> 'INSERT' THEN {_BUMP.format(cluster='OLD.cluster')}; END IF; "
        "IF TG_OP <> 'DELETE' AND (TG_OP = 'INSERT' OR NEW.cluster IS DISTINCT FROM OLD.cluster) "
        f"THEN {_BUMP.format(cluster='NEW.cluster')}; END IF; "
        "RETURN NULL; END $$",
        "CREATE OR REPLACE FUNCTION gf_fleet_version_bump() RETURNS trigger "
        f"LANGUAGE plpgsql AS $$ BEGIN {_BUMP.format(cluster=repr(FLEET))}; RETURN NULL; END $$",
        *(sql for table, cols in WATCHED.items() for sql in _postgresql(table, cols)),
    ],
}


# creates the triggers on a connection (a migration); a new ledger gets them from create_all
keep_cluster_versions = kept_by_triggers(cluster_versions, TRIGGERS)
