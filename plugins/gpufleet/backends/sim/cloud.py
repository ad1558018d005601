"""The simulated fleet's ``CloudBackend``: reservations, the RDMA network, the cluster, node
pools and Lustre filesystems of one sim cluster, as the catalog declares them.

Design: docs/design/simulated-fleet.md.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from gpufleet.backends.base import (
    ClusterCredentials,
    ClusterInfo,
    EnsureAction,
    Ensured,
    FilesystemInfo,
    NodeInfo,
    NodePoolInfo,
    PoolDeletion,
    ReservationInfo,
    ResourceStatus,
    Taint,
)
from gpufleet.backends.sim import machines
from gpufleet.backends.sim import provider_topology as _topology
from gpufleet.backends.sim.cloud_table import CloudTable
from gpufleet.backends.topology_api import ReservationHealth, SubBlockHealth
from gpufleet.errors import BackendError


class SimCloudBackend(CloudTable):
    """The ``CloudBackend`` of a simulated cluster: reservations, pools and filesystems."""

    # --- ensure over the cloud table (rows: ``cloud_table.CloudTable``) -----------------------

    def _status(self, body: dict[str, Any] | None) -> ResourceStatus:
        if body is None:
            return ResourceStatus.ABSENT
        return (
            ResourceStatus.READY
            if self.state.clock.time() >= body.get("ready_at", 0)
            else ResourceStatus.CREATING
        )

    def _ensure(
        self, kind: str, name: str, want: dict[str, Any], dry_run: bool, preexisting: bool = False
    ) -> Ensured:
        """Read ``kind/name``; create it from ``want`` when missing (unless ``dry_run``);
        report the fields where what exists differs from ``want``."""
        have = self.row(kind, name)
        if have is None and preexisting:
            return Ensured(
                kind,
                name,
                EnsureAction.FOUND,
                ResourceStatus.READY,
                console_url=self.url(kind, name),
            )
        if have is not None:
            differences = tuple(
                f"{field}: catalog {want[field]}, cloud {have.get(field)}"
                for field in sorted(want)
                if have.get(field) != want[field]
            )
            return Ensured(
                kind,
                name,
                EnsureAction.FOUND,
                self._status(have),
                differences,
                self.url(kind, name),
            )
        if dry_run:
            return Ensured(
                kind,
                name,
                EnsureAction.WOULD_CREATE,
                ResourceStatus.ABSENT,
                console_url=self.url(kind, name),
            )
        with self.state.tx() as conn:
            self.insert(conn, kind, name, want)
        return Ensured(
            kind,
            name,
            EnsureAction.CREATED,
            self._status(self.row(kind, name)),
            (),
            self.url(kind, name),
        )

    @property
    def _preexisting(self) -> bool:
        return self.cluster.sim is None or self.cluster.sim.preexisting

    # --- reservations --------------------------------------------------------------------------

    def get_reservation(self, name: str) -> ReservationInfo:
        self._api_call("get reservation")
        res = self._reservation(name)
        pools = [p for p in self.cluster.node_pools if p.reservation.name == name]
        count = self.reserved(name)
        with self.state.read() as conn:
            in_use = sum(
                conn.execute(
                    "SELECT COUNT(*) FROM nodes WHERE cluster=? AND pool=?",
                    (self.cluster.name, p.name),
                ).fetchone()[0]
                for p in pools
            )
        return ReservationInfo(
            name, res.machine_type, count, in_use, zone=res.zone, blocks=res.blocks or None
        )

    # --- network and cluster -------------------------------------------------------------------

    def ensure_network(self, dry_run: bool = False) -> list[Ensured]:
        self._api_call("ensure network")
        net = self.cluster.network
        out = [
            self._ensure(
                "network", net.name, {"rdma_nics": net.rdma_nics}, dry_run, self._preexisting
            )
        ]
        subnets = [*net.subnets, *([net.gvnic] if net.gvnic else [])]
        for subnet in subnets:
            out.append(
                self._ensure(
                    "subnet", subnet.name, {"cidr": subnet.cidr}, dry_run, self._preexisting
                )
            )
        return out

    def ensure_cluster(self, dry_run: bool = False) -> Ensured:
        self._api_call("ensure cluster")
        want = {"location": self.cluster.location, **self._features()}
        return self._ensure("cluster", self.cluster.name, want, dry_run, self._preexisting)

    def _features(self) -> dict[str, bool]:
        if self.cluster.shape == "gke":
            return {"multi_networking": True, "dataplane_v2": True, "lustre_csi": True}
        return {"efa": True}

    def get_cluster(self) -> ClusterInfo:
        self._api_call("get cluster")
        body = self.row("cluster", self.cluster.name)
        status = ResourceStatus.READY if body is None and self._preexisting else self._status(body)
        return ClusterInfo(
            self.cluster.name,
            status,
            endpoint=f"sim://{self.cluster.name}" if status != ResourceStatus.ABSENT else None,
            version=self.cluster.kubernetes_version or "1.34",
            features=self._features() if status != ResourceStatus.ABSENT else {},
            console_url=self.url("cluster", self.cluster.name),
        )

    def cluster_credentials(self) -> ClusterCredentials:
        self._api_call("get credentials")
        if not self.cluster_exists():
            raise BackendError(f"sim cluster {self.cluster.name!r} does not exist yet")
        return ClusterCredentials(server=f"sim://{self.cluster.name}", token="sim")

    # --- node pools ----------------------------------------------------------------------------

    def get_node_pool(self, pool: str) -> NodePoolInfo:
        self._api_call("get node pool")
        spec = self.cluster.pool(pool)
        self.settle_nodes()
        with self.state.read() as conn:
            count = conn.execute(
                "SELECT COUNT(*) FROM nodes WHERE cluster=? AND pool=?", (self.cluster.name, pool)
            ).fetchone()[0]
        body = self.row("node_pool", pool)
        status = (
            self._status(body)
            if body
            else (ResourceStatus.READY if count else ResourceStatus.ABSENT)
        )
        return NodePoolInfo(
            pool,
            self.cluster.name,
            spec.machine_type,
            count,
            spec.reservation.name,
            status,
            console_url=self.url("node_pool", pool),
        )

    def ensure_node_pool(
        self, pool: str, dry_run: bool = False, taints: tuple[Taint, ...] = ()
    ) -> Ensured:
        current = self.get_node_pool(pool)
        spec = self.cluster.pool(pool)
        url = self.url("node_pool", pool)
        if current.status != ResourceStatus.ABSENT:
            differences: tuple[str, ...] = ()
            if current.node_count != spec.nodes:
                differences = (f"nodes: catalog {spec.nodes}, cloud {current.node_count}",)
            return Ensured("node_pool", pool, EnsureAction.FOUND, current.status, differences, url)
        if dry_run:
            return Ensured(
                "node_pool", pool, EnsureAction.WOULD_CREATE, ResourceStatus.ABSENT, console_url=url
            )
        self._require_cluster()
        res = self.get_reservation(spec.reservation.name)
        if res.free < spec.nodes:
            raise BackendError(
                f"reservation {res.name!r} has {res.free} of {res.count} machines free; node "
                f"pool {pool!r} needs {spec.nodes}. Free capacity or lower the pool's size."
            )
        with self.state.tx() as conn:
            self.insert(conn, "node_pool", pool, {"machine_type": spec.machine_type})
            self.state.create_nodes(
                conn,
                self.cluster,
                pool,
                spec.nodes,
                taints=tuple(t.as_dict() for t in taints),
                ready=False,
            )
            conn.execute(
                "INSERT OR REPLACE INTO meta VALUES (?, ?)",
                (f"seeded:{self.cluster.name}/{pool}", str(self.state.clock.time(conn))),
            )
        return Ensured(
            "node_pool",
            pool,
            EnsureAction.CREATED,
            ResourceStatus.CREATING,
            (),
            url,
            {"nodes": spec.nodes},
        )

    def settle_nodes(self) -> None:
        """Nodes of pools whose creation finished turn Ready (but for ``not-ready`` ones); a
        node under repair or rebooting stays NotReady until the action's ``ready_at``, then
        turns Ready whatever its pool's row says (but for a ``not-ready`` fault it kept), with
        a new boot id (its machine booted again); a node a cloud's repair or the autoscaler
        added (a ``boot`` row, ``node_actions``) turns Ready once its machine has booted. The
        Ready condition's transition time is when that happened on the sim's clock."""
        with self.state.read() as conn:
            pending = conn.execute(
                "SELECT name, pool FROM nodes WHERE cluster=? AND ready=0", (self.cluster.name,)
            ).fetchall()
            if not pending:
                return
            boots = {
                r["name"]: json.loads(r["body"])["ready_at"]
                for r in conn.execute(
                    "SELECT name, body FROM cloud WHERE cluster=? AND kind='boot'",
                    (self.cluster.name,),
                )
            }
        repairs = machines.busy_until(self)
        now = self.state.clock.time()
        pool_ready: dict[str, bool] = {}
        stuck: dict[str, frozenset[str]] = {}
        settled: list[tuple[str, float, bool]] = []  # node, since when, rebooted
        for node, pool in pending:
            since = now
            if node in repairs or node in boots:
                since = max(repairs.get(node, float("-inf")), boots.get(node, float("-inf")))
                if now < since:
                    continue
            else:
                if pool not in pool_ready:
                    pool_ready[pool] = (
                        self._status(self.row("node_pool", pool)) == ResourceStatus.READY
                    )
                if not pool_ready[pool]:
                    continue
            if pool not in stuck:
                stuck[pool] = self.faults(pool).not_ready_nodes
            if node not in stuck[pool]:
                settled.append((node, since, node in repairs))
        if settled:
            with self.state.tx() as conn:
                for node, since, rebooted in settled:
                    conn.execute(
                        "UPDATE nodes SET ready=1, ready_since=?, "
                        "boot_id=CASE WHEN ? THEN ? ELSE boot_id END "
                        "WHERE cluster=? AND name=? AND ready=0",
                        (since, int(rebooted), str(uuid.uuid4()), self.cluster.name, node),
                    )

    def delete_node_pool(self, pool: str) -> bool:
        self._api_call("delete node pool")
        with self.state.tx() as conn:
            conn.execute(
                "DELETE FROM cloud WHERE cluster=? AND kind='node_pool' AND name=?",
                (self.cluster.name, pool),
            )
            return bool(
                conn.execute(
                    "DELETE FROM nodes WHERE cluster=? AND pool=?", (self.cluster.name, pool)
                ).rowcount
            )

    def ensure_node_pool_deleted(self, pool: str, operation: str | None = None) -> PoolDeletion:
        """The sim deletes at once: the pool and its nodes are gone when this returns."""
        existed = self.row("node_pool", pool) is not None
        self.delete_node_pool(pool)
        return PoolDeletion(pool, ResourceStatus.ABSENT, operation, requested=existed)

    # --- a machine's repair and reboot (``machines``) -----------------------------------------

    def repair_node(self, node: NodeInfo, dry_run: bool = False) -> Ensured:
        """The sim's host repair: the machine moves to a healthy host; every injected fault
        naming the node is cleared but for a ``sticky`` one; NotReady for
        ``CREATE_S["repair"]`` x ``GPUFLEET_SIM_SPEED`` seconds, then Ready. A repair still
        under way is ``found`` (``machines``)."""
        return machines.repair(self, node, dry_run)

    def reboot_node(self, node: NodeInfo, dry_run: bool = False) -> Ensured:
        """The sim's reboot: the machine stays and every GPU resets; the node's faults of
        ``REBOOT_CLEARS`` (Xid events, a pending row remap) are cleared but for a ``sticky``
        one, the rest stay; NotReady for ``CREATE_S["reboot"]`` x ``GPUFLEET_SIM_SPEED``
        seconds, then Ready. A reboot still under way is ``found``; one during a repair is
        refused (``machines``)."""
        return machines.reboot(self, node, dry_run)

    # --- the provider's view of the racks (``provider_topology``) -----------------------------

    def subblock_health(self, pool: str) -> list[SubBlockHealth]:
        """The pool's sub-blocks; every host of one under ``subblock-down`` reads degraded."""
        return _topology.subblock_health(self, pool)

    def reservation_health(self, pool: str) -> ReservationHealth:
        """The reservation's hosts in racks as the pool's nodes would sit, whether or not the
        pool exists; an EKS-like cluster reports no sub-blocks, as EKS."""
        return _topology.reservation_health(self, pool)

    def report_faulty_subblock(
        self, pool: str, key: str, reason: str, dry_run: bool = False
    ) -> Ensured:
        """Record a report of the sub-block in the sim state (``subblock_reports``)."""
        return _topology.report_faulty_subblock(self, pool, key, reason, dry_run)

    def subblock_reports(self, pool: str | None = None) -> list[dict[str, Any]]:
        """The sub-block reports recorded (latest per sub-block, ``reports`` counting them)."""
        return _topology.subblock_reports(self, pool)

    # --- filesystems ---------------------------------------------------------------------------

    def get_filesystem(self, name: str) -> FilesystemInfo:
        self._api_call("get filesystem")
        fs = self.cluster.filesystem(name)
        body = self.row("filesystem", name)
        status = ResourceStatus.READY if body is None and self._preexisting else self._status(body)
        exists = status != ResourceStatus.ABSENT
        return FilesystemInfo(
            name,
            fs.capacity_tib,
            fs.throughput_mbps_per_tib,
            status,
            id=f"sim/{self.cluster.name}/{name}" if exists else None,
            mount_name=name.replace("-", "")[:8] if exists else None,
            endpoint=f"{name}.{self.cluster.name}.sim@tcp" if exists else None,
            network=self.cluster.network.primary_vpc,
            console_url=self.url("filesystem", name),
        )

    def ensure_filesystem(self, name: str, dry_run: bool = False) -> Ensured:
        self._api_call("ensure filesystem")
        fs = self.cluster.filesystem(name)
        want = {
            "capacity_tib": fs.capacity_tib,
            "throughput_mbps_per_tib": fs.throughput_mbps_per_tib,
            "network": self.cluster.network.primary_vpc,
        }
        return self._ensure("filesystem", name, want, dry_run, self._preexisting)
