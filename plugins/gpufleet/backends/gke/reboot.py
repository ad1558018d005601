"""Reboot a GPU node through Compute Engine: reset its VM.

Design: docs/design/node-lifecycle.md.
"""

from __future__ import annotations

from gpufleet.backends.base import EnsureAction, Ensured, NodeInfo, ResourceStatus
from gpufleet.backends.gke.clients import Scope, call
from gpufleet.backends.gke.repair import operation_under_way, read_vm
from gpufleet.errors import BackendError

RESET_OPERATION = "reset"  # operationType, compared case-insensitively


def reboot_node(scope: Scope, node: NodeInfo, dry_run: bool) -> Ensured:
    """Reset ``node``'s VM, unless a reset of it is already under way."""
    vm, url, detail = read_vm(scope, node, "reboot")
    zone, instance = detail["zone"], detail["instance"]
    running = operation_under_way(scope, zone, instance, RESET_OPERATION)
    if running is not None:
        detail["operation"] = running
        return Ensured(
            "reboot", node.name, EnsureAction.FOUND, ResourceStatus.UPDATING, (), url, detail
        )
    if vm.status != "RUNNING":
        raise BackendError(
            f"node {node.name!r}: VM {instance} is {vm.status}, not RUNNING: only a running VM "
            "can be reset"
            + (
                " (its host is being repaired: the repair settles what a reboot would)"
                if vm.status == "REPAIRING"
                else "; start it, or repair the node"
            )
        )
    if dry_run:
        return Ensured(
            "reboot", node.name, EnsureAction.WOULD_CREATE, ResourceStatus.ABSENT, (), url, detail
        )
    op = call(
        f"reset VM {instance} (node {node.name})",
        "compute.instances.reset",
        scope.clients.compute("instances").reset_unary,
        project=scope.project,
        zone=zone,
        instance=instance,
    )
    detail["operation"] = op.name
    # not waited on: the guest reboots and its node comes back Ready, which the lifecycle
    # retests; meanwhile the operation (until DONE) makes a second call find this one
    return Ensured(
        "reboot", node.name, EnsureAction.CREATED, ResourceStatus.UPDATING, (), url, detail
    )
