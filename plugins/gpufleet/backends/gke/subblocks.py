"""The provider's view of a GKE pool's racks: Compute Engine reservation blocks and sub-blocks,
their health, and ``reservationSubBlocks.reportFaulty`` (``topology_api``).

Design: docs/design/topology.md.
"""

from __future__ import annotations

from typing import Any

from gpufleet.backends.base import EnsureAction, Ensured, ResourceStatus
from gpufleet.backends.gke.clients import Scope, call, console, translate
from gpufleet.backends.gke.pools import reservation_zone
from gpufleet.backends.gke.repair import operation_on
from gpufleet.backends.topology_api import (
    DEGRADED,
    HEALTHY,
    REPORT_KIND,
    UNKNOWN,
    ReservationHealth,
    SubBlockHealth,
    split_key,
)
from gpufleet.errors import BackendError

DISRUPTION_SCHEDULE = "IMMEDIATE"
FAILURE_COMPONENT = "MULTIPLE_FAULTY_HOSTS"
FAULT_BEHAVIOR = "PERFORMANCE"
REPORT_OPERATION = "faulty"  # in the report's operationType, compared case-insensitively
DEFAULT_REASON = (
    "gpufleet: fabric pairs crossing this sub-block's uplink failed validation while pairs "
    "inside it passed"
)
_STATUS = {"HEALTHY": HEALTHY, "DEGRADED": DEGRADED}


def parent_name(reservation: str, block: str) -> str:
    """compute_v1's ``parent_name`` of a block's sub-blocks."""
    return f"reservations/{reservation}/reservationBlocks/{block}"


def _listed(what: str, permission: str, fn: Any, **kwargs: Any) -> list[Any]:
    pager = call(what, permission, fn, **kwargs)
    try:
        return list(pager)  # further pages are fetched here
    except Exception as exc:  # noqa: BLE001 - translated like every other call
        raise translate(exc, what, permission) from exc


def _blocks(scope: Scope, reservation: str, zone: str, block: str | None) -> list[Any]:
    clients = scope.clients
    if block:
        answer = call(
            f"read block {block} of reservation {reservation}",
            "compute.reservationBlocks.get",
            clients.compute("reservation_blocks").get,
            project=scope.project,
            zone=zone,
            reservation=reservation,
            reservation_block=block,
        )
        return [answer.resource]
    return _listed(
        f"list the blocks of reservation {reservation}",
        "compute.reservationBlocks.list",
        clients.compute("reservation_blocks").list,
        project=scope.project,
        zone=zone,
        reservation=reservation,
    )


def _walk(scope: Scope, pool: str) -> tuple[str, str, list[tuple[Any, Any]]]:
    """(reservation, zone, [(block, sub-block)]) of ``pool``'s reservation (its block)."""
    ref = scope.cluster.pool(pool).reservation
    zone = reservation_zone(scope, ref.name)
    found = []
    for block in _blocks(scope, ref.name, zone, ref.block):
        for sub in _listed(
            f"list the sub-blocks of block {block.name} of reservation {ref.name}",
            "compute.reservationSubBlocks.list",
            scope.clients.compute("reservation_sub_blocks").list,
            project=scope.project,
            zone=zone,
            parent_name=parent_name(ref.name, block.name),
        ):
            found.append((block, sub))
    return ref.name, zone, found


def _health(reservation: str, zone: str, block: Any, sub: Any) -> SubBlockHealth:
    detail: dict[str, Any] = {"reservation": reservation, "zone": zone}
    if "physical_topology" in sub and sub.physical_topology.sub_block:
        topo = sub.physical_topology
        labels = (topo.block or block.physical_topology.block, topo.sub_block)
        if topo.cluster:
            detail["cluster"] = topo.cluster
    else:
        labels = (block.name, sub.name)
        detail["keyed_by"] = "api-names"
    info = sub.health_info if "health_info" in sub else None
    status = _STATUS.get(info.health_status, UNKNOWN) if info is not None else UNKNOWN
    if "in_use_count" in sub:
        detail["in_use"] = int(sub.in_use_count)
    return SubBlockHealth(
        block=labels[0],
        subblock=labels[1],
        status=status,
        healthy_hosts=_count(info, "healthy_host_count"),
        degraded_hosts=_count(info, "degraded_host_count"),
        hosts=int(sub.count) if "count" in sub else None,
        provider_name=f"{parent_name(reservation, block.name)}/reservationSubBlocks/{sub.name}",
        detail=detail,
    )


