"""Launch templates for GPU node groups: what a node group cannot say itself.

The template ``<cluster>-<pool>`` carries one EFA interface per network card (as many as
``network.rdma_nics``, at most what the machine type has: EC2's ``DescribeInstanceTypes``
tells), the EFA security group, ``CapacityReservationSpecification`` targeting the pool's
reservation and, for a Capacity Block, ``InstanceMarketOptions.MarketType = capacity-block``.
The template names the instance type (so the node group does not), as EKS's guide to node
groups on Capacity Blocks asks. The first interface is the primary (device index 0); the
others use device index 1 on their own network card, as EC2's EFA documentation lays out p5
instances. An existing template is never changed: differences are reported.
"""

from __future__ import annotations

from typing import Any

from gpufleet.backends.base import EnsureAction, Ensured, ReservationInfo, ResourceStatus
from gpufleet.backends.eks.clients import AwsClients, console_url
from gpufleet.backends.eks.network import NetworkIds
from gpufleet.domain.fleet import Cluster, NodePool
from gpufleet.errors import CatalogError

POOL_LABEL = "gpufleet.io/pool"


def capacity_type(reservation: ReservationInfo) -> str:
    """EKS ``capacityType`` for a reservation: CAPACITY_BLOCK or ON_DEMAND."""
    return "CAPACITY_BLOCK" if reservation.kind == "capacity-block" else "ON_DEMAND"


def template_name(cluster: Cluster, pool: str) -> str:
    return f"{cluster.name}-{pool}"


class EksLaunchTemplates:
    """The launch templates of one cluster's node groups."""

    def __init__(self, clients: AwsClients, cluster: Cluster) -> None:
        self.clients = clients
        self.cluster = cluster
        self.region = cluster.location

    def efa_interfaces(self, spec: NodePool, security_group: str) -> list[dict[str, Any]]:
        """One EFA interface per network card, ``network.rdma_nics`` of them; refused when the
        machine type has fewer EFA interfaces (or none)."""
        nics = self.cluster.network.rdma_nics
        if nics == 0:
            return []
        types = self.clients.call(
            "ec2",
            "describe_instance_types",
            f"read machine type {spec.machine_type}",
            InstanceTypes=[spec.machine_type],
        )["InstanceTypes"]
        info = (types[0] if types else {}).get("NetworkInfo") or {}
        max_efa = (info.get("EfaInfo") or {}).get("MaximumEfaInterfaces", 0)
        cards = info.get("MaximumNetworkCards", 1)
        supported = min(max_efa, cards) if info.get("EfaSupported") else 0
        if nics > supported:
            raise CatalogError(
                f"cluster {self.cluster.name!r}: network.rdma_nics is {nics} but "
                f"{spec.machine_type} supports {supported} "
                "EFA interfaces (one per network card); set rdma_nics to at most that"
            )
        return [
            {
                "NetworkCardIndex": card,
                "DeviceIndex": 0 if card == 0 else 1,
                "InterfaceType": "efa",
                "Groups": [security_group],
                "DeleteOnTermination": True,
            }
            for card in range(nics)
        ]

    def _template(self, pool: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
        name = template_name(self.cluster, pool)
        found = self.clients.call(
            "ec2",
            "describe_launch_templates",
            f"find launch template {name!r}",
            Filters=[{"Name": "launch-template-name", "Values": [name]}],
        )["LaunchTemplates"]
        if not found:
            return None
        template = found[0]
        versions = self.clients.call(
            "ec2",
            "describe_launch_template_versions",
            f"read launch template {name!r}",
            LaunchTemplateId=template["LaunchTemplateId"],
            Versions=["$Default"],
        )["LaunchTemplateVersions"]
        return template, (versions[0] if versions else {})

    def ensure(
        self,
        spec: NodePool,
        reservation: ReservationInfo,
        network: NetworkIds | None,
        dry_run: bool,
    ) -> Ensured:
        name = template_name(self.cluster, spec.name)
        found = self._template(spec.name)
        if found is not None:
            template, version = found
            data: dict[str, Any] = version.get("LaunchTemplateData") or {}
            target = (
                (data.get("CapacityReservationSpecification") or {}).get(
                    "CapacityReservationTarget"
                )
                or {}
            ).get("CapacityReservationId")
            diffs = []
            if target != reservation.name:
                diffs.append(
                    f"launch template reservation: catalog {reservation.name}, cloud {target}"
                )
            efa = [
                n for n in data.get("NetworkInterfaces") or () if n.get("InterfaceType") == "efa"
            ]
            if len(efa) != self.cluster.network.rdma_nics:
                diffs.append(
                    f"EFA interfaces: catalog {self.cluster.network.rdma_nics}, cloud {len(efa)}"
                )
            market = (data.get("InstanceMarketOptions") or {}).get("MarketType")
            want_market = "capacity-block" if reservation.kind == "capacity-block" else None
            if market != want_market:
                diffs.append(f"market type: catalog {want_market}, cloud {market}")
            return self._template_ensured(name, EnsureAction.FOUND, template, tuple(diffs))
        if dry_run:
            return Ensured(
                "launch_template",
                name,
                EnsureAction.WOULD_CREATE,
                ResourceStatus.ABSENT,
                console_url=console_url(
                    self.region, f"ec2/home?region={self.region}#LaunchTemplates:"
                ),
            )
        assert network is not None
        group = network.require_security_group(self.cluster)
        # The instance type belongs in the template (EKS: a Capacity Block node group needs a
        # launch template naming it; the node group then names none).
        data = {
            "InstanceType": spec.machine_type,
            "CapacityReservationSpecification": {
                "CapacityReservationTarget": {"CapacityReservationId": reservation.name}
            },
            "TagSpecifications": [
                {"ResourceType": "instance", "Tags": self._tags(spec.name)},
            ],
        }
        interfaces = self.efa_interfaces(spec, group)
        if interfaces:
            data["NetworkInterfaces"] = interfaces
        else:
            data["SecurityGroupIds"] = [group]
        if reservation.kind == "capacity-block":
            data["InstanceMarketOptions"] = {"MarketType": "capacity-block"}
        template = self.clients.call(
            "ec2",
            "create_launch_template",
            f"create launch template {name!r}",
            LaunchTemplateName=name,
            LaunchTemplateData=data,
            TagSpecifications=[{"ResourceType": "launch-template", "Tags": self._tags(spec.name)}],
        )["LaunchTemplate"]
        return self._template_ensured(name, EnsureAction.CREATED, template, ())

    def _template_ensured(
        self, name: str, action: EnsureAction, template: dict[str, Any], diffs: tuple[str, ...]
    ) -> Ensured:
        tid = template["LaunchTemplateId"]
        return Ensured(
            "launch_template",
            name,
            action,
            ResourceStatus.READY,
            diffs,
            console_url=console_url(
                self.region,
                f"ec2/home?region={self.region}#LaunchTemplateDetails:launchTemplateId={tid}",
            ),
            detail={"id": tid, "version": template.get("DefaultVersionNumber")},
        )

    def _tags(self, pool: str) -> list[dict[str, str]]:
        return [
            {"Key": "gpufleet.io/cluster", "Value": self.cluster.name},
            {"Key": POOL_LABEL, "Value": pool},
        ]
