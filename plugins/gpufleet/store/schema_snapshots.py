"""The ledger's node snapshots (v12) and pool validation locks (v13), part of
``store/schema.py``'s one ``metadata``, which imports them back (``schema.node_snapshots``,
``schema.validation_locks``). A snapshot is what each pool's nodes looked like the last time a
task that lists them anyway (a validation, the node lifecycle's remediation) looked. Read paths
(the fleet and pool pages, ``/metrics``, ``gpufleet status``) read this, never a cluster: one
row per pool, replaced at each look."""

from __future__ import annotations

from sqlalchemy import JSON, CheckConstraint, Column, Integer, String, Table

from gpufleet.store.schema_base import metadata
from gpufleet.store.schema_base import timestamp as _ts

node_snapshots = Table(
    "gf_node_snapshots",
    metadata,
    Column("cluster", String(63), primary_key=True),
    Column("pool", String(63), primary_key=True),
    _ts("taken_at", nullable=False),
    Column("source", String(32), nullable=False),  # fabric | remediation | ...
    Column("run_id", String(250)),
    Column("nodes", Integer, nullable=False),
    Column("ready", Integer, nullable=False),
    Column("free", Integer, nullable=False),  # NodeInfo.free: what the gate counts
    Column("quarantined", Integer, nullable=False),
    Column("busy", Integer, nullable=False),  # running a training workload
    Column("detail", JSON, nullable=False, default=list),  # per node, see store.snapshots
    CheckConstraint(
        "nodes >= 0 AND ready >= 0 AND free >= 0 AND quarantined >= 0 AND busy >= 0 "
        "AND ready <= nodes AND free <= nodes AND quarantined <= nodes AND busy <= nodes",
        name="ck_gf_node_snapshots_counts",
    ),
)

# A pool's validation lock (v13): one row per (cluster, pool, kind) while a run validates it,
# so that two runs (two nightlies: a second deployment, a ``dags test``, a manual run beside the
# scheduled one) never run their pairs on the same nodes at once. The lease columns are those
# of ``gf_region_locks`` (``store.locks.LeaseLock``).
validation_locks = Table(
    "gf_validation_locks",
    metadata,
    Column("cluster", String(63), primary_key=True),
    Column("pool", String(63), primary_key=True),
    Column("kind", String(16), primary_key=True),
    Column("dag_id", String(250), nullable=False),
    Column("run_id", String(250), nullable=False),
    _ts("taken_at", nullable=False),
    _ts("heartbeat_at", nullable=False),
    # who inside the run holds it (a filesystem's full test: the pool running it); NULL: the run
    Column("holder", String(127), nullable=True),
)
