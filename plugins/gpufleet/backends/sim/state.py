"""The simulated fleet's state: one SQLite file shared by every Airflow task process.

Tables: nodes, faults, objects (applied manifests), pods (with their logs), cloud resources.
Writes take an immediate transaction so concurrent task processes serialise cleanly.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from gpufleet.config.paths import state_dir
from gpufleet.domain.faults import FAULT_KINDS
from gpufleet.domain.fleet import Catalog, Cluster
from gpufleet.domain.workloads import HOSTNAME_LABEL, POOL_LABEL, pool_label_key
from gpufleet.errors import GpufleetError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS nodes (
    cluster TEXT NOT NULL, name TEXT NOT NULL, pool TEXT NOT NULL,
    labels TEXT NOT NULL, taints TEXT NOT NULL, unschedulable INTEGER NOT NULL DEFAULT 0,
    ready INTEGER NOT NULL DEFAULT 1, PRIMARY KEY (cluster, name));
CREATE TABLE IF NOT EXISTS faults (
    id INTEGER PRIMARY KEY AUTOINCREMENT, cluster TEXT NOT NULL, pool TEXT NOT NULL,
    fault TEXT NOT NULL, scope TEXT NOT NULL DEFAULT 'cli', created_at REAL NOT NULL,
    UNIQUE (cluster, pool, fault, scope));
CREATE TABLE IF NOT EXISTS objects (
    cluster TEXT NOT NULL, kind TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL,
    body TEXT NOT NULL, created_at REAL NOT NULL, PRIMARY KEY (cluster, kind, namespace, name));
CREATE TABLE IF NOT EXISTS pods (
    cluster TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL,
    workload_kind TEXT NOT NULL, workload TEXT NOT NULL, node TEXT, labels TEXT NOT NULL,
    start_at REAL NOT NULL, end_at REAL, outcome TEXT NOT NULL, message TEXT,
    logs TEXT NOT NULL, gpu INTEGER NOT NULL DEFAULT 1, PRIMARY KEY (cluster, namespace, name));
CREATE TABLE IF NOT EXISTS cloud (
    cluster TEXT NOT NULL, kind TEXT NOT NULL, name TEXT NOT NULL, body TEXT NOT NULL,
    PRIMARY KEY (cluster, kind, name));
"""


@dataclass(frozen=True)
class Fault:
    cluster: str
    pool: str
    kind: str
    arg: str | None
    scope: str

    @property
    def text(self) -> str:
        return f"{self.kind}:{self.arg}" if self.arg else self.kind


def parse_fault(text: str) -> tuple[str, str | None]:
    """``bad-node:<node>`` -> (``bad-node``, ``<node>``); refuses what the sim cannot do."""
    kind, _, arg = text.strip().partition(":")
    if kind not in FAULT_KINDS:
        raise GpufleetError(f"unknown fault {text!r}: use one of {', '.join(FAULT_KINDS)}")
    if kind in ("bad-node",) and not arg:
        raise GpufleetError(f"{kind} needs a node name: {kind}:<node>[:nic]")
    if kind == "api-errors":
        try:
            rate = float(arg)
        except ValueError:
            raise GpufleetError("api-errors needs a rate between 0 and 1: api-errors:0.3") from None
        if not 0 < rate <= 1:
            raise GpufleetError(f"api-errors rate {arg} is not within (0, 1]")
    if kind == "lustre-slow" and arg:
        try:
            factor = float(arg)
        except ValueError:
            raise GpufleetError("lustre-slow takes an optional factor: lustre-slow:0.3") from None
        if not 0 < factor < 1:
            raise GpufleetError(f"lustre-slow factor {arg} is not within (0, 1)")
    if kind == "fabric-down" and arg and not arg.startswith("busbw="):
        raise GpufleetError("fabric-down takes an optional socket bandwidth: fabric-down:busbw=340")
    if kind == "capacity-short" and arg and not arg.isdigit():
        raise GpufleetError("capacity-short takes an optional machine count: capacity-short:2")
    return kind, (arg or None)


