"""The latest validation of each (cluster, pool, kind) (v16, part of ``store/schema.py``'s one
``metadata``, which imports it back: ``schema.latest_validations``): the id of its row in
``gf_validations`` with the highest id, the ledger's insertion order.

Fleet-wide reads (the readiness table, ``/metrics``, the gate's facts) join it to
``gf_validations``: a scan of a table the size of the fleet, where the same answer from the
validations alone is one index probe per (cluster, pool, kind) into a year of history. The
database keeps it (``TRIGGERS``): every insert, delete, and change of a row's id, cluster, pool
or kind, whoever writes it (the ledger's code, a migration, a hand edit), so it always names
what ``max(id)`` would.
"""

from __future__ import annotations

from sqlalchemy import Column, Integer, String, Table

from gpufleet.store.schema_base import kept_by_triggers, metadata

latest_validations = Table(
    "gf_latest_validations",
    metadata,
    Column("cluster", String(63), primary_key=True),
    Column("pool", String(63), primary_key=True),
    Column("kind", String(16), primary_key=True),
    Column("validation_id", Integer, nullable=False),
)

_KEY = "cluster = {row}.cluster AND pool = {row}.pool AND kind = {row}.kind"
# the key's latest row again, from the validations (after a delete or a change of key)
_RECOUNT = (
    "INSERT INTO gf_latest_validations (cluster, pool, kind, validation_id) "
    "SELECT cluster, pool, kind, max(id) FROM gf_validations WHERE "
    + _KEY.format(row="OLD")
    + " GROUP BY cluster, pool, kind"
)
_NEWER = (  # this row, unless its key already names a later one
    "INSERT INTO gf_latest_validations (cluster, pool, kind, validation_id) "
    "VALUES (NEW.cluster, NEW.pool, NEW.kind, NEW.id) ON CONFLICT (cluster, pool, kind) "
)
_FORGET = "DELETE FROM gf_latest_validations WHERE " + _KEY.format(row="OLD")

TRIGGERS = {
    "sqlite": [
        "CREATE TRIGGER gf_latest_validations_insert AFTER INSERT ON gf_validations BEGIN "
        + _NEWER
        + "DO UPDATE SET validation_id = excluded.validation_id "
        "WHERE excluded.validation_id > gf_latest_validations.validation_id; END",
        "CREATE TRIGGER gf_latest_validations_delete AFTER DELETE ON gf_validations BEGIN "
        f"{_FORGET}; {_RECOUNT}; END",
        "CREATE TRIGGER gf_latest_validations_update AFTER UPDATE OF id, cluster, pool, kind "
        f"ON gf_validations BEGIN {_FORGET}; {_RECOUNT}; "
        + _NEWER
        + "DO UPDATE SET validation_id = excluded.validation_id "
        "WHERE excluded.validation_id > gf_latest_validations.validation_id; END",
    ],
    "postgresql": [
        "CREATE OR REPLACE FUNCTION gf_latest_validations_keep() RETURNS trigger "
        "LANGUAGE plpgsql AS $$ BEGIN "
        f"IF TG_OP <> 'INSERT' THEN {_FORGET}; {_RECOUNT} "
        "ON CONFLICT (cluster, pool, kind) DO UPDATE SET validation_id = "
        "GREATEST(gf_latest_validations.validation_id, EXCLUDED.validation_id); END IF; "
        f"IF TG_OP <> 'DELETE' THEN {_NEWER}"
        "DO UPDATE SET validation_id = "
        "GREATEST(gf_latest_validations.validation_id, EXCLUDED.validation_id); END IF; "
        "RETURN NULL; END $$",
        "DROP TRIGGER IF EXISTS gf_latest_validations_keep ON gf_validations",
        "CREATE TRIGGER gf_latest_validations_keep AFTER INSERT OR DELETE OR UPDATE OF id, "
        "cluster, pool, kind ON gf_validations FOR EACH ROW "
        "EXECUTE FUNCTION gf_latest_validations_keep()",
    ],
}
# what an existing ledger's validations make of it (the upgrade to v16)
FILL = (
    "INSERT INTO gf_latest_validations (cluster, pool, kind, validation_id) "
    "SELECT cluster, pool, kind, max(id) FROM gf_validations GROUP BY cluster, pool, kind"
)


# creates the triggers on a connection (a migration); a new ledger gets them from create_all
keep_latest_validations = kept_by_triggers(latest_validations, TRIGGERS)
