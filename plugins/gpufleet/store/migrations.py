"""Ledger schema upgrades: ``ensure_schema`` creates missing tables and applies each pending
version's upgrade, idempotently, under a database lock (see ``store/schema.py`` for what each
version holds)."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import (
    Connection,
    Engine,
    String,
    cast,
    delete,
    func,
    insert,
    inspect,
    literal,
    select,
    update,
)

from gpufleet.store.schema import (
    _FLAGS,
    CHECKS,
    LAUNCH_KEY,
    SCHEMA_VERSION,
    VERDICT_CHECK,
    _now,
    launches,
    launches_run_key,
    metadata,
    schema_version,
    transitions_lock,
    validations,
)


def _v2_one_launch_per_run(conn: Connection) -> None:
    """Version 2: the launch key. Rows without a run id get ``legacy-<id>`` (SQL's NULLs are
    never equal, so they would escape the key); where earlier retries recorded one launch
    several times, the newest row (the one the confirm step updated) is kept."""
    t = launches
    conn.execute(
        update(t)
        .where(t.c.run_id.is_(None))
        .values(run_id=literal("legacy-") + cast(t.c.id, String))
    )
    newest = select(func.max(t.c.id)).group_by(*LAUNCH_KEY)
    conn.execute(delete(t).where(t.c.id.not_in(newest)))
    launches_run_key.create(conn, checkfirst=True)


def _v3_validation_verdict(conn: Connection) -> None:
    """Version 3: ``gf_validations.verdict``; existing rows get pass or fail from ``passed``.
    One ADD COLUMN with its CHECK, which SQLite and PostgreSQL both accept."""
    columns = {c["name"] for c in inspect(conn).get_columns("gf_validations")}
    if "verdict" not in columns:
        conn.exec_driver_sql(
            "ALTER TABLE gf_validations ADD COLUMN verdict VARCHAR(8) NOT NULL DEFAULT 'fail' "
            f"CONSTRAINT ck_gf_validations_verdict CHECK ({VERDICT_CHECK})"
        )
    v = validations
    conn.execute(update(v).where(v.c.passed.is_(True)).values(verdict="pass"))


def _constraint_names(conn: Connection, table: str) -> set[str]:
    return {c["name"] for c in inspect(conn).get_check_constraints(table)}


def _v4_checks(conn: Connection) -> None:
    """Version 4: the CHECKs on existing tables, and ``gf_gate_decisions.pool``."""
    columns = {c["name"] for c in inspect(conn).get_columns("gf_gate_decisions")}
    if "pool" not in columns:
        conn.exec_driver_sql("ALTER TABLE gf_gate_decisions ADD COLUMN pool VARCHAR(63)")
    checks = list(CHECKS)
    if conn.dialect.name == "sqlite":
        checks += [(t, f"ck_{t}_{c}", f"{{c}}{c} IN (0, 1)") for t, c in _FLAGS]
        for table, name, expr in checks:
            if name in _constraint_names(conn, table):
                continue  # created with the table
            for event in ("INSERT", "UPDATE"):
                conn.exec_driver_sql(
                    f"CREATE TRIGGER IF NOT EXISTS {name}_{event.lower()} BEFORE {event} ON "
                    f"{table} WHEN NOT ({expr.format(c='NEW.')}) BEGIN "
                    f"SELECT RAISE(ABORT, 'CHECK constraint failed: {name}'); END"
                )
        return
    for table, name, expr in checks:
        if name not in _constraint_names(conn, table):
            conn.exec_driver_sql(
                f"ALTER TABLE {table} ADD CONSTRAINT {name} CHECK ({expr.format(c='')}) NOT VALID"
            )


def _v5_latest_by_id(conn: Connection) -> None:
    """Readers take a pool's latest validation by id (v4): index (cluster, pool, kind, id)
    instead of the v1 index that ended in finished_at, which nothing orders by any more."""
    conn.exec_driver_sql(
        "CREATE INDEX IF NOT EXISTS ix_gf_validations_latest "
        "ON gf_validations (cluster, pool, kind, id)"
    )
    conn.exec_driver_sql("DROP INDEX IF EXISTS ix_gf_validations_pool")


def _v7_transition_steps(conn: Connection) -> None:
    """Version 7: ``gf_transitions.step`` and ``.params``, ``gf_transition_steps.finished_at``,
    and the lock (a unique index on the cluster of running transitions)."""
    columns = {c["name"] for c in inspect(conn).get_columns("gf_transitions")}
    if "step" not in columns:
        conn.exec_driver_sql("ALTER TABLE gf_transitions ADD COLUMN step VARCHAR(32)")
    if "params" not in columns:
        conn.exec_driver_sql("ALTER TABLE gf_transitions ADD COLUMN params JSON")
    columns = {c["name"] for c in inspect(conn).get_columns("gf_transition_steps")}
    if "finished_at" not in columns:
        kind = "TIMESTAMP WITH TIME ZONE" if conn.dialect.name == "postgresql" else "DATETIME"
        conn.exec_driver_sql(f"ALTER TABLE gf_transition_steps ADD COLUMN finished_at {kind}")
    transitions_lock.create(conn, checkfirst=True)


def replace_check(conn: Connection, table: str, name: str, expr: str) -> None:
    """Make CHECK constraint ``name`` of ``table`` read ``expr`` (a ``state IN (...)`` list,
    ``{c}`` for the column prefix). PostgreSQL: dropped and re-added (``NOT VALID``: existing
    rows are not re-checked). SQLite, which cannot alter a constraint: the IN list is rewritten
    in the table's SQL (``PRAGMA writable_schema``, which SQLite documents as safe for a change
    that does not touch what is stored, such as loosening a CHECK)."""
    if conn.dialect.name != "sqlite":
        conn.exec_driver_sql(f"ALTER TABLE {table} DROP CONSTRAINT IF EXISTS {name}")
        conn.exec_driver_sql(
            f"ALTER TABLE {table} ADD CONSTRAINT {name} CHECK ({expr.format(c='')}) NOT VALID"
        )
        return
    sql = conn.exec_driver_sql(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
    ).scalar()
    start = sql.index(f"CONSTRAINT {name} CHECK (")
    end = sql.index(")", sql.index("IN (", start)) + 1
    new_sql = sql[:start] + f"CONSTRAINT {name} CHECK ({expr.format(c='')}" + sql[end:]
    version = conn.exec_driver_sql("PRAGMA schema_version").scalar()
    conn.exec_driver_sql("PRAGMA writable_schema = ON")
    conn.exec_driver_sql(
        "UPDATE sqlite_master SET sql = ? WHERE type = 'table' AND name = ?", (new_sql, table)
    )
    conn.exec_driver_sql(f"PRAGMA schema_version = {version + 1}")
    conn.exec_driver_sql("PRAGMA writable_schema = OFF")


def _v9_pool_states(conn: Connection) -> None:
    """Version 9: the pool-state CHECKs take the domain's whole vocabulary again (``drifting``
    joined it), through ``replace_check``; a SQLite ledger upgraded to v4 holds them as
    triggers, which are dropped and re-created. Existing rows stay valid: the list only grows."""
    for table, name, expr in (c for c in CHECKS if c[0] in ("gf_pool_state", "gf_pool_events")):
        if conn.dialect.name == "sqlite" and name not in _constraint_names(conn, table):
            for event in ("INSERT", "UPDATE"):  # the triggers of an upgraded ledger
                conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {name}_{event.lower()}")
                conn.exec_driver_sql(
                    f"CREATE TRIGGER {name}_{event.lower()} BEFORE {event} ON "
                    f"{table} WHEN NOT ({expr.format(c='NEW.')}) BEGIN "
                    f"SELECT RAISE(ABORT, 'CHECK constraint failed: {name}'); END"
                )
            continue
        replace_check(conn, table, name, expr)


def _v10_leases(conn: Connection) -> None:
    """Version 10: the locks' leases. ``gf_region_locks`` is new (create_all made it, with its
    ``heartbeat_at``); ``gf_transitions`` gains the holder's ``dag_id`` and ``heartbeat_at``
    (NULL on old rows: the lease then counts from ``started_at``)."""
    kind = "TIMESTAMP WITH TIME ZONE" if conn.dialect.name == "postgresql" else "DATETIME"
    for table, column, sql in (
        ("gf_transitions", "dag_id", "VARCHAR(250)"),
        ("gf_transitions", "heartbeat_at", kind),
        ("gf_region_locks", "heartbeat_at", kind),
    ):
        if column not in {c["name"] for c in inspect(conn).get_columns(table)}:
            conn.exec_driver_sql(f"ALTER TABLE {table} ADD COLUMN {column} {sql}")


# Upgrades from version N-1 to N; each must be idempotent. A new ledger is created at
# SCHEMA_VERSION by create_all, which also creates the indexes (an existing table gets them here).
_MIGRATIONS: dict[int, Callable[[Connection], None]] = {
    2: _v2_one_launch_per_run,
    3: _v3_validation_verdict,
    4: _v4_checks,
    5: _v5_latest_by_id,
    6: lambda conn: None,  # new tables only: create_all made them
    7: _v7_transition_steps,
    8: lambda conn: None,  # new tables only: create_all made them
    9: _v9_pool_states,
    10: _v10_leases,
}
_PG_SCHEMA_LOCK = 7_263_541  # pg_advisory_xact_lock key held while the schema is prepared


def ensure_schema(engine: Engine) -> int:
    """Create missing tables and apply pending upgrades; safe to call from every process.

    Airflow starts many task processes at once, each opening the ledger: the schema is
    prepared under a database lock (SQLite: an immediate transaction, DDL included;
    PostgreSQL: a transaction-scoped advisory lock), so one process creates the tables while
    the others wait and then find them."""
    with engine.connect() as conn:
        if conn.dialect.name == "sqlite":
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        elif conn.dialect.name == "postgresql":
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_PG_SCHEMA_LOCK})")
        try:
            version = _prepare(conn)
            conn.commit()
        except BaseException:
            conn.rollback()
            raise
    return version


def _prepare(conn: Connection) -> int:
    metadata.create_all(conn, checkfirst=True)
    current = conn.execute(
        select(schema_version.c.version).order_by(schema_version.c.version.desc()).limit(1)
    ).scalar()
    if current is None:
        conn.execute(insert(schema_version).values(version=SCHEMA_VERSION, applied_at=_now()))
        return SCHEMA_VERSION
    if current > SCHEMA_VERSION:
        from gpufleet.errors import LedgerError

        raise LedgerError(
            f"the ledger is at schema version {current}, newer than this gpufleet "
            f"({SCHEMA_VERSION}): upgrade gpufleet before using this ledger"
        )
    for version in range(current + 1, SCHEMA_VERSION + 1):
        _MIGRATIONS[version](conn)
        conn.execute(insert(schema_version).values(version=version, applied_at=_now()))
    return SCHEMA_VERSION
