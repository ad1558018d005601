"""Repair a GPU node through Compute Engine: report its host as faulty.

Design: docs/design/node-lifecycle.md.
"""

from __future__ import annotations

from typing import Any

from gpufleet.backends.base import EnsureAction, Ensured, NodeInfo, ResourceStatus
from gpufleet.backends.gke.clients import Scope, call, console, get_or_none, translate
from gpufleet.errors import BackendError

PROVIDER_PREFIX = "gce://"
DISRUPTION_SCHEDULE = "IMMEDIATE"
FAULT_BEHAVIOR = "PERFORMANCE"
REPORT_OPERATION = "reporthostasfaulty"  # operationType, compared case-insensitively
DEFAULT_REASON = "gpufleet: fabric validation failed on this node and its retest"


def parse_provider_id(node: NodeInfo, project: str, verb: str = "repair") -> tuple[str, str]:
    """(zone, instance) of a GKE node's VM, from ``gce://PROJECT/ZONE/INSTANCE``; ``verb`` is
    what the caller does to it (``repair``, ``reboot``), for the refusals."""
    pid = node.provider_id
    if not pid:
        raise BackendError(
            f"node {node.name!r} has no spec.providerID: cannot tell which VM to {verb}. "
            "Check that the node is registered by GKE (kubectl get node -o "
            "jsonpath='{.spec.providerID}')"
        )
    if not pid.startswith(PROVIDER_PREFIX):
        raise BackendError(
            f"node {node.name!r} has providerID {pid!r}, not a Compute Engine VM "
            f"({PROVIDER_PREFIX}PROJECT/ZONE/INSTANCE): the GKE backend acts only on the "
            "nodes of its own cluster"
        )
    parts = pid[len(PROVIDER_PREFIX) :].split("/")
    if len(parts) != 3 or not all(parts):
        raise BackendError(
            f"node {node.name!r} has providerID {pid!r}: expected "
            f"{PROVIDER_PREFIX}PROJECT/ZONE/INSTANCE"
        )
    vm_project, zone, instance = parts
    if vm_project != project:
        raise BackendError(
            f"node {node.name!r} is VM {instance} of project {vm_project!r}, not of the "
            f"catalog cluster's project {project!r}: refusing to {verb} a VM of another "
            "project; check that the node belongs to this cluster"
        )
    return zone, instance


def read_vm(scope: Scope, node: NodeInfo, verb: str) -> tuple[Any, str, dict[str, Any]]:
    """The VM behind ``node`` (refused before any call when its providerID is missing or not of
    the cluster's project; a clear error when it is gone), its console URL and the detail an
    ``Ensured`` carries (instance, zone, project)."""
    zone, instance = parse_provider_id(node, scope.project, verb)
    url = console(f"compute/instancesDetail/zones/{zone}/instances/{instance}", scope.project)
    detail: dict[str, Any] = {"instance": instance, "zone": zone, "project": scope.project}
    vm = get_or_none(
        f"read VM {instance} of node {node.name}",
        "compute.instances.get",
        scope.clients.compute("instances").get,
        project=scope.project,
        zone=zone,
        instance=instance,
    )
    if vm is None:
        raise BackendError(
            f"node {node.name!r}: VM {instance} does not exist in {scope.project}/{zone}; "
            "the node may have been replaced already (list the nodes again)"
        )
    return vm, url, detail


def repair_node(scope: Scope, node: NodeInfo, dry_run: bool, reason: str | None = None) -> Ensured:
    """Report the host of ``node``'s VM as faulty, unless a report is already under way."""
    from google.cloud import compute_v1

    vm, url, detail = read_vm(scope, node, "repair")
    zone, instance = detail["zone"], detail["instance"]
    running = operation_under_way(scope, zone, instance, REPORT_OPERATION)
    if running is not None or vm.status == "REPAIRING":
        if running is not None:
            detail["operation"] = running
        return Ensured(
            "repair", node.name, EnsureAction.FOUND, ResourceStatus.UPDATING, (), url, detail
        )
    if dry_run:
        return Ensured(
            "repair", node.name, EnsureAction.WOULD_CREATE, ResourceStatus.ABSENT, (), url, detail
        )
    body = compute_v1.InstancesReportHostAsFaultyRequest(
        disruption_schedule=DISRUPTION_SCHEDULE,
        fault_reasons=[
            compute_v1.InstancesReportHostAsFaultyRequestFaultReason(
                behavior=FAULT_BEHAVIOR, description=reason or DEFAULT_REASON
            )
        ],
    )
    what = f"report the host of VM {instance} (node {node.name}) as faulty"
    op = call(
        what,
        "compute.instances.reportHostAsFaulty",
        scope.clients.compute("instances").report_host_as_faulty_unary,
        project=scope.project,
        zone=zone,
        instance=instance,
        instances_report_host_as_faulty_request_resource=body,
    )
    detail["operation"] = op.name
    # not waited on: the host move takes 10-12 minutes; the VM reads REPAIRING meanwhile (a
    # second call finds it) and its node comes back Ready, which the next nightly retests
    return Ensured(
        "repair", node.name, EnsureAction.CREATED, ResourceStatus.UPDATING, (), url, detail
    )


def operation_under_way(scope: Scope, zone: str, instance: str, kind: str) -> str | None:
    """The name of a zone operation on this VM that is not DONE and whose type contains
    ``kind`` (lower case; compared case-insensitively), if any."""
    return operation_on(scope, zone, f"/zones/{zone}/instances/{instance}", kind)


def operation_on(scope: Scope, zone: str, suffix: str, kind: str) -> str | None:
    """The name of a zone operation not DONE whose target link ends with ``suffix``
    (``/zones/Z/instances/I``) and whose type contains ``kind`` (lower case; compared
    case-insensitively), if any."""
    from google.cloud import compute_v1

    what = f"list the running operations of zone {zone}"
    pager = call(
        what,
        "compute.zoneOperations.list",
        scope.clients.compute("zone_operations").list,
        request=compute_v1.ListZoneOperationsRequest(
            project=scope.project, zone=zone, filter="status != DONE"
        ),
    )
    try:
        operations = list(pager)  # further pages are fetched here
    except Exception as exc:  # noqa: BLE001 - translated like every other call
        raise translate(exc, what, "compute.zoneOperations.list") from exc
    for op in operations:
        status = getattr(op.status, "name", op.status)
        if (
            status != "DONE"
            and kind in (op.operation_type or "").lower()
            and (op.target_link or "").endswith(suffix)
        ):
            return op.name
    return None
