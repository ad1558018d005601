"""The simulated fleet's state: one SQLite file shared by every Airflow task process.

Design: docs/design/simulated-fleet.md.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from gpufleet.backends.sim import connections, events_schedule, watch_log
from gpufleet.backends.sim.sim_clock import CLOCK_KEY, FROZEN_KEY, SimClock
from gpufleet.backends.sim.topology import topology_labels
from gpufleet.config.paths import state_dir
from gpufleet.domain.faults import ActiveFault, Fault, FaultError, RunLease, parse_fault
from gpufleet.domain.fleet import Catalog, Cluster
from gpufleet.domain.workloads import HOSTNAME_LABEL, POOL_LABEL, pool_label_key

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS nodes (
    cluster TEXT NOT NULL, name TEXT NOT NULL, pool TEXT NOT NULL,
    labels TEXT NOT NULL, taints TEXT NOT NULL, unschedulable INTEGER NOT NULL DEFAULT 0,
    ready INTEGER NOT NULL DEFAULT 1, PRIMARY KEY (cluster, name));
CREATE TABLE IF NOT EXISTS faults (
    id INTEGER PRIMARY KEY AUTOINCREMENT, cluster TEXT NOT NULL, pool TEXT NOT NULL,
    fault TEXT NOT NULL, scope TEXT NOT NULL DEFAULT 'cli', created_at REAL NOT NULL,
    dag_id TEXT, run_id TEXT, expires_at REAL,
    UNIQUE (cluster, pool, fault, scope));
CREATE TABLE IF NOT EXISTS objects (
    cluster TEXT NOT NULL, kind TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL,
    body TEXT NOT NULL, created_at REAL NOT NULL, PRIMARY KEY (cluster, kind, namespace, name));
CREATE TABLE IF NOT EXISTS pods (
    cluster TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL,
    workload_kind TEXT NOT NULL, workload TEXT NOT NULL, node TEXT, labels TEXT NOT NULL,
    start_at REAL NOT NULL, end_at REAL, outcome TEXT NOT NULL, message TEXT,
    logs TEXT NOT NULL, gpu INTEGER NOT NULL DEFAULT 1, PRIMARY KEY (cluster, namespace, name));
-- each pod's run time on the modelled clock (clock.run_times): its container times
CREATE TABLE IF NOT EXISTS pod_runs (
    cluster TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL, run_s REAL NOT NULL,
    facts TEXT, PRIMARY KEY (cluster, namespace, name));
-- the images each node holds (pulled by a pod that ran there: run_times.launch_facts)
CREATE TABLE IF NOT EXISTS node_images (
    cluster TEXT NOT NULL, node TEXT NOT NULL, image TEXT NOT NULL,
    PRIMARY KEY (cluster, node, image));
CREATE TABLE IF NOT EXISTS nights (
    cluster TEXT NOT NULL, pool TEXT NOT NULL, night TEXT NOT NULL, at REAL NOT NULL,
    PRIMARY KEY (cluster, pool, night));
CREATE TABLE IF NOT EXISTS cloud (
    cluster TEXT NOT NULL, kind TEXT NOT NULL, name TEXT NOT NULL, body TEXT NOT NULL,
    PRIMARY KEY (cluster, kind, name));
"""


# columns added to ``faults`` since the state file was first written (a state file outlives
# upgrades: ``make run`` keeps it)
_FAULT_COLUMNS = {"dag_id": "TEXT", "run_id": "TEXT", "expires_at": "REAL"}
_RUN_SCOPED = "scope LIKE 'run:%'"


def db_path() -> Path:
    return state_dir() / "sim.db"


def now() -> float:
    """The sim's notion of now (a UNIX time) in the default state file: what fault times and
    leases are measured on."""
    return SimState().clock.time()


