"""GPU node groups: the EKS managed node group of a pool, on its launch template
(``launch_templates.py``: EFA interfaces, capacity reservation target).

The node group runs with ``capacityType`` CAPACITY_BLOCK (Capacity Block) or ON_DEMAND
(capacity reservation), a fixed size (min = max = desired = the pool's nodes), the subnets in
the reservation's zone, the NVIDIA AL2023 AMI, the pool label and the taints new nodes come up
with. An existing group is never changed: differences (instance type, size, capacity type,
reservation) are reported.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpufleet.backends.base import (
    EnsureAction,
    Ensured,
    NodePoolInfo,
    PoolDeletion,
    ReservationInfo,
    ResourceStatus,
    Taint,
)
from gpufleet.backends.eks.clients import AwsApiError, AwsClients, console_url, not_found
from gpufleet.backends.eks.launch_templates import POOL_LABEL, EksLaunchTemplates, capacity_type
from gpufleet.backends.eks.network import NetworkIds
from gpufleet.domain.fleet import Cluster, NodePool
from gpufleet.errors import BackendError

NODEGROUP_STATUS = {
    "CREATING": ResourceStatus.CREATING,
    "ACTIVE": ResourceStatus.READY,
    "UPDATING": ResourceStatus.UPDATING,
    "DELETING": ResourceStatus.DELETING,
    "CREATE_FAILED": ResourceStatus.ERROR,
    "DELETE_FAILED": ResourceStatus.ERROR,
    "DEGRADED": ResourceStatus.ERROR,
}
TAINT_EFFECTS = {
    "NoSchedule": "NO_SCHEDULE",
    "NoExecute": "NO_EXECUTE",
    "PreferNoSchedule": "PREFER_NO_SCHEDULE",
}
GPU_AMI_TYPE = "AL2023_x86_64_NVIDIA"


def eks_taints(taints: tuple[Taint, ...]) -> list[dict[str, str]]:
    out = []
    for t in taints:
        if t.effect not in TAINT_EFFECTS:
            raise BackendError(
                f"taint {t.key}: effect {t.effect!r} is not one of {', '.join(TAINT_EFFECTS)}"
            )
        item = {"key": t.key, "effect": TAINT_EFFECTS[t.effect]}
        if t.value is not None:
            item["value"] = t.value
        out.append(item)
    return out


class EksNodeGroups:
    """Managed node groups (on their launch templates) of one cluster."""

    def __init__(self, clients: AwsClients, cluster: Cluster) -> None:
        self.clients = clients
        self.cluster = cluster
        self.region = cluster.location
        self.templates = EksLaunchTemplates(clients, cluster)

    def url(self, pool: str) -> str:
        return console_url(
            self.region,
            f"eks/home?region={self.region}#/clusters/{self.cluster.name}/nodegroups/{pool}",
        )

    # -- node group ------------------------------------------------------------------------

    def describe(self, pool: str) -> dict[str, Any] | None:
        try:
            return self.clients.call(
                "eks",
                "describe_nodegroup",
                f"read node group {pool!r}",
                clusterName=self.cluster.name,
                nodegroupName=pool,
            )["nodegroup"]
        except AwsApiError as exc:
            if not_found(exc):
                return None
            raise

    def ensure(
        self,
        spec: NodePool,
        reservation: ReservationInfo,
        network_ids: Callable[[], NetworkIds],
        dry_run: bool,
        taints: tuple[Taint, ...],
    ) -> Ensured:
        found = self.describe(spec.name)
        if found is not None:
            return self.found(spec, reservation, found)
        if reservation.machine_type != spec.machine_type:
            raise BackendError(
                f"node pool {spec.name!r} is {spec.machine_type} but reservation "
                f"{reservation.name} holds {reservation.machine_type}; fix the catalog"
            )
        network = None if dry_run else network_ids()
        template = self.templates.ensure(spec, reservation, network, dry_run)
        if dry_run:
            return Ensured(
                "node_pool",
                spec.name,
                EnsureAction.WOULD_CREATE,
                ResourceStatus.ABSENT,
                console_url=self.url(spec.name),
                detail={
                    "launch_template": template.to_dict(),
                    "capacity_type": capacity_type(reservation),
                },
            )
        assert network is not None
        iam = self.cluster.iam
        assert iam is not None
        params: dict[str, Any] = {  # CreateNodegroup's request
            "clusterName": self.cluster.name,
            "nodegroupName": spec.name,
            "scalingConfig": {
                "minSize": spec.nodes,
                "maxSize": spec.nodes,
                "desiredSize": spec.nodes,
            },
            "subnets": network.subnet_ids(self.cluster, zone=reservation.zone),
            "amiType": GPU_AMI_TYPE,
            "nodeRole": iam.node_role_arn,
            "capacityType": capacity_type(reservation),
            "labels": {POOL_LABEL: spec.name},
            "launchTemplate": {
                "id": template.detail["id"],
                "version": str(template.detail.get("version") or 1),
            },
            "tags": {"gpufleet.io/cluster": self.cluster.name, POOL_LABEL: spec.name},
        }
        if taints:
            params["taints"] = eks_taints(taints)
        if self.cluster.kubernetes_version:
            params["version"] = self.cluster.kubernetes_version
        try:
            created = self.clients.call(
                "eks", "create_nodegroup", f"create node group {spec.name!r}", **params
            )["nodegroup"]
        except AwsApiError as exc:
            if exc.code != "ResourceInUseException":
                raise
            again = self.describe(spec.name)
            if again is None:
                raise
            return self.found(spec, reservation, again)
        return Ensured(
            "node_pool",
            spec.name,
            EnsureAction.CREATED,
            NODEGROUP_STATUS.get(created.get("status", ""), ResourceStatus.CREATING),
            console_url=self.url(spec.name),
            detail={"launch_template": template.to_dict(), "capacity_type": params["capacityType"]},
        )

    def template_data(self, found: dict[str, Any]) -> dict[str, Any]:
        """The LaunchTemplateData of the template version a node group runs on."""
        ref = found.get("launchTemplate") or {}
        if not ref.get("id"):
            return {}
        versions = self.clients.call(
            "ec2",
            "describe_launch_template_versions",
            f"read launch template of node group {found.get('nodegroupName')!r}",
            LaunchTemplateId=ref["id"],
            Versions=[str(ref.get("version") or "$Default")],
        )["LaunchTemplateVersions"]
        return (versions[0] if versions else {}).get("LaunchTemplateData") or {}

    @staticmethod
    def instance_types(found: dict[str, Any], data: dict[str, Any]) -> list[str]:
        """The node group's instance types, or its launch template's (EKS reports none when
        the template names the type)."""
        types = list(found.get("instanceTypes") or [])
        if not types and data.get("InstanceType"):
            types = [data["InstanceType"]]
        return types

    def found(self, spec: NodePool, reservation: ReservationInfo, found: dict[str, Any]) -> Ensured:
        diffs = []
        data = self.template_data(found)
        types = self.instance_types(found, data)
        if types != [spec.machine_type]:
            diffs.append(f"instance type: catalog {spec.machine_type}, cloud {', '.join(types)}")
        scaling = found.get("scalingConfig") or {}
        size = (scaling.get("minSize"), scaling.get("maxSize"), scaling.get("desiredSize"))
        if size != (spec.nodes,) * 3:
            diffs.append(
                f"size: catalog {spec.nodes} nodes, cloud min {size[0]} max {size[1]} desired "
                f"{size[2]}"
            )
        want = capacity_type(reservation)
        if found.get("capacityType") != want:
            diffs.append(f"capacity type: catalog {want}, cloud {found.get('capacityType')}")
        target = (
            (data.get("CapacityReservationSpecification") or {}).get("CapacityReservationTarget")
            or {}
        ).get("CapacityReservationId")
        if target != reservation.name:
            diffs.append(f"reservation: catalog {reservation.name}, cloud {target}")
        return Ensured(
            "node_pool",
            spec.name,
            EnsureAction.FOUND,
            NODEGROUP_STATUS.get(found.get("status", ""), ResourceStatus.ERROR),
            tuple(diffs),
            console_url=self.url(spec.name),
            detail={"capacity_type": found.get("capacityType"), "reservation": target},
        )

    def info(self, spec: NodePool) -> NodePoolInfo:
        found = self.describe(spec.name)
        if found is None:
            return NodePoolInfo(
                spec.name,
                self.cluster.name,
                spec.machine_type,
                0,
                spec.reservation.name,
                ResourceStatus.ABSENT,
                console_url=self.url(spec.name),
            )
        scaling = found.get("scalingConfig") or {}
        data = self.template_data(found)
        types = self.instance_types(found, data) or ["unknown"]
        target = (
            (data.get("CapacityReservationSpecification") or {}).get("CapacityReservationTarget")
            or {}
        ).get("CapacityReservationId")
        return NodePoolInfo(
            name=spec.name,
            cluster=self.cluster.name,
            machine_type=types[0],
            node_count=int(scaling.get("desiredSize") or 0),
            reservation=target,
            status=NODEGROUP_STATUS.get(found.get("status", ""), ResourceStatus.ERROR),
            console_url=self.url(spec.name),
        )

    def delete(self, pool: str) -> bool:
        try:
            self.clients.call(
                "eks",
                "delete_nodegroup",
                f"delete node group {pool!r}",
                clusterName=self.cluster.name,
                nodegroupName=pool,
            )
        except AwsApiError as exc:
            if not_found(exc):
                return False
            raise
        return True

    def ensure_deleted(self, pool: str, operation: str | None) -> PoolDeletion:
        """Delete-if-present, then wait until the node group is gone (``describe_nodegroup``
        answers ResourceNotFound); DELETE_FAILED after our delete is a failed delete, with
        the node group's health issues as the reason. Without ``operation`` (nothing of ours
        under way) a DELETE_FAILED node group is deleted again."""
        url = self.url(pool)
        found = self.describe(pool)
        if found is None:
            return PoolDeletion(pool, ResourceStatus.ABSENT, operation, console_url=url)
        status = found.get("status", "")
        if status == "DELETING":
            return PoolDeletion(pool, ResourceStatus.DELETING, operation, console_url=url)
        if operation and status == "DELETE_FAILED":
            issues = (found.get("health") or {}).get("issues") or []
            why = "; ".join(f"{i.get('code')}: {i.get('message')}" for i in issues)
            return PoolDeletion(
                pool,
                ResourceStatus.ERROR,
                operation,
                message=why or "DELETE_FAILED",
                console_url=url,
            )
        if not self.delete(pool):
            return PoolDeletion(pool, ResourceStatus.ABSENT, console_url=url)
        return PoolDeletion(
            pool, ResourceStatus.DELETING, "delete_nodegroup", requested=True, console_url=url
        )
