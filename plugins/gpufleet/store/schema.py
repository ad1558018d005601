"""Ledger tables (SQLAlchemy 2 Core). Versioned: ``ensure_schema`` creates or upgrades idempotently.

Times are timezone-aware UTC. JSON columns hold reasons (lists of sentences) and raw figures.

Versions: 1 the tables; 2 one launch per (cluster, namespace, job, run) (``uq_gf_launches_run``),
so a retried submit finds its launch instead of recording a second one.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    Connection,
    DateTime,
    Engine,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    TypeDecorator,
    UniqueConstraint,
    cast,
    delete,
    func,
    insert,
    literal,
    select,
    update,
)

SCHEMA_VERSION = 2

metadata = MetaData()


def _now() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator):
    """Timezone-aware UTC in and out, also on SQLite (which stores naive timestamps)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value, dialect):
        if value is not None and value.tzinfo is None:
            raise ValueError("the ledger stores aware datetimes only (use UTC)")
        return value.astimezone(UTC) if value is not None else None

    def process_result_value(self, value, dialect):
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _ts(name: str, **kw) -> Column:
    return Column(name, UTCDateTime(), **kw)


schema_version = Table(
    "gf_schema_version",
    metadata,
    Column("version", Integer, primary_key=True),
    _ts("applied_at", nullable=False, default=_now),
)

# One row per pool per validation kind per run: the pool's verdict.
validations = Table(
    "gf_validations",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(250), nullable=False),
    Column("cluster", String(63), nullable=False),
    Column("pool", String(63), nullable=False),
    Column("kind", String(16), nullable=False),  # fabric | storage
    Column("passed", Boolean, nullable=False),
    Column("expected_transport", String(32)),
    Column("transport", String(64)),  # the worst transport observed
    Column("busbw_gbps", Float),  # lowest large-message busbw among passing-size pairs
    Column("baseline_gbps", Float),
    Column("read_mb_s", Float),
    Column("write_mb_s", Float),
    Column("expected_mb_s", Float),
    Column("nodes_tested", Integer),
    Column("reasons", JSON, nullable=False, default=list),
    Column("details", JSON, nullable=False, default=dict),
    _ts("started_at", nullable=False),
    _ts("finished_at", nullable=False),
)
Index(
    "ix_gf_validations_pool",
    validations.c.cluster,
    validations.c.pool,
    validations.c.kind,
    validations.c.finished_at,
)

# One row per node pair tested (pass 1 and pass 2) with raw figures and transport.
validation_pairs = Table(
    "gf_validation_pairs",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column(
        "validation_id",
        Integer,
        ForeignKey("gf_validations.id", ondelete="CASCADE"),
        nullable=False,
        index=True,
    ),
    Column("pass_no", Integer, nullable=False),
    Column("node_a", String(253), nullable=False),
    Column("node_b", String(253), nullable=False),
    Column("passed", Boolean, nullable=False),
    Column("transport", String(64)),
    Column("gdrdma", Boolean),
    Column("busbw_gbps", Float),
    Column("small_latency_us", Float),
    Column("wrong", Integer),
    Column("nccl_version", String(64)),
    Column("reasons", JSON, nullable=False, default=list),
)

# Where each pool stands: ready | validated | degraded | suspect | transitioning | retired
pool_state = Table(
    "gf_pool_state",
    metadata,
    Column("cluster", String(63), primary_key=True),
    Column("pool", String(63), primary_key=True),
    Column("state", String(32), nullable=False),
    Column("reason", Text),
    _ts("updated_at", nullable=False, default=_now),
)

pool_events = Table(
    "gf_pool_events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("cluster", String(63), nullable=False),
    Column("pool", String(63), nullable=False),
    Column("state", String(32), nullable=False),
    Column("reason", Text),
    Column("run_id", String(250)),
    _ts("at", nullable=False, default=_now),
)
Index("ix_gf_pool_events_pool", pool_events.c.cluster, pool_events.c.pool, pool_events.c.at)

quarantined_nodes = Table(
    "gf_quarantined_nodes",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("cluster", String(63), nullable=False),
    Column("pool", String(63), nullable=False),
    Column("node", String(253), nullable=False),
    Column("reason", Text, nullable=False),
    Column("run_id", String(250)),
    _ts("quarantined_at", nullable=False, default=_now),
    _ts("released_at"),
)
Index(
    "ix_gf_quarantine_active",
    quarantined_nodes.c.cluster,
    quarantined_nodes.c.node,
    quarantined_nodes.c.released_at,
)

transitions = Table(
    "gf_transitions",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("cluster", String(63), nullable=False),
    Column("from_pool", String(63), nullable=False),
    Column("to_pool", String(63), nullable=False),
    Column("state", String(32), nullable=False),  # running | done | rolled_back | failed
    Column("run_id", String(250)),
    _ts("started_at", nullable=False, default=_now),
    _ts("finished_at"),
)

transition_steps = Table(
    "gf_transition_steps",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column(
        "transition_id",
        Integer,
        ForeignKey("gf_transitions.id", ondelete="CASCADE"),
        nullable=False,
        index=True,
    ),
    Column("step", String(64), nullable=False),
    Column("state", String(32), nullable=False),
    Column("detail", JSON, nullable=False, default=dict),
    _ts("at", nullable=False, default=_now),
    UniqueConstraint("transition_id", "step", name="uq_gf_transition_step"),
)

gate_decisions = Table(
    "gf_gate_decisions",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("cluster", String(63), nullable=False),
    Column("pools", JSON, nullable=False),
    Column("nodes", Integer, nullable=False),
    Column("launch", Boolean, nullable=False),
    Column("reasons", JSON, nullable=False, default=list),
    Column("job", String(253)),
    Column("run_id", String(250)),
    _ts("decided_at", nullable=False, default=_now),
)

launches = Table(
    "gf_launches",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("cluster", String(63), nullable=False),
    Column("pool", String(63), nullable=False),
    Column("namespace", String(63), nullable=False),
    Column("job", String(253), nullable=False),
    Column("gate_decision_id", Integer, ForeignKey("gf_gate_decisions.id")),
    Column("state", String(32), nullable=False),  # submitted | running | confirmed | stopped | ...
    Column("expected_transport", String(32)),
    Column("confirmed_transport", String(64)),
    Column("ranks", JSON, nullable=False, default=dict),
    Column("reasons", JSON, nullable=False, default=list),
    Column("run_id", String(250)),
    _ts("created_at", nullable=False, default=_now),
    _ts("updated_at", nullable=False, default=_now),
)
# One launch per job per run: a retried submit finds the row its first attempt recorded. A
# unique index rather than a constraint, because SQLite can add an index to an existing table.
LAUNCH_KEY = (launches.c.cluster, launches.c.namespace, launches.c.job, launches.c.run_id)
launches_run_key = Index("uq_gf_launches_run", *LAUNCH_KEY, unique=True)


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


# Upgrades from version N-1 to N; each must be idempotent. A new ledger is created at
# SCHEMA_VERSION by create_all, which also creates the indexes (an existing table gets them here).
_MIGRATIONS: dict[int, Callable[[Connection], None]] = {2: _v2_one_launch_per_run}
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