def db_path() -> Path:
    return state_dir() / "sim.db"


class SimState:
    """Thin, transactional access to the sim database."""

    def __init__(self, path: Path | None = None):
        self.path = Path(path) if path else db_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as conn:
            conn.executescript(_SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA busy_timeout=60000")
        return conn

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        conn = self._connect()
        try:
            conn.execute("BEGIN IMMEDIATE")
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        finally:
            conn.close()

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        conn = self._connect()
        try:
            yield conn
        finally:
            conn.close()

    # --- seeding: a sim cluster's pools exist as the catalog describes them ---------------------

    def ensure_seeded(self, cluster: Cluster) -> None:
        """Create the nodes of every catalog pool once (a pool deleted later stays deleted)."""
        keys = [f"seeded:{cluster.name}/{p.name}" for p in cluster.node_pools]
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
            for pool in cluster.node_pools:
                key = f"seeded:{cluster.name}/{pool.name}"
                if conn.execute("SELECT 1 FROM meta WHERE key=?", (key,)).fetchone():
                    continue
                self.create_nodes(conn, cluster, pool.name, pool.nodes)
                conn.execute("INSERT INTO meta VALUES (?, ?)", (key, str(time.time())))

    @staticmethod
    def node_name(cluster: str, pool: str, index: int) -> str:
        return f"{cluster}-{pool}-{index}"

    def create_nodes(
        self, conn: sqlite3.Connection, cluster: Cluster, pool_name: str, count: int
    ) -> list[str]:
        pool = cluster.pool(pool_name)
        native = pool_label_key(cluster)
        names = []
        for i in range(count):
            name = self.node_name(cluster.name, pool_name, i)
            labels = {
                POOL_LABEL: pool_name,
                native: pool_name,
                HOSTNAME_LABEL: name,
                "node.kubernetes.io/instance-type": pool.machine_type,
                "nvidia.com/gpu.product": pool.gpu.model,
                "nvidia.com/gpu.count": str(pool.gpu.count),
            }
            conn.execute(
                "INSERT OR IGNORE INTO nodes VALUES (?, ?, ?, ?, ?, 0, 1)",
                (
                    cluster.name,
                    name,
                    pool_name,
                    json.dumps(labels),
                    json.dumps(
                        [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
                    ),
                ),
            )
            names.append(name)
        return names

    # --- faults --------------------------------------------------------------------------------

    def inject(self, cluster: str, pool: str, fault: str, scope: str = "cli") -> bool:
        parse_fault(fault)
        with self.tx() as conn:
            cur = conn.execute(
                "INSERT OR IGNORE INTO faults (cluster, pool, fault, scope, created_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (cluster, pool, fault, scope, time.time()),
            )
            return cur.rowcount > 0

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

    def faults(self, catalog: Catalog | None = None, cluster: str | None = None) -> list[Fault]:
        """Injected faults plus the standing faults a sim cluster declares in the catalog."""
        out: list[Fault] = []
        with self.read() as conn:
            for r in conn.execute("SELECT * FROM faults ORDER BY id"):
                if cluster and r["cluster"] != cluster:
                    continue
                kind, arg = parse_fault(r["fault"])
                out.append(Fault(r["cluster"], r["pool"], kind, arg, r["scope"]))
        if catalog:
            for _, cl in catalog.clusters.values():
                if cl.sim is None or (cluster and cl.name != cluster):
                    continue
                for pool, texts in cl.sim.faults.items():
                    for text in texts:
                        kind, arg = parse_fault(text)
                        out.append(Fault(cl.name, pool, kind, arg, "catalog"))
        return out

    def reset(self) -> None:
        """Forget everything (nodes are re-seeded from the catalog on next use)."""
        with self.tx() as conn:
            for table in ("meta", "nodes", "faults", "objects", "pods", "cloud"):
                conn.execute(f"DELETE FROM {table}")
