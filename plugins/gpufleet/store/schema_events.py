"""The ledger's event tables (v18), part of ``store/schema.py``'s one ``metadata``, which imports
them back: what the event path (docs/events.md) keeps between runs.

- ``gf_node_signals``: every signal a cluster's events gave (``domain.signals.Signal``), once:
  unique by (cluster, node, source, what, version), so a watch replayed after a restart records
  nothing twice. What the gate weighs against a pool's validation.
- ``gf_watched_nodes``: each node as the event path last saw it (its uid, boot id, machine,
  cordon, conditions and the provider's labels), with the version it was seen at: what the next
  change is compared with, and what a relist after ``410 Gone`` is compared with.
- ``gf_watch_cursors``: per (cluster, stream) the version the response acknowledged: where a
  watcher restarted after a kill resumes.
- ``gf_admission_sessions``: re-admission sessions (``domain.admission.Session``).
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    Boolean,
    CheckConstraint,
    Column,
    Float,
    Index,
    Integer,
    String,
    Table,
    Text,
    UniqueConstraint,
)

from gpufleet.store.schema_base import metadata
from gpufleet.store.schema_base import timestamp as _ts

RESPONSES = ("note", "lift", "forget", "hold", "admit", "quarantine")
SESSION_STATES = ("open", "validating", "done")

node_signals = Table(
    "gf_node_signals",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("cluster", String(63), nullable=False),
    Column("node", String(253), nullable=False),
    Column("pool", String(63)),
    Column("source", String(16), nullable=False),
    Column("what", String(253), nullable=False),
    Column("response", String(16), nullable=False),
    Column("action", String(32)),
    Column("reason", Text, nullable=False),
    _ts("observed_at", nullable=False),
    Column("version", String(64), nullable=False),
    Column("count", Integer, nullable=False, default=1),
    _ts("recorded_at", nullable=False),
    Column("run_id", String(250)),
    # when the response acted on it (v22); NULL: recorded, not yet acted on (its run died or
    # failed between the two): a replay of its batch acts on it
    _ts("acted_at"),
    UniqueConstraint("cluster", "node", "source", "what", "version", name="uq_gf_node_signals"),
    CheckConstraint(
        "response IN (" + ", ".join(f"'{r}'" for r in RESPONSES) + ")",
        name="ck_gf_node_signals_response",
    ),
    CheckConstraint("count >= 1", name="ck_gf_node_signals_count"),
)
Index(
    "ix_gf_node_signals_node",
    node_signals.c.cluster,
    node_signals.c.node,
    node_signals.c.observed_at,
)

watched_nodes = Table(
    "gf_watched_nodes",
    metadata,
    Column("cluster", String(63), primary_key=True),
    Column("node", String(253), primary_key=True),
    Column("pool", String(63)),
    Column("uid", String(128)),
    Column("boot_id", String(128)),
    Column("provider_id", String(400)),
    Column("unschedulable", Boolean, nullable=False, default=False),
    Column("conditions", JSON, nullable=False, default=list),
    Column("labels", JSON, nullable=False, default=dict),
    Column("version", String(64), nullable=False),
    _ts("seen_at", nullable=False),
    Column("gone", Boolean, nullable=False, default=False),
)

watch_cursors = Table(
    "gf_watch_cursors",
    metadata,
    Column("cluster", String(63), primary_key=True),
    Column("stream", String(32), primary_key=True),  # nodes | events
    Column("version", String(64), nullable=False),
    _ts("acked_at", nullable=False),
    Column("run_id", String(250)),
)

admission_sessions = Table(
    "gf_admission_sessions",
    metadata,
    Column("id", String(400), primary_key=True),
    Column("cluster", String(63), nullable=False),
    Column("pool", String(63), nullable=False),
    _ts("opened_at", nullable=False),
    Column("window_s", Float, nullable=False),
    Column("state", String(16), nullable=False),
    Column("nodes", JSON, nullable=False, default=dict),  # node -> joined at (ISO)
    Column("run_id", String(250)),  # the run validating it
    _ts("judged_at"),
    Column("outcome", JSON),  # released / quarantined / carried: node -> reason
    CheckConstraint(
        "state IN (" + ", ".join(f"'{s}'" for s in SESSION_STATES) + ")",
        name="ck_gf_admission_sessions_state",
    ),
    CheckConstraint("window_s > 0", name="ck_gf_admission_sessions_window"),
)
Index(
    "ix_gf_admission_sessions_pool",
    admission_sessions.c.cluster,
    admission_sessions.c.pool,
    admission_sessions.c.state,
)
