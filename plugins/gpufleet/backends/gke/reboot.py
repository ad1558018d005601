"""Reboot a GPU node through Compute Engine: reset its VM.

NVIDIA's Xid catalog asks for a node reboot after an Xid 79 (a GPU fell off the bus), and for a
GPU reset after a pending row remap or an Xid of its ``RESET_GPU`` bucket; gpufleet resets the
GPUs of a drained node by rebooting it, which resets every GPU.

``instances.reset`` (compute v1, ``POST projects/P/zones/Z/instances/I/reset``, an empty body)
is a hard reset: the VM stays RUNNING on its host, in its reservation, under its name; the
Kubernetes node goes NotReady while the guest boots, then Ready with its labels and taints (the
node lifecycle retests it before releasing it). The call answers a zone operation of type
``reset``, which is not waited on.

It is an "ensure": a reset already under way (a zone operation of type ``reset`` on the
instance that is not DONE) is ``found`` and nothing is sent. Only a RUNNING VM can be reset: a
VM in another status (REPAIRING while its host is repaired, TERMINATED ...) is refused before
any call. The VM comes from the node's ``spec.providerID`` and is checked as a repair checks it
(``repair.read_vm``).
"""

from __future__ import annotations

from gpufleet.backends.base import (
    ABSENT,
    CREATED,
    FOUND,
    UPDATING,
    WOULD_CREATE,
    Ensured,
    NodeInfo,
)
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
        return Ensured("reboot", node.name, FOUND, UPDATING, (), url, detail)
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
        return Ensured("reboot", node.name, WOULD_CREATE, ABSENT, (), url, detail)
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
    return Ensured("reboot", node.name, CREATED, UPDATING, (), url, detail)
