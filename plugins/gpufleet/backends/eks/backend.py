"""``EksCloudBackend``: the ``CloudBackend`` of one ``provider: eks`` cluster, on boto3.

Reservations (EC2 capacity reservations and Capacity Blocks), the network (VPC, subnets, EFA
security group), the EKS cluster and Airflow's access entry, GPU node groups on EFA launch
templates, FSx for Lustre, node repair (``repair.py``: terminate the instance, the node
group replaces it), node reboot (``reboot.py``: reboot the instance) and the provider's view of
the pools' racks (``topology.py``: EC2 topology; EC2 has no call to report a faulty one). Each
``ensure_*`` reads first, creates only what is missing, reports differences from the catalog
and never changes what exists.
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
from gpufleet.backends.eks.clients import AwsApiError, AwsClients, not_found
from gpufleet.backends.eks.cluster import EksControlPlane
from gpufleet.backends.eks.fsx import EksFilesystems
from gpufleet.backends.eks.network import EksNetwork, check_network
from gpufleet.backends.eks.nodegroups import EksNodeGroups
from gpufleet.backends.eks.reboot import reboot_node
from gpufleet.backends.eks.repair import repair_node
from gpufleet.backends.eks.topology import ReservationTopology
from gpufleet.backends.eks.topology import report_faulty_subblock as _report_unsupported
from gpufleet.backends.eks.topology import reservation_health as _reservation_health
from gpufleet.backends.eks.topology import reservation_topology as _reservation_topology
from gpufleet.backends.eks.topology import subblock_health as _subblock_health
from gpufleet.backends.topology_api import ReservationHealth, SubBlockHealth
from gpufleet.domain.fleet import Cluster, Region
from gpufleet.errors import BackendError, CatalogError

RESERVATION_KIND = {"capacity-block": "capacity-block", "default": "capacity-reservation"}


class EksCloudBackend:
    """The AWS control plane of one catalog cluster (``provider: eks``) in ``cluster.location``.

    ``clients`` replaces how boto3 clients are built (tests pass none: boto3 follows
    ``AWS_ENDPOINT_URL``)."""

    def __init__(self, cluster: Cluster, region: Region, *, clients: AwsClients | None = None):
        if cluster.provider != "eks":
            raise CatalogError(f"cluster {cluster.name!r} is provider {cluster.provider}, not eks")
        self.cluster = cluster
        self.region = region
        self.clients = clients or AwsClients(cluster.location, cluster.connections.cloud)
        self.network = EksNetwork(self.clients, cluster)
        self.control_plane = EksControlPlane(self.clients, cluster)
        self.node_groups = EksNodeGroups(self.clients, cluster)
        self.filesystems = EksFilesystems(self.clients, cluster)

    # -- reservations ----------------------------------------------------------------------

    def get_reservation(self, name: str) -> ReservationInfo:
        try:
            found = self.clients.call(
                "ec2",
                "describe_capacity_reservations",
                f"read capacity reservation {name!r}",
                CapacityReservationIds=[name],
            )["CapacityReservations"]
        except AwsApiError as exc:
            if not_found(exc) or exc.code.startswith("InvalidCapacityReservationId"):
                raise BackendError(
                    f"capacity reservation {name!r} does not exist in {self.cluster.location} "
                    f"(AWS: {exc.code}); check the id in the catalog and the account"
                ) from exc
            raise
        if not found:
            raise BackendError(
                f"capacity reservation {name!r} does not exist in {self.cluster.location}"
            )
        res = found[0]
        total = int(res.get("TotalInstanceCount") or 0)
        available = int(res.get("AvailableInstanceCount") or 0)
        return ReservationInfo(
            name=res.get("CapacityReservationId", name),
            machine_type=res.get("InstanceType", ""),
            count=total,
            in_use=max(total - available, 0),
            zone=res.get("AvailabilityZone"),
            blocks=None,
            kind=RESERVATION_KIND.get(
                res.get("ReservationType") or "default", "capacity-reservation"
            ),
            status=res.get("State", "unknown"),
        )

    # -- network and control plane ---------------------------------------------------------

    def ensure_network(self, dry_run: bool = False) -> list[Ensured]:
        return self.network.ensure(dry_run)

    def ensure_cluster(self, dry_run: bool = False) -> Ensured:
        check_network(self.cluster)
        return self.control_plane.ensure(None if dry_run else self.network.ids(), dry_run)

    def get_cluster(self) -> ClusterInfo:
        return self.control_plane.info()

    def ensure_access_entry(self, dry_run: bool = False) -> Ensured:
        """Airflow's access entry with cluster admin (``cluster_credentials`` calls it too)."""
        return self.control_plane.ensure_access_entry(dry_run)

    def cluster_credentials(self) -> ClusterCredentials:
        return self.control_plane.credentials()

    # -- node pools ------------------------------------------------------------------------

    def ensure_node_pool(
        self, pool: str, dry_run: bool = False, taints: tuple[Taint, ...] = ()
    ) -> Ensured:
        spec = self.cluster.pool(pool)
        reservation = self.get_reservation(spec.reservation.name)
        # the network is read only when something must be created
        return self.node_groups.ensure(spec, reservation, self.network.ids, dry_run, taints)

    def get_node_pool(self, pool: str) -> NodePoolInfo:
        return self.node_groups.info(self.cluster.pool(pool))

    def delete_node_pool(self, pool: str) -> bool:
        return self.node_groups.delete(pool)

    def ensure_node_pool_deleted(self, pool: str, operation: str | None = None) -> PoolDeletion:
        return self.node_groups.ensure_deleted(pool, operation)

    def repair_node(self, node: NodeInfo, dry_run: bool = False) -> Ensured:
        """Terminate the node's instance so its managed node group replaces it from the same
        capacity reservation or Capacity Block (``repair.py``)."""
        return repair_node(self.clients, self.cluster, node, dry_run)

    def reboot_node(self, node: NodeInfo, dry_run: bool = False) -> Ensured:
        """Reboot the node's instance (``ec2:RebootInstances``), which resets every GPU; the
        instance stays in its node group and reservation (``reboot.py``)."""
        return reboot_node(self.clients, self.cluster, node, dry_run)

    # -- the provider's view of the racks (topology.py) -------------------------------------

    def reservation_topology(self, pool: str) -> ReservationTopology:
        """Where the pool's capacity reservation sits before launch
        (``ec2:DescribeCapacityReservationTopology``): 1 to 3 network nodes."""
        return _reservation_topology(self.clients, self.cluster.pool(pool).reservation.name)

    def reservation_health(self, pool: str) -> ReservationHealth:
        """The pool's reservation's network nodes and no sub-blocks: EC2 reports no host
        health before instances run (``ec2:DescribeCapacityReservationTopology``)."""
        return _reservation_health(self.clients, self.cluster, pool)

    def subblock_health(self, pool: str) -> list[SubBlockHealth]:
        """Hosts per network node of the pool's running instances
        (``ec2:DescribeInstanceTopology``), degraded where EC2's system status check of the
        host is impaired (``ec2:DescribeInstanceStatus``)."""
        return _subblock_health(self.clients, self.cluster, pool)

    def report_faulty_subblock(
        self, pool: str, key: str, reason: str, dry_run: bool = False
    ) -> Ensured:
        """``unsupported``: EC2 and EKS have no call to report a faulty rack; nothing is
        sent, whatever ``dry_run`` says."""
        self.cluster.pool(pool)
        return _report_unsupported(pool, key, reason)

    # -- filesystems -----------------------------------------------------------------------

    def ensure_filesystem(self, name: str, dry_run: bool = False) -> Ensured:
        self.cluster.filesystem(name)
        if dry_run:
            return self.filesystems.ensure(name, None, None, dry_run=True)
        zone = self._node_zone(name)
        return self.filesystems.ensure(name, self.network.ids(), zone, dry_run=False)

    def get_filesystem(self, name: str) -> FilesystemInfo:
        return self.filesystems.info(name)

    def _node_zone(self, name: str) -> str | None:
        """The zone of the reservation of the first pool that mounts ``name`` (the catalog's
        zone, else the cloud's), or the first subnet's zone when no pool mounts it."""
        for pool in self.cluster.node_pools:
            if pool.filesystem != name:
                continue
            for res in self.region.reservations:
                if res.name == pool.reservation.name and res.zone:
                    return res.zone
            return self.get_reservation(pool.reservation.name).zone
        return self.cluster.network.subnets[0].zone if self.cluster.network.subnets else None
