"""Repair a GPU node on EKS: terminate its EC2 instance so its managed node group replaces it.

Design: docs/design/node-lifecycle.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpufleet.backends.base import EnsureAction, Ensured, NodeInfo, ResourceStatus
from gpufleet.backends.eks.clients import AwsApiError, AwsClients, console_url, not_found, tag
from gpufleet.errors import BackendError

if TYPE_CHECKING:
    from gpufleet.domain.fleet import Cluster

PROVIDER_PREFIX = "aws:///"
CLUSTER_TAG = "eks:cluster-name"
NODEGROUP_TAG = "eks:nodegroup-name"
GONE_STATES = ("shutting-down", "terminated")


def parse_provider_id(node: NodeInfo, verb: str = "replace") -> tuple[str, str]:
    """(zone, instance id) of an EKS node, from ``aws:///ZONE/i-...``; ``verb`` is what the
    caller does to the instance (``replace``, ``reboot``), for the refusals."""
    pid = node.provider_id
    if not pid:
        raise BackendError(
            f"node {node.name!r} has no spec.providerID: cannot tell which EC2 instance to "
            f"{verb}. Check that the node was registered by its kubelet on EC2 (kubectl get "
            "node -o jsonpath='{.spec.providerID}')"
        )
    if not pid.startswith(PROVIDER_PREFIX):
        raise BackendError(
            f"node {node.name!r} has providerID {pid!r}, not an EC2 instance "
            f"({PROVIDER_PREFIX}ZONE/i-...): the EKS backend acts only on the nodes of its "
            "own cluster"
        )
    parts = pid[len(PROVIDER_PREFIX) :].split("/")
    if len(parts) != 2 or not parts[0] or not parts[1].startswith("i-"):
        raise BackendError(
            f"node {node.name!r} has providerID {pid!r}: expected {PROVIDER_PREFIX}ZONE/i-..."
        )
    return parts[0], parts[1]


def locate(clients: AwsClients, node: NodeInfo, verb: str) -> tuple[str, str, str]:
    """(zone, instance id, console URL) of ``node``'s instance, refused before any call when
    its providerID is missing, not an EC2 instance, or of another region."""
    zone, instance_id = parse_provider_id(node, verb)
    if not zone.startswith(clients.region):
        raise BackendError(
            f"node {node.name!r} is instance {instance_id} in zone {zone}, outside the catalog "
            f"cluster's region {clients.region}: refusing to act on another region's instance"
        )
    url = console_url(
        clients.region,
        f"ec2/home?region={clients.region}#InstanceDetails:instanceId={instance_id}",
    )
    return zone, instance_id, url


def node_group_of(instance: dict[str, Any], cluster: Cluster, node: NodeInfo, refusal: str) -> str:
    """The managed node group of cluster ``cluster`` that ``instance`` belongs to, from the
    tags EKS puts on its instances; an instance of another cluster, or of no node group, is
    refused with ``refusal`` (what is not done, and what to do instead)."""
    owner, group = tag(instance, CLUSTER_TAG), tag(instance, NODEGROUP_TAG)
    if owner != cluster.name or not group:
        raise BackendError(
            f"node {node.name!r}: instance {instance.get('InstanceId')} is "
            + (f"tagged {CLUSTER_TAG}={owner}" if owner else f"not tagged {CLUSTER_TAG}")
            + ("" if group else f" and has no {NODEGROUP_TAG} tag")
            + f", so it is not an instance of a managed node group of cluster {cluster.name!r}"
            + refusal
        )
    return group


def repair_node(clients: AwsClients, cluster: Cluster, node: NodeInfo, dry_run: bool) -> Ensured:
    """Terminate the instance behind ``node`` (its node group replaces it), unless it is
    already going or gone."""
    zone, instance_id, url = locate(clients, node, "replace")
    detail: dict[str, Any] = {"instance": instance_id, "zone": zone}
    instance = describe(clients, node, instance_id)
    state = (instance.get("State") or {}).get("Name", "")
    detail["state"] = state
    if state in GONE_STATES:
        return Ensured(
            "repair", node.name, EnsureAction.FOUND, ResourceStatus.UPDATING, (), url, detail
        )
    group = node_group_of(
        instance,
        cluster,
        node,
        " that would be replaced: refusing to terminate it. Replace it by hand if it is yours",
    )
    detail["node_group"] = group
    if dry_run:
        return Ensured(
            "repair", node.name, EnsureAction.WOULD_CREATE, ResourceStatus.ABSENT, (), url, detail
        )
    answer = clients.call(
        "ec2",
        "terminate_instances",
        f"terminate instance {instance_id} of node {node.name} (node group {group})",
        InstanceIds=[instance_id],
    )
    changes = answer.get("TerminatingInstances") or [{}]
    detail["state"] = (changes[0].get("CurrentState") or {}).get("Name", "shutting-down")
    return Ensured(
        "repair", node.name, EnsureAction.CREATED, ResourceStatus.UPDATING, (), url, detail
    )


def describe(clients: AwsClients, node: NodeInfo, instance_id: str) -> dict[str, Any]:
    """The instance as ``ec2:DescribeInstances`` reports it; a clear error when it is gone."""
    try:
        reservations = clients.call(
            "ec2",
            "describe_instances",
            f"read instance {instance_id} of node {node.name}",
            InstanceIds=[instance_id],
        ).get("Reservations", [])
    except AwsApiError as exc:
        if not_found(exc) or exc.code.startswith("InvalidInstanceID"):
            raise BackendError(
                f"node {node.name!r}: instance {instance_id} does not exist (AWS: {exc.code}); "
                "the node may have been replaced already (list the nodes again)"
            ) from exc
        raise
    for res in reservations:
        for instance in res.get("Instances", []):
            if instance.get("InstanceId") == instance_id:
                return instance
    raise BackendError(
        f"node {node.name!r}: instance {instance_id} does not exist in {clients.region}; the "
        "node may have been replaced already (list the nodes again)"
    )
