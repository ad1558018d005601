"""The GPU nodes' extra networks: the RDMA VPC and its per-NIC subnets, and the gVNIC VPC.

A3 Ultra / A4 nodes have, besides their first NIC on the cluster's primary VPC:

- one gVNIC on an extra VPC (named after the catalog's ``network.gvnic`` subnet, holding it);
- ``rdma_nics`` RDMA NICs on one RDMA VPC created with the zone's RoCE network profile
  (``projects/P/global/networkProfiles/<zone>-vpc-roce``), one subnet per NIC.

Both VPCs use MTU 8896, as Google's A3 Ultra / A4 guides do. Each resource is read first and
created only when missing (each insert waited on); an existing one that differs from the
catalog (MTU, profile, CIDR, parent network) is reported, never changed.
"""

from __future__ import annotations

from typing import Any

from gpufleet.backends.base import EnsureAction, Ensured, ResourceStatus
from gpufleet.backends.gke.clients import Scope, call, console, get_or_none, last_segment

RDMA_MTU = 8896


def network_profile(scope: Scope) -> str:
    """The zone's RoCE network profile the RDMA VPC must be created with."""
    return f"projects/{scope.project}/global/networkProfiles/{scope.zone}-vpc-roce"


def network_url(project: str, name: str) -> str:
    return f"projects/{project}/global/networks/{name}"


def _network_console(scope: Scope, name: str) -> str:
    return console(f"networking/networks/details/{name}", scope.project)


def _subnet_console(scope: Scope, name: str) -> str:
    return console(f"networking/subnetworks/details/{scope.gcp_region}/{name}", scope.project)


def ensure_network(scope: Scope, dry_run: bool) -> list[Ensured]:
    """The gVNIC VPC + subnet, then the RDMA VPC + one subnet per NIC (what the catalog has)."""
    net = scope.cluster.network
    out: list[Ensured] = []
    if net.gvnic is not None:
        out.append(_ensure_vpc(scope, net.gvnic.name, profile=None, dry_run=dry_run))
        out.append(_ensure_subnet(scope, net.gvnic, net.gvnic.name, dry_run=dry_run))
    if net.rdma_nics:
        out.append(_ensure_vpc(scope, net.name, profile=network_profile(scope), dry_run=dry_run))
        for subnet in net.subnets:
            out.append(_ensure_subnet(scope, subnet, net.name, dry_run=dry_run))
    return out


def _ensure_vpc(scope: Scope, name: str, profile: str | None, dry_run: bool) -> Ensured:
    from google.cloud import compute_v1

    client = scope.clients.compute("networks")
    url = _network_console(scope, name)
    want = {"mtu": RDMA_MTU, "network_profile": profile}
    existing = get_or_none(
        f"read network {name}",
        "compute.networks.get",
        client.get,
        project=scope.project,
        network=name,
    )
    if existing is not None:
        diffs = []
        if existing.mtu != RDMA_MTU:
            diffs.append(f"network {name} MTU: catalog {RDMA_MTU}, cloud {existing.mtu or 'unset'}")
        if profile and not (existing.network_profile or "").endswith(profile):
            diffs.append(
                f"network {name} network profile: catalog {profile}, cloud "
                f"{existing.network_profile or 'none'} (set only at creation: the RDMA VPC must "
                "be recreated with the zone's RoCE profile)"
            )
        return Ensured(
            "network", name, EnsureAction.FOUND, ResourceStatus.READY, tuple(diffs), url, want
        )
    if dry_run:
        return Ensured(
            "network", name, EnsureAction.WOULD_CREATE, ResourceStatus.ABSENT, (), url, want
        )
    body = compute_v1.Network(name=name, mtu=RDMA_MTU, auto_create_subnetworks=False)
    if profile:
        body.network_profile = profile
    what = f"create network {name}"
    op = call(
        what,
        "compute.networks.create",
        client.insert_unary,
        project=scope.project,
        network_resource=body,
    )
    _wait(scope, op, what)
    return Ensured("network", name, EnsureAction.CREATED, ResourceStatus.READY, (), url, want)


def _ensure_subnet(scope: Scope, subnet: Any, network: str, dry_run: bool) -> Ensured:
    from google.cloud import compute_v1

    client = scope.clients.compute("subnetworks")
    region = scope.gcp_region
    url = _subnet_console(scope, subnet.name)
    detail = {"network": network, "cidr": subnet.cidr, "region": region}
    existing = get_or_none(
        f"read subnet {subnet.name}",
        "compute.subnetworks.get",
        client.get,
        project=scope.project,
        region=region,
        subnetwork=subnet.name,
    )
    if existing is not None:
        diffs = []
        if existing.ip_cidr_range != subnet.cidr:
            diffs.append(
                f"subnet {subnet.name} CIDR: catalog {subnet.cidr}, cloud {existing.ip_cidr_range}"
            )
        if last_segment(existing.network) != network:
            diffs.append(
                f"subnet {subnet.name} network: catalog {network}, cloud "
                f"{last_segment(existing.network)}"
            )
        return Ensured(
            "subnet",
            subnet.name,
            EnsureAction.FOUND,
            ResourceStatus.READY,
            tuple(diffs),
            url,
            detail,
        )
    if dry_run:
        return Ensured(
            "subnet", subnet.name, EnsureAction.WOULD_CREATE, ResourceStatus.ABSENT, (), url, detail
        )
    body = compute_v1.Subnetwork(
        name=subnet.name,
        network=network_url(scope.project, network),
        ip_cidr_range=subnet.cidr,
        region=region,
    )
    what = f"create subnet {subnet.name}"
    op = call(
        what,
        "compute.subnetworks.create",
        client.insert_unary,
        project=scope.project,
        region=region,
        subnetwork_resource=body,
    )
    _wait(scope, op, what)
    return Ensured(
        "subnet", subnet.name, EnsureAction.CREATED, ResourceStatus.READY, (), url, detail
    )


def _wait(scope: Scope, op: Any, what: str) -> None:
    scope.clients.wait_compute(
        op,
        what,
        poll_interval=scope.poll_interval,
        timeout=scope.operation_timeout,
        project=scope.project,
    )