class SimState:
    """Thin, transactional access to the sim database."""

    def __init__(self, path: Path | None = None):
        self.path = Path(path) if path else db_path()
        self.clock = SimClock(self)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.read() as conn:
            if connections.set_up(self.path, conn):
                return  # set up by this thread, and no schema changed since (any process's)
            conn.executescript(_SCHEMA)
            have = {r["name"] for r in conn.execute("PRAGMA table_info(faults)")}
            for column, kind in _FAULT_COLUMNS.items():
                if column not in have:
                    conn.execute(f"ALTER TABLE faults ADD COLUMN {column} {kind}")
            runs = {r["name"] for r in conn.execute("PRAGMA table_info(pod_runs)")}
            if "facts" not in runs:  # a state file from before the stage model
                conn.execute("ALTER TABLE pod_runs ADD COLUMN facts TEXT")
            watch_log.install(conn)  # node columns a watch reports, the change log, its triggers
            conn.executescript(events_schedule.SCHEMA)
            connections.mark_set_up(self.path, conn)

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        conn = connections.connect(self.path)
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        yield connections.connect(self.path)

    # --- seeding: a sim cluster's pools exist as the catalog describes them ---------------------

    def ensure_seeded(self, cluster: Cluster) -> None:
        """Create the nodes of every catalog pool once (a pool deleted later stays deleted)."""
        pools = [p for p in cluster.node_pools if not p.planned]  # a transition creates those
        keys = [f"seeded:{cluster.name}/{p.name}" for p in pools]
        if not keys:
            return
        with self.read() as conn:
            have = {
                r[0]
                for r in conn.execute(
                    f"SELECT key FROM meta WHERE key IN ({','.join('?' * len(keys))})", keys
                )
            }
        if len(have) == len(keys):
            return
        with self.tx() as conn:
            for pool in pools:
                key = f"seeded:{cluster.name}/{pool.name}"
                if conn.execute("SELECT 1 FROM meta WHERE key=?", (key,)).fetchone():
                    continue
                self.create_nodes(conn, cluster, pool.name, pool.nodes)
                conn.execute("INSERT INTO meta VALUES (?, ?)", (key, str(self.clock.time(conn))))

    @staticmethod
    def node_name(cluster: str, pool: str, index: int) -> str:
        return f"{cluster}-{pool}-{index}"

    def create_nodes(
        self,
        conn: sqlite3.Connection,
        cluster: Cluster,
        pool_name: str,
        count: int,
        *,
        taints: tuple[dict, ...] = (),
        ready: bool = True,
    ) -> list[str]:
        """Register ``count`` nodes of a pool (GPU-tainted, plus ``taints``); ``ready=False``
        for a pool still coming up (``settle_nodes`` makes them Ready)."""
        all_taints = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
        all_taints += [t for t in taints if t["key"] != "nvidia.com/gpu"]
        names = [self.node_name(cluster.name, pool_name, i) for i in range(count)]
        self.insert_nodes(conn, cluster, pool_name, names, taints=tuple(all_taints), ready=ready)
        return names

    def insert_nodes(
        self,
        conn: sqlite3.Connection,
        cluster: Cluster,
        pool_name: str,
        names: list[str],
        *,
        taints: tuple[dict, ...],
        ready: bool,
        labels: dict[str, str] | None = None,
    ) -> None:
        """Register nodes of a pool under ``names`` with exactly ``taints`` (a name already
        registered is left alone): each gets a uid, a boot id and its creation time."""
        pool = cluster.pool(pool_name)
        native = pool_label_key(cluster)
        now = self.clock.time(conn)
        for name in names:
            node_labels = {
                POOL_LABEL: pool_name,
                native: pool_name,
                HOSTNAME_LABEL: name,
                "node.kubernetes.io/instance-type": pool.machine_type,
                "nvidia.com/gpu.product": pool.gpu.model,
                "nvidia.com/gpu.count": str(pool.gpu.count),
                **topology_labels(pool, name),
                **(labels or {}),
            }
            conn.execute(
                "INSERT OR IGNORE INTO nodes (cluster, name, pool, labels, taints, "
                "unschedulable, ready, uid, boot_id, created_at, conditions, ready_since) "
                "VALUES (?, ?, ?, ?, ?, 0, ?, ?, ?, ?, '[]', ?)",
                (
                    cluster.name,
                    name,
                    pool_name,
                    json.dumps(node_labels),
                    json.dumps(list(taints)),
                    int(ready),
                    str(uuid.uuid4()),
                    str(uuid.uuid4()),
                    now,
                    now,
                ),
            )

    def count_call(self, cluster: str) -> int:
        """Count one API call on ``cluster`` (for ``api-errors:...:after=N``); the new total."""
        key = f"api-calls:{cluster}"
        with self.tx() as conn:
            row = conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
            total = int(row[0]) + 1 if row else 1
            conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, str(total)))
        return total

    # --- faults --------------------------------------------------------------------------------

    def inject(
        self,
        cluster: str,
        pool: str,
        fault: str | Fault,
        scope: str = "cli",
        lease: RunLease | None = None,
    ) -> bool:
        """Record a fault (text in the fault grammar, or parsed); False if already in force.

        With a ``lease`` the fault is the run's (its scope is the run's) and stays in force
        ``lease.seconds`` at most; injected again by the same run, its lease starts again. A
        ``run:`` scope without a lease is refused: nothing would ever expire it."""
        parsed = fault if isinstance(fault, Fault) else parse_fault(fault)
        if lease is not None:
            scope = lease.scope
        elif scope.startswith("run:"):
            raise FaultError(f"a fault of scope {scope!r} needs its run's lease (RunLease)")
        at = self.clock.time()
        dag_id, run_id = (lease.dag_id, lease.run_id) if lease else (None, None)
        expires_at = at + lease.seconds if lease else None
        key = (cluster, pool, parsed.text, scope)
        with self.tx() as conn:
            row = conn.execute(
                "SELECT id, expires_at FROM faults WHERE cluster=? AND pool=? AND fault=? "
                "AND scope=?",
                key,
            ).fetchone()
            if row is not None and (row["expires_at"] is None or row["expires_at"] > at):
                if lease is not None:
                    conn.execute(
                        "UPDATE faults SET expires_at=? WHERE id=?", (expires_at, row["id"])
                    )
                return False
            if row is not None:  # its lease ran out: it was not in force
                conn.execute("DELETE FROM faults WHERE id=?", (row["id"],))
            conn.execute(
                "INSERT INTO faults (cluster, pool, fault, scope, created_at, dag_id, run_id, "
                "expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (*key, at, dag_id, run_id, expires_at),
            )
            if parsed.kind == "api-errors":  # 'after=N' counts from now
                conn.execute("DELETE FROM meta WHERE key=?", (f"api-calls:{cluster}",))
            return True

    def clear(
        self, cluster: str | None = None, pool: str | None = None, scope: str | None = None
    ) -> int:
        sql, args = "DELETE FROM faults WHERE 1=1", []
        for col, val in (("cluster", cluster), ("pool", pool), ("scope", scope)):
            if val:
                sql += f" AND {col}=?"
                args.append(val)
        with self.tx() as conn:
            return conn.execute(sql, args).rowcount

    def faults(
        self, catalog: Catalog | None = None, cluster: str | None = None, at: float | None = None
    ) -> list[ActiveFault]:
        """Injected faults in force at ``at`` (default: now; a run's fault past its lease is
        not) plus the standing faults a sim cluster declares in the catalog."""
        at = self.clock.time() if at is None else at
        sql = "SELECT * FROM faults WHERE (expires_at IS NULL OR expires_at > ?)"
        args: list[object] = [at]
        if cluster:
            sql += " AND cluster=?"
            args.append(cluster)
        with self.read() as conn:
            out = [_active(r) for r in conn.execute(sql + " ORDER BY id", args)]
        if catalog:
            for _, cl in catalog.clusters.values():
                if cl.sim is None or (cluster and cl.name != cluster):
                    continue
                for pool, texts in cl.sim.faults.items():
                    out += [ActiveFault(cl.name, pool, parse_fault(t), "catalog") for t in texts]
        return out

    def sweep(
        self, alive: Callable[[str, str], bool], at: float | None = None
    ) -> list[ActiveFault]:
        """Remove the run-scoped faults whose lease has run out or whose run is no longer
        alive (``alive(dag_id, run_id)``; a run fault that names no run, from an older state
        file, has no one to ask and goes too); the faults removed. ``cli`` faults stay."""
        at = self.clock.time() if at is None else at
        with self.read() as conn:
            rows = conn.execute(f"SELECT * FROM faults WHERE {_RUN_SCOPED}").fetchall()
        runs = {(r["dag_id"], r["run_id"]) for r in rows if r["dag_id"] and r["run_id"]}
        dead = {run for run in runs if not alive(*run)}  # outside a transaction: it may call out
        gone = [
            r["id"]
            for r in rows
            if not (r["dag_id"] and r["run_id"])
            or (r["dag_id"], r["run_id"]) in dead
            or (r["expires_at"] is not None and r["expires_at"] <= at)
        ]
        removed = []
        with self.tx() as conn:
            for fault_id in gone:
                row = conn.execute("SELECT * FROM faults WHERE id=?", (fault_id,)).fetchone()
                if row is not None:
                    conn.execute("DELETE FROM faults WHERE id=?", (fault_id,))
                    removed.append(_active(row))
        return removed

    # --- nights: what ``drift:<percent>`` counts ------------------------------------------------

    def record_night(self, conn: sqlite3.Connection, cluster: str, pool: str, night: str) -> None:
        """Note that ``night`` (a validation run's id) ran the pool's fabric check; once."""
        at = self.clock.time(conn)
        conn.execute("INSERT OR IGNORE INTO nights VALUES (?, ?, ?, ?)", (cluster, pool, night, at))

    @staticmethod
    def nights_since(conn: sqlite3.Connection, cluster: str, pool: str, since: float | None) -> int:
        """How many nights ran the pool's fabric check since ``since`` (None: ever)."""
        row = conn.execute(
            "SELECT COUNT(*) FROM nights WHERE cluster=? AND pool=? AND at >= ?",
            (cluster, pool, since if since is not None else float("-inf")),
        ).fetchone()
        return int(row[0])

    def reset(self) -> None:
        """Forget everything (nodes are re-seeded from the catalog on next use) but the clock:
        the sim's time never goes back."""
        with self.tx() as conn:
            conn.execute("DELETE FROM meta WHERE key NOT IN (?, ?)", (CLOCK_KEY, FROZEN_KEY))
            tables: tuple[str, ...] = (
                "nodes",
                "faults",
                "objects",
                "pods",
                "pod_runs",
                "node_images",
                "cloud",
            )
            tables += ("nights",)
            tables += ("node_changes", "node_events", events_schedule.TABLE)
            for table in tables:
                conn.execute(f"DELETE FROM {table}")
            # versions go on, and a watch from before the reset is told to relist (410)
            conn.execute(
                "INSERT OR REPLACE INTO meta VALUES (?, ?)",
                (watch_log.FLOOR_KEY, str(watch_log.newest_version(conn))),
            )


def _active(row: sqlite3.Row) -> ActiveFault:
    return ActiveFault(
        row["cluster"],
        row["pool"],
        parse_fault(row["fault"]),
        row["scope"],
        row["created_at"],
        row["dag_id"],
        row["run_id"],
        row["expires_at"],
    )
