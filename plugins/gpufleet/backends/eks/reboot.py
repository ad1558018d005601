"""Reboot a GPU node on EKS: ``ec2:RebootInstances`` on its instance.

NVIDIA's Xid catalog asks for a node reboot after an Xid 79 (a GPU fell off the bus), and for a
GPU reset after a pending row remap or an Xid of its ``RESET_GPU`` bucket; gpufleet resets the
GPUs of a drained node by rebooting it, which resets every GPU. The instance stays the same
(same id, host, capacity reservation and node name): its node goes NotReady while it boots,
then Ready with its labels and taints, and the node lifecycle retests it.

The instance is found and checked as a repair checks it (``repair.locate``, ``describe``,
``node_group_of``): its ``spec.providerID``, the catalog cluster's region, the tags of a managed
node group of this cluster. Only a ``running`` instance is rebooted: one ``shutting-down`` or
``terminated`` is being replaced (a repair is under way), another is not running; both are
refused before any reboot.

It is an "ensure", but EC2 shows no reboot under way (the instance stays ``running``): after a
reboot gpufleet tags the instance ``gpufleet.io/rebooted-at`` with the time (ISO 8601, UTC),
and a reboot asked within ``REBOOT_WINDOW_S`` of that time is ``found`` and nothing is sent.
The tag is written after the reboot (``ec2:CreateTags``), so a failed reboot never reads as
one under way; should the tag fail, the reboot still stands (the next call may reboot again).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from gpufleet.backends.base import (
    ABSENT,
    CREATED,
    FOUND,
    UPDATING,
    WOULD_CREATE,
    Ensured,
    NodeInfo,
)
from gpufleet.backends.eks.clients import AwsClients, tag
from gpufleet.backends.eks.repair import GONE_STATES, describe, locate, node_group_of
from gpufleet.errors import BackendError

log = logging.getLogger(__name__)

REBOOT_TAG = "gpufleet.io/rebooted-at"
# how long after a reboot a second one is "found": a GPU node's reboot, until its kubelet is
# back, takes minutes
REBOOT_WINDOW_S = 600.0


def now() -> datetime:
    """The time a reboot is stamped with (tests replace it)."""
    return datetime.now(UTC)


def reboot_node(clients: AwsClients, cluster: Any, node: NodeInfo, dry_run: bool) -> Ensured:
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
        return Ensured("reboot", node.name, FOUND, UPDATING, (), url, detail)
    if dry_run:
        return Ensured("reboot", node.name, WOULD_CREATE, ABSENT, (), url, detail)
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
    return Ensured("reboot", node.name, CREATED, UPDATING, (), url, detail)


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
