"""The simulated fleet's ``CloudBackend``: reservations, the RDMA network, the cluster, node
pools and Lustre filesystems of one sim cluster, as the catalog declares them.

Pools and filesystems exist in the state file; creating them is idempotent ("ensure").
``capacity-short`` shrinks a reservation, so a pool that needs more machines than are free is
refused; ``api-errors`` fails calls with a 503 as a throttled control plane would.
"""

from __future__ import annotations

import json
import time
from typing import Any

from gpufleet.backends.base import FilesystemInfo, NodePoolInfo, ReservationInfo
from gpufleet.backends.sim.base import SimBackendBase
from gpufleet.errors import BackendError


class SimCloudBackend(SimBackendBase):
    """The ``CloudBackend`` of a simulated cluster: reservations, pools and filesystems."""

    def _reservation(self, name: str):
        for region in self.catalog.regions.values():
            for res in region.reservations:
                if res.name == name and any(c.name == self.cluster.name for c in region.clusters):
                    return res
        raise BackendError(f"sim {self.cluster.name}: reservation {name!r} not found")

    def get_reservation(self, name: str) -> ReservationInfo:
        self._api_call("get reservation")
        res = self._reservation(name)
        pools = [p for p in self.cluster.node_pools if p.reservation.name == name]
        short = max((self.faults(p.name).capacity_short or 0 for p in pools), default=0)
        count = res.count
        if short == -1:
            count = res.count // 2
        elif short:
            count = max(res.count - short, 0)
        with self.state.read() as conn:
            in_use = sum(
                conn.execute(
                    "SELECT COUNT(*) FROM nodes WHERE cluster=? AND pool=?",
                    (self.cluster.name, p.name),
                ).fetchone()[0]
                for p in pools
            )
        return ReservationInfo(name, res.machine_type, count, in_use)

    def ensure_network(self) -> dict[str, Any]:
        self._api_call("ensure network")
        net = self.cluster.network
        body = {
            "name": net.name,
            "rdma_nics": net.rdma_nics,
            "subnets": [s.model_dump() for s in net.subnets],
        }
        with self.state.tx() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO cloud VALUES (?, 'network', ?, ?)",
                (self.cluster.name, net.name, json.dumps(body)),
            )
        return body

    def ensure_cluster(self) -> dict[str, Any]:
        self._api_call("ensure cluster")
        body = {"name": self.cluster.name, "location": self.cluster.location, "status": "RUNNING"}
        with self.state.tx() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO cloud VALUES (?, 'cluster', ?, ?)",
                (self.cluster.name, self.cluster.name, json.dumps(body)),
            )
        return body

    def get_node_pool(self, pool: str) -> NodePoolInfo:
        self._api_call("get node pool")
        spec = self.cluster.pool(pool)
        with self.state.read() as conn:
            count = conn.execute(
                "SELECT COUNT(*) FROM nodes WHERE cluster=? AND pool=?", (self.cluster.name, pool)
            ).fetchone()[0]
        return NodePoolInfo(
            pool,
            self.cluster.name,
            spec.machine_type,
            count,
            spec.reservation.name,
            "RUNNING" if count else "ABSENT",
        )

    def ensure_node_pool(self, pool: str) -> NodePoolInfo:
        current = self.get_node_pool(pool)
        if current.status == "RUNNING":
            return current
        spec = self.cluster.pool(pool)
        res = self.get_reservation(spec.reservation.name)
        if res.free < spec.nodes:
            raise BackendError(
                f"reservation {res.name!r} has {res.free} of {res.count} machines free; node "
                f"pool {pool!r} needs {spec.nodes}. Free capacity or lower the pool's size."
            )
        with self.state.tx() as conn:
            self.state.create_nodes(conn, self.cluster, pool, spec.nodes)
            conn.execute(
                "INSERT OR REPLACE INTO meta VALUES (?, ?)",
                (f"seeded:{self.cluster.name}/{pool}", str(time.time())),
            )
        return self.get_node_pool(pool)

    def delete_node_pool(self, pool: str) -> bool:
        self._api_call("delete node pool")
        with self.state.tx() as conn:
            return bool(
                conn.execute(
                    "DELETE FROM nodes WHERE cluster=? AND pool=?", (self.cluster.name, pool)
                ).rowcount
            )

    def get_filesystem(self, name: str) -> FilesystemInfo:
        self._api_call("get filesystem")
        fs = self.cluster.filesystem(name)
        with self.state.read() as conn:
            row = conn.execute(
                "SELECT body FROM cloud WHERE cluster=? AND kind='filesystem' AND name=?",
                (self.cluster.name, name),
            ).fetchone()
        status = "ACTIVE" if row else "ABSENT"
        return FilesystemInfo(
            name,
            fs.capacity_tib,
            fs.throughput_mbps_per_tib,
            status,
            mount_name=name.replace("-", "")[:8] if row else None,
        )

    def ensure_filesystem(self, name: str) -> FilesystemInfo:
        self._api_call("ensure filesystem")
        fs = self.cluster.filesystem(name)
        with self.state.tx() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO cloud VALUES (?, 'filesystem', ?, ?)",
                (self.cluster.name, name, json.dumps(fs.model_dump())),
            )
        return self.get_filesystem(name)
