"""Reboot a GPU node on EKS: ``ec2:RebootInstances`` on its instance.

Design: docs/design/node-lifecycle.md.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from gpufleet.backends.base import EnsureAction, Ensured, NodeInfo, ResourceStatus
from gpufleet.backends.eks.clients import AwsClients, tag
from gpufleet.backends.eks.repair import GONE_STATES, describe, locate, node_group_of
from gpufleet.errors import BackendError

if TYPE_CHECKING:
    from gpufleet.domain.fleet import Cluster

log = logging.getLogger(__name__)

REBOOT_TAG = "gpufleet.io/rebooted-at"
# how long after a reboot a second one is "found": a GPU node's reboot, until its kubelet is
# back, takes minutes
REBOOT_WINDOW_S = 600.0


def now() -> datetime:
    """The time a reboot is stamped with (tests replace it)."""
    return datetime.now(UTC)


def reboot_node(clients: AwsClients, cluster: Cluster, node: NodeInfo, dry_run: bool) -> Ensured:
    """Reboot the instance behind ``node``, unless gpufleet rebooted it within the window."""
    zone, instance_id, url = locate(clients, node, "reboot")
    detail: dict[str, Any] = {"instance": instance_id, "zone": zone}
    instance = describe(clients, node, instance_id)
    state = (instance.get("State") or {}).get("Name", "")
    detail["state"] = state
    detail["node_group"] = node_group_of(
        instance, cluster, node, ": refusing to reboot it. Reboot it by hand if it is yours"
    )
    if state != "running":
        raise BackendError(
            f"node {node.name!r}: instance {instance_id} is {state}, not running: "
            + (
                "its node group is replacing it (a repair is under way), nothing to reboot"
                if state in GONE_STATES
                else "only a running instance is rebooted; start it, or repair the node"
            )
        )
    at = now()
    stamp = _rebooted_at(instance)
    if stamp is not None and abs((at - stamp).total_seconds()) < REBOOT_WINDOW_S:
        detail["rebooted_at"] = _iso(stamp)
        return Ensured(
            "reboot", node.name, EnsureAction.FOUND, ResourceStatus.UPDATING, (), url, detail
        )
    if dry_run:
        return Ensured(
            "reboot", node.name, EnsureAction.WOULD_CREATE, ResourceStatus.ABSENT, (), url, detail
        )
    clients.call(
        "ec2",
        "reboot_instances",
        f"reboot instance {instance_id} of node {node.name}",
        InstanceIds=[instance_id],
    )
    detail["rebooted_at"] = _iso(at)
    try:
        clients.call(
            "ec2",
            "create_tags",
            f"tag instance {instance_id} of node {node.name} with its reboot time",
            Resources=[instance_id],
            Tags=[{"Key": REBOOT_TAG, "Value": detail["rebooted_at"]}],
        )
    except BackendError as exc:
        # the reboot was sent: it stands; only a second call within the window may repeat it
        log.warning("node %s: rebooted, but not tagged %s: %s", node.name, REBOOT_TAG, exc)
        detail["untagged"] = str(exc)
    return Ensured(
        "reboot", node.name, EnsureAction.CREATED, ResourceStatus.UPDATING, (), url, detail
    )


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _rebooted_at(instance: dict[str, Any]) -> datetime | None:
    """When gpufleet last rebooted the instance (its tag), or None (no tag, or one unreadable)."""
    value = tag(instance, REBOOT_TAG)
    if not value:
        return None
    try:
        stamp = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)