def _count(info: Any, name: str) -> int | None:
    return int(getattr(info, name)) if info is not None and name in info else None


def subblock_health(scope: Scope, pool: str) -> list[SubBlockHealth]:
    """Each sub-block of ``pool``'s reservation (its block) with ``healthInfo``, by key."""
    reservation, zone, found = _walk(scope, pool)
    return sorted((_health(reservation, zone, b, s) for b, s in found), key=lambda h: h.key)


def reservation_health(scope: Scope, pool: str) -> ReservationHealth:
    """The same walk as ``subblock_health``: it reads the reservation (its block) only, so the
    pool need not exist (onboarding's preflight)."""
    reservation, zone, found = _walk(scope, pool)
    subblocks = sorted((_health(reservation, zone, b, s) for b, s in found), key=lambda h: h.key)
    block = scope.cluster.pool(pool).reservation.block
    return ReservationHealth(reservation, block, tuple(subblocks), detail={"zone": zone})


def report_faulty_subblock(
    scope: Scope, pool: str, key: str, reason: str, dry_run: bool
) -> Ensured:
    """Report sub-block ``key`` of ``pool``'s reservation as faulty (see the module)."""
    from google.cloud import compute_v1

    split_key(key)
    reservation, zone, found = _walk(scope, pool)
    match = [(b, s) for b, s in found if _health(reservation, zone, b, s).key == key]
    if not match:
        known = sorted(_health(reservation, zone, b, s).key for b, s in found)
        raise BackendError(
            f"sub-block {key!r} is not a sub-block of reservation {reservation!r} of pool "
            f"{pool!r} (its sub-blocks: {', '.join(known[:12]) or 'none listed'}"
            + (", ..." if len(known) > 12 else "")
            + "): refusing to report it; check the node labels the key came from"
        )
    block, sub = match[0]
    url = console("compute/reservations", scope.project)
    detail: dict[str, Any] = {
        "reservation": reservation,
        "block": block.name,
        "subblock": sub.name,
        "zone": zone,
        "reason": reason or DEFAULT_REASON,
    }
    target = f"/zones/{zone}/{parent_name(reservation, block.name)}/reservationSubBlocks/{sub.name}"
    running = operation_on(scope, zone, target, REPORT_OPERATION)
    if running is not None:
        detail["operation"] = running
        return Ensured(
            REPORT_KIND, key, EnsureAction.FOUND, ResourceStatus.UPDATING, (), url, detail
        )
    if dry_run:
        return Ensured(
            REPORT_KIND, key, EnsureAction.WOULD_CREATE, ResourceStatus.ABSENT, (), url, detail
        )
    body = compute_v1.ReservationSubBlocksReportFaultyRequest(
        disruption_schedule=DISRUPTION_SCHEDULE,
        failure_component=FAILURE_COMPONENT,
        fault_reasons=[
            compute_v1.ReservationSubBlocksReportFaultyRequestFaultReason(
                behavior=FAULT_BEHAVIOR, description=detail["reason"]
            )
        ],
    )
    op = call(
        f"report sub-block {sub.name} ({key}) of reservation {reservation} as faulty",
        "compute.reservationSubBlocks.reportFaulty",
        scope.clients.compute("reservation_sub_blocks").report_faulty_unary,
        project=scope.project,
        zone=zone,
        parent_name=parent_name(reservation, block.name),
        reservation_sub_block=sub.name,
        reservation_sub_blocks_report_faulty_request_resource=body,
    )
    detail["operation"] = op.name
    # not waited on: the provider's maintenance of the rack takes far longer than a task should
    # hold a worker; a second call finds the operation while it runs
    return Ensured(REPORT_KIND, key, EnsureAction.CREATED, ResourceStatus.UPDATING, (), url, detail)
