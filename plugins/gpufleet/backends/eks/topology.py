"""The provider's view of an EKS pool's racks (``topology_api``), from EC2 topology.

Design: docs/design/topology.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpufleet.backends.base import Ensured, ResourceStatus
from gpufleet.backends.eks.clients import AwsApiError, AwsClients
from gpufleet.backends.eks.repair import CLUSTER_TAG, NODEGROUP_TAG
from gpufleet.backends.topology_api import (
    DEGRADED,
    HEALTHY,
    REPORT_KIND,
    UNSUPPORTED,
    ReservationHealth,
    SubBlockHealth,
    split_key,
)
from gpufleet.errors import BackendError

if TYPE_CHECKING:
    from gpufleet.domain.fleet import Cluster

BATCH = 100  # instance ids per DescribeInstanceTopology / DescribeInstanceStatus request
WHY_UNSUPPORTED = (
    "EC2 and EKS have no API to report a faulty network node, rack or Capacity Block: nothing "
    "was sent. gpufleet keeps the sub-block's nodes out of service; to have AWS look at it, "
    "open an AWS Support case naming the network node and its instances (detail of "
    "subblock_health)"
)


WHY_NO_HEALTH = (
    "EC2 reports no host health of a capacity reservation before instances run on it: "
    "DescribeCapacityReservationTopology gives its network nodes only (the instances' system "
    "status checks give health once they run)"
)


@dataclass(frozen=True)
class ReservationTopology:
    """Where a capacity reservation's capacity sits: its network nodes, top layer first (1 to
    3 of them; empty when the instance type has no topology or the reservation is neither
    active nor pending)."""

    reservation: str
    network_nodes: tuple[str, ...]
    instance_type: str | None = None
    state: str | None = None
    zone: str | None = None


def reservation_topology(clients: AwsClients, reservation: str) -> ReservationTopology:
    what = f"read the topology of capacity reservation {reservation!r}"
    try:
        found = clients.call(
            "ec2",
            "describe_capacity_reservation_topology",
            what,
            CapacityReservationIds=[reservation],
        ).get("CapacityReservations", [])
    except AwsApiError as exc:
        if exc.code.startswith("InvalidCapacityReservationId"):
            raise BackendError(
                f"capacity reservation {reservation!r} does not exist in {clients.region} "
                f"(AWS: {exc.code}); check the id in the catalog and the account"
            ) from exc
        raise
    for item in found:
        if item.get("CapacityReservationId") == reservation:
            return ReservationTopology(
                reservation,
                tuple(item.get("NetworkNodes") or ()),
                item.get("InstanceType"),
                item.get("State"),
                item.get("AvailabilityZone"),
            )
    raise BackendError(f"{what}: EC2 did not report it (it answered {len(found)} others)")


def reservation_health(clients: AwsClients, cluster: Cluster, pool: str) -> ReservationHealth:
    """The reservation's network nodes, and no sub-blocks (see the module)."""
    topo = reservation_topology(clients, cluster.pool(pool).reservation.name)
    detail = {
        "network_nodes": list(topo.network_nodes),
        "instance_type": topo.instance_type,
        "state": topo.state,
        "zone": topo.zone,
    }
    return ReservationHealth(topo.reservation, None, None, WHY_NO_HEALTH, detail)


def pool_instances(clients: AwsClients, cluster: Cluster, pool: str) -> list[str]:
    """The ids of the running instances of ``pool``'s managed node group."""
    reservations = clients.pages(
        "ec2",
        "describe_instances",
        "Reservations",
        f"list the instances of node group {pool}",
        Filters=[
            {"Name": f"tag:{CLUSTER_TAG}", "Values": [cluster.name]},
            {"Name": f"tag:{NODEGROUP_TAG}", "Values": [pool]},
            {"Name": "instance-state-name", "Values": ["running"]},
        ],
    )
    return sorted(i["InstanceId"] for r in reservations for i in r.get("Instances", []))


def _batches(ids: list[str]) -> list[list[str]]:
    return [ids[i : i + BATCH] for i in range(0, len(ids), BATCH)]


def instance_nodes(clients: AwsClients, ids: list[str]) -> dict[str, tuple[str, ...]]:
    """Instance id -> its network nodes, top layer first (empty when EC2 gives none)."""
    out: dict[str, tuple[str, ...]] = {}
    for batch in _batches(ids):
        for item in clients.pages(
            "ec2",
            "describe_instance_topology",
            "Instances",
            f"read the topology of {len(batch)} instances",
            InstanceIds=batch,
        ):
            out[item["InstanceId"]] = tuple(item.get("NetworkNodes") or ())
    return out


def impaired(clients: AwsClients, ids: list[str]) -> set[str]:
    """The instances whose EC2 system status check (the host's) is impaired."""
    out: set[str] = set()
    for batch in _batches(ids):
        for item in clients.pages(
            "ec2",
            "describe_instance_status",
            "InstanceStatuses",
            f"read the status checks of {len(batch)} instances",
            InstanceIds=batch,
        ):
            if (item.get("SystemStatus") or {}).get("Status") == "impaired":
                out.add(item["InstanceId"])
    return out


def subblock_health(clients: AwsClients, cluster: Cluster, pool: str) -> list[SubBlockHealth]:
    """Hosts per deepest network node of ``pool``'s running instances, by key (see module)."""
    spec = cluster.pool(pool)
    reserved = reservation_topology(clients, spec.reservation.name)
    ids = pool_instances(clients, cluster, pool)
    nodes = instance_nodes(clients, ids) if ids else {}
    bad = impaired(clients, ids) if ids else set()
    groups: dict[tuple[str, ...], list[str]] = {}
    for instance in ids:
        path = nodes.get(instance, ())
        if len(path) >= 2:
            groups.setdefault(path, []).append(instance)
    out = []
    for path, members in groups.items():
        degraded = sum(1 for m in members if m in bad)
        detail: dict[str, Any] = {
            "reservation": reserved.reservation,
            "instances": members,
            "network_nodes": list(path),
            "reservation_network_nodes": list(reserved.network_nodes),
        }
        if reserved.network_nodes:
            depth = len(reserved.network_nodes)
            detail["in_reservation"] = path[:depth] == reserved.network_nodes
        out.append(
            SubBlockHealth(
                block=path[-2],
                subblock=path[-1],
                status=DEGRADED if degraded else HEALTHY,
                healthy_hosts=len(members) - degraded,
                degraded_hosts=degraded,
                hosts=len(members),
                detail=detail,
            )
        )
    return sorted(out, key=lambda h: h.key)


def report_faulty_subblock(pool: str, key: str, reason: str) -> Ensured:
    """``unsupported``: EC2 and EKS have no call for it (see the module); nothing is sent."""
    split_key(key)
    detail = {"pool": pool, "reason": reason, "why": WHY_UNSUPPORTED}
    return Ensured(REPORT_KIND, key, UNSUPPORTED, ResourceStatus.ABSENT, (), None, detail)
