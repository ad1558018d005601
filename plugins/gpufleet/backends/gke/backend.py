"""``GkeCloudBackend``: the ``CloudBackend`` protocol on Google Cloud, one catalog cluster.

Each method delegates to the module of its concept (``network``, ``cluster``, ``pools``,
``lustre``, ``repair``, ``reboot``, ``subblocks``); ``clients`` builds the REST clients (endpoint,
credentials) and turns Google API errors into gpufleet's. The retry rule is applied by the
caller's wrapper (``RetryingCloudBackend``), not here.
"""

from __future__ import annotations

from gpufleet.backends.base import (
    ClusterCredentials,
    ClusterInfo,
    Ensured,
    FilesystemInfo,
    NodeInfo,
    NodePoolInfo,
    PoolDeletion,
    ReservationInfo,
    Taint,
)
from gpufleet.backends.gke import cluster as _cluster
from gpufleet.backends.gke import lustre as _lustre
from gpufleet.backends.gke import network as _network
from gpufleet.backends.gke import pools as _pools
from gpufleet.backends.gke import reboot as _reboot
from gpufleet.backends.gke import repair as _repair
from gpufleet.backends.gke import subblocks as _subblocks
from gpufleet.backends.gke.clients import DEFAULT_CONN_ID, Endpoint, GcpClients, Scope
from gpufleet.backends.topology_api import ReservationHealth, SubBlockHealth
from gpufleet.domain.fleet import Cluster, Region
from gpufleet.errors import CatalogError


class GkeCloudBackend:
    """GKE, Compute Engine and Managed Lustre for one ``provider: gke`` catalog cluster.

    ``region`` gives the reservations (their zones); ``endpoint`` overrides
    ``GPUFLEET_GCP_ENDPOINT``; ``poll_interval``/``operation_timeout`` are the waits on compute
    operations (network and subnet inserts, host-fault reports), the only operations this
    backend waits on.
    """

    def __init__(
        self,
        cluster: Cluster,
        region: Region,
        *,
        endpoint: str | None = None,
        poll_interval: float = 2.0,
        operation_timeout: float = 900.0,
    ) -> None:
        if cluster.provider != "gke" or not cluster.project:
            raise CatalogError(
                f"cluster {cluster.name!r} is provider {cluster.provider!r}"
                + ("" if cluster.project else " without a project")
                + ": the GKE backend serves provider gke clusters with a project"
            )
        ep = Endpoint.from_env() if endpoint is None else Endpoint.parse(endpoint)
        clients = GcpClients(cluster.connections.cloud or DEFAULT_CONN_ID, ep)
        self.scope = Scope(cluster, region, clients, poll_interval, operation_timeout)

    @property
    def cluster(self) -> Cluster:
        return self.scope.cluster

    def get_reservation(self, name: str) -> ReservationInfo:
        return _pools.get_reservation(self.scope, name)

    def ensure_network(self, dry_run: bool = False) -> list[Ensured]:
        return _network.ensure_network(self.scope, dry_run)

    def ensure_cluster(self, dry_run: bool = False) -> Ensured:
        return _cluster.ensure_cluster(self.scope, dry_run)

    def get_cluster(self) -> ClusterInfo:
        return _cluster.get_cluster(self.scope)

    def cluster_credentials(self) -> ClusterCredentials:
        return _cluster.cluster_credentials(self.scope)

    def ensure_node_pool(
        self, pool: str, dry_run: bool = False, taints: tuple[Taint, ...] = ()
    ) -> Ensured:
        return _pools.ensure_node_pool(self.scope, pool, dry_run, tuple(taints))

    def get_node_pool(self, pool: str) -> NodePoolInfo:
        return _pools.get_node_pool(self.scope, pool)

    def delete_node_pool(self, pool: str) -> bool:
        return _pools.delete_node_pool(self.scope, pool)

    def ensure_node_pool_deleted(self, pool: str, operation: str | None = None) -> PoolDeletion:
        return _pools.ensure_node_pool_deleted(self.scope, pool, operation)

    def ensure_filesystem(self, name: str, dry_run: bool = False) -> Ensured:
        return _lustre.ensure_filesystem(self.scope, name, dry_run)

    def get_filesystem(self, name: str) -> FilesystemInfo:
        return _lustre.get_filesystem(self.scope, name)

    def repair_node(self, node: NodeInfo, dry_run: bool = False) -> Ensured:
        """Report the host of the node's VM as faulty (``instances.reportHostAsFaulty``)."""
        return _repair.repair_node(self.scope, node, dry_run)

    def reboot_node(self, node: NodeInfo, dry_run: bool = False) -> Ensured:
        """Reset the node's VM (``instances.reset``): a reboot, which resets every GPU."""
        return _reboot.reboot_node(self.scope, node, dry_run)

    def subblock_health(self, pool: str) -> list[SubBlockHealth]:
        """The sub-blocks of the pool's reservation (its block) with their ``healthInfo``
        (``reservationBlocks``/``reservationSubBlocks``), keyed by ``physicalTopology``."""
        return _subblocks.subblock_health(self.scope, pool)

    def reservation_health(self, pool: str) -> ReservationHealth:
        """The same sub-blocks, read from the reservation alone (the pool need not exist)."""
        return _subblocks.reservation_health(self.scope, pool)

    def report_faulty_subblock(
        self, pool: str, key: str, reason: str, dry_run: bool = False
    ) -> Ensured:
        """Report a sub-block of the pool's reservation as faulty
        (``reservationSubBlocks.reportFaulty``; its VMs are disrupted at once)."""
        return _subblocks.report_faulty_subblock(self.scope, pool, key, reason, dry_run)
