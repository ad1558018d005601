"""Ledger tables (SQLAlchemy 2 Core): today's schema, which a new ledger is created from.
Versioned through Alembic (``store/migrations.py``; one revision per version in
``store/alembic/versions``, ``SCHEMA_VERSION`` the head's number).

Design: docs/design/ledger.md.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    Boolean,
    CheckConstraint,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
    TypeDecorator,
    UniqueConstraint,
)

from gpufleet.domain.gate import PoolState, TransitionState
from gpufleet.domain.validation_kinds import ValidationKind
from gpufleet.store.schema_base import metadata
from gpufleet.store.schema_base import timestamp as _ts

SCHEMA_VERSION = 22  # the head revision, ``store/alembic/versions/0022_signals_acted.py``


class StrictBoolean(TypeDecorator):
    """BOOLEAN (a CHECK of 0/1 where the database has no boolean type) read back strictly:
    0/1 and true/false become bool, anything else is returned as stored."""

    impl = Boolean
    cache_ok = True

    def __init__(self, name: str | None = None):
        super().__init__(create_constraint=name is not None, name=name)

    def result_processor(self, dialect, coltype):
        def process(value):
            if type(value) is int and value in (0, 1):
                return bool(value)
            return value

        return process


def _flag(table: str, column: str, **kw) -> Column:
    return Column(column, StrictBoolean(f"ck_{table}_{column}"), **kw)


VERDICTS = ("pass", "fail", "error")
VERDICT_CHECK = "verdict IN ('pass', 'fail', 'error')"

# One row per pool per validation kind per run: the pool's verdict.
validations = Table(
    "gf_validations",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(250), nullable=False),
    Column("cluster", String(63), nullable=False),
    Column("pool", String(63), nullable=False),
    Column("kind", String(16), nullable=False),  # fabric | storage
    _flag("gf_validations", "passed", nullable=False),
    Column("verdict", String(8), nullable=False),  # pass | fail | error (could not finish)
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
    CheckConstraint(VERDICT_CHECK, name="ck_gf_validations_verdict"),
)
# "The latest validation of a pool" is the highest id (insertion order), so the index ends
# in the id: one index probe, however many nights the pool has (bench/gate_latency.py).
Index(
    "ix_gf_validations_latest",
    validations.c.cluster,
    validations.c.pool,
    validations.c.kind,
    validations.c.id,
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
    _flag("gf_validation_pairs", "passed", nullable=False),
    Column("transport", String(64)),
    _flag("gf_validation_pairs", "gdrdma"),
    Column("busbw_gbps", Float),
    Column("small_latency_us", Float),
    Column("wrong", Integer),
    Column("nccl_version", String(64)),
    Column("reasons", JSON, nullable=False, default=list),
)

# Where each pool stands: ready | validated | drifting | degraded | suspect | transitioning |
# retired (domain.gate.PoolState)
pool_state = Table(
    "gf_pool_state",
    metadata,
    Column("cluster", String(63), primary_key=True),
    Column("pool", String(63), primary_key=True),
    Column("state", String(32), nullable=False),
    Column("reason", Text),
    _ts("updated_at", nullable=False),
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
    _ts("at", nullable=False),
)
Index("ix_gf_pool_events_pool", pool_events.c.cluster, pool_events.c.pool, pool_events.c.at)

transitions = Table(
    "gf_transitions",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("cluster", String(63), nullable=False),
    Column("from_pool", String(63), nullable=False),
    Column("to_pool", String(63), nullable=False),
    Column("state", String(32), nullable=False),  # running | done | rolled_back | failed
    Column("run_id", String(250)),
    _ts("started_at", nullable=False),
    _ts("finished_at"),
    Column("step", String(32)),  # the state machine's step (domain.transition.Step), from v7
    Column("params", JSON),  # the run's drain settings, from v7
    # The lock's lease (v10): the holder run's DAG (a renamed DAG or another deployment's
    # run is judged by it) and when the holder last touched the lock (``domain.leases``).
    Column("dag_id", String(250)),
    _ts("heartbeat_at"),
)
# One running transition per cluster: the lock a second transition is refused by (v7).
transitions_lock = Index(
    "uq_gf_transitions_running",
    transitions.c.cluster,
    unique=True,
    sqlite_where=transitions.c.state == "running",
    postgresql_where=transitions.c.state == "running",
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
    Column("state", String(32), nullable=False),  # started | done
    Column("detail", JSON, nullable=False, default=dict),
    _ts("at", nullable=False),  # when the step started
    _ts("finished_at"),  # when it completed (v7)
    UniqueConstraint("transition_id", "step", name="uq_gf_transition_step"),
)

gate_decisions = Table(
    "gf_gate_decisions",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("cluster", String(63), nullable=False),
    Column("pools", JSON, nullable=False),
    Column("nodes", Integer, nullable=False),
    Column("launch", StrictBoolean("ck_gf_gate_decisions_launch"), nullable=False),
    Column("pool", String(63)),  # the pool chosen (a launch), from version 4
    Column("reasons", JSON, nullable=False, default=list),
    Column("job", String(253)),
    Column("run_id", String(250)),
    _ts("decided_at", nullable=False),
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
    _ts("created_at", nullable=False),
    _ts("updated_at", nullable=False),
)
# One launch per job per run: a retried submit finds the row its first attempt recorded. A
# unique index rather than a constraint, because SQLite can add an index to an existing table.
LAUNCH_KEY = (launches.c.cluster, launches.c.namespace, launches.c.job, launches.c.run_id)
launches_run_key = Index("uq_gf_launches_run", *LAUNCH_KEY, unique=True)


def _in(column: str, values) -> str:
    return f"{{c}}{column} IN ({', '.join(repr(v) for v in values)})"


# The CHECKs of version 4: (table, name, expression with ``{c}`` before each column name).
# The vocabularies are the domain's allow-lists (gpufleet.domain.gate, and
# gpufleet.domain.validation_kinds: ``health`` since version 15).
CHECKS: list[tuple[str, str, str]] = [
    ("gf_validations", "ck_gf_validations_kind", _in("kind", [k.value for k in ValidationKind])),
    (
        "gf_validations",
        "ck_gf_validations_verdict_passed",
        "{c}passed = ({c}verdict = 'pass')",
    ),
    ("gf_pool_state", "ck_gf_pool_state_state", _in("state", [s.value for s in PoolState])),
    ("gf_pool_events", "ck_gf_pool_events_state", _in("state", [s.value for s in PoolState])),
    (
        "gf_transitions",
        "ck_gf_transitions_state",
        _in("state", [s.value for s in TransitionState]),
    ),
]
# Booleans: StrictBoolean's CHECK on new SQLite tables; triggers on upgraded ones (0004).
for _table, _name, _expr in CHECKS:
    metadata.tables[_table].append_constraint(CheckConstraint(_expr.format(c=""), name=_name))


# The node lifecycle (domain.nodes): one row per node that left service, and every move.
node_states = Table(
    "gf_node_states",
    metadata,
    Column("cluster", String(63), primary_key=True),
    Column("node", String(253), primary_key=True),
    Column("pool", String(63), nullable=False),
    Column("state", String(32), nullable=False),
    Column("reason", Text),
    Column("failed_repairs", Integer, nullable=False, default=0),
    Column("evidence", JSON, nullable=False, default=dict),
    _ts("since", nullable=False),
)

node_events = Table(
    "gf_node_events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("cluster", String(63), nullable=False),
    Column("node", String(253), nullable=False),
    Column("pool", String(63), nullable=False),
    Column("from_state", String(32)),
    Column("to_state", String(32), nullable=False),
    Column("reason", Text),
    Column("evidence", JSON, nullable=False, default=dict),
    Column("by", String(253)),  # a person (gpufleet node ...), else None: the DAG
    Column("run_id", String(250)),
    _ts("at", nullable=False),
)
Index("ix_gf_node_events_node", node_events.c.cluster, node_events.c.node, node_events.c.id)

# The region tables share ``metadata``: imported here so ``schema.regions`` etc. keep working.
from gpufleet.store.schema_approvals import approvals  # noqa: E402, F401
from gpufleet.store.schema_events import (  # noqa: E402, F401
    admission_sessions,
    node_signals,
    watch_cursors,
    watched_nodes,
)
from gpufleet.store.schema_latest import latest_validations  # noqa: E402, F401
from gpufleet.store.schema_regions import (  # noqa: E402, F401
    onboarding_actions,
    region_locks,
    regions,
)
from gpufleet.store.schema_remediation import (  # noqa: E402, F401
    breakers,
    remediation_holds,
)
from gpufleet.store.schema_snapshots import (  # noqa: E402, F401
    node_snapshots,
    validation_locks,
)
from gpufleet.store.schema_versions import cluster_versions  # noqa: E402, F401
