"""Reservations and GPU node pools pinned to them.

A GPU pool is created in its reservation's zone (``locations``), consuming exactly that
reservation (``reservationAffinity`` SPECIFIC_RESERVATION, key
``compute.googleapis.com/reservation-name``, value ``<reservation>`` or
``<reservation>/reservationBlocks/<block>`` when the catalog names a block), with the GPU driver
installed by GKE (LATEST), gVNIC, an additional node network for the gVNIC VPC and one per RDMA
subnet, the ``gpufleet.io/pool`` label and the taints the caller gives (new pools come up
``gpufleet.io/validation-pending:NoSchedule``). An existing pool is reported, never changed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpufleet.backends.base import (
    EnsureAction,
    Ensured,
    NodePoolInfo,
    PoolDeletion,
    ReservationInfo,
    ResourceStatus,
    Taint,
)
from gpufleet.backends.gke.clients import Scope, call, console, get_or_none, last_segment
from gpufleet.backends.gke.cluster import cluster_path
from gpufleet.domain.workloads import POOL_LABEL
from gpufleet.errors import BackendError, CatalogError

if TYPE_CHECKING:
    from gpufleet.domain.fleet import NodePool

RESERVATION_KEY = "compute.googleapis.com/reservation-name"

_STATUS = {
    "PROVISIONING": ResourceStatus.CREATING,
    "RUNNING": ResourceStatus.READY,
    "RUNNING_WITH_ERROR": ResourceStatus.ERROR,
    "RECONCILING": ResourceStatus.UPDATING,
    "STOPPING": ResourceStatus.DELETING,
    "ERROR": ResourceStatus.ERROR,
}
_EFFECTS = {
    "NoSchedule": "NO_SCHEDULE",
    "PreferNoSchedule": "PREFER_NO_SCHEDULE",
    "NoExecute": "NO_EXECUTE",
}


def accelerator_type(model: str, machine_type: str) -> str:
    """GKE's accelerator type for a GPU model (and machine type, for the H100 variants)."""
    key = model.strip().upper()
    if key == "H200":
        return "nvidia-h200-141gb"
    if key == "H100":
        return (
            "nvidia-h100-mega-80gb"
            if machine_type.startswith("a3-megagpu")
            else ("nvidia-h100-80gb")
        )
    if key == "B200":
        return "nvidia-b200"
    raise CatalogError(
        f"GPU model {model!r} has no known GKE accelerator type (known: H200, H100, B200); "
        "fix gpu.model in the catalog"
    )


def _reservation(scope: Scope, name: str):
    for res in scope.region.reservations:
        if res.name == name:
            return res
    declared = ", ".join(r.name for r in scope.region.reservations) or "none"
    raise CatalogError(
        f"reservation {name!r} is not declared in region {scope.region.name!r} "
        f"(declared: {declared})"
    )


def reservation_zone(scope: Scope, name: str) -> str:
    return _reservation(scope, name).zone or scope.zone


def get_reservation(scope: Scope, name: str) -> ReservationInfo:
    zone = reservation_zone(scope, name)
    what = f"read reservation {name} in {zone}"
    res = call(
        what,
        "compute.reservations.get",
        scope.clients.compute("reservations").get,
        project=scope.project,
        zone=zone,
        reservation=name,
    )
    spec = res.specific_reservation
    return ReservationInfo(
        name=res.name or name,
        machine_type=spec.instance_properties.machine_type,
        count=int(spec.count),
        in_use=int(spec.in_use_count),
        zone=last_segment(res.zone) or None,
        blocks=_blocks(scope, zone, name),
        kind="reservation",
        status=(res.status or "unknown").lower() if res.status != "READY" else "active",
    )


def _blocks(scope: Scope, zone: str, name: str) -> tuple[str, ...] | None:
    """The reservation's blocks as the API lists them; None when it lists none (or this
    compute_v1 has no ReservationBlocksClient): never guessed."""
    if not scope.clients.has_compute("reservation_blocks"):
        return None
    pager = get_or_none(
        f"list blocks of reservation {name}",
        "compute.reservations.get",
        scope.clients.compute("reservation_blocks").list,
        project=scope.project,
        zone=zone,
        reservation=name,
    )
    names = tuple(b.name for b in pager or () if b.name)
    return names or None


def _pool_path(scope: Scope, pool: str) -> str:
    return f"{cluster_path(scope)}/nodePools/{pool}"


def _pool_console(scope: Scope, pool: str) -> str:
    return console(f"kubernetes/nodepool/{scope.zone}/{scope.cluster.name}/{pool}", scope.project)


def _read(scope: Scope, pool: str):
    return get_or_none(
        f"read node pool {pool}",
        "container.nodePools.get",
        scope.clients.container.get_node_pool,
        name=_pool_path(scope, pool),
    )


def _affinity_value(pool: NodePool) -> str:
    ref = pool.reservation
    return f"{ref.name}/reservationBlocks/{ref.block}" if ref.block else ref.name


def _reservation_of(existing: Any) -> str | None:
    values = list(existing.config.reservation_affinity.values)
    return values[0] if values else None


def ensure_node_pool(scope: Scope, name: str, dry_run: bool, taints: tuple[Taint, ...]) -> Ensured:
    pool = scope.cluster.pool(name)
    url = _pool_console(scope, name)
    want = _affinity_value(pool)
    existing = _read(scope, name)
    if existing is not None:
        diffs = []
        if existing.config.machine_type != pool.machine_type:
            diffs.append(
                f"machine type: catalog {pool.machine_type}, cloud {existing.config.machine_type}"
            )
        if existing.initial_node_count != pool.nodes:
            diffs.append(f"node count: catalog {pool.nodes}, cloud {existing.initial_node_count}")
        got = _reservation_of(existing)
        if got != want:
            diffs.append(
                f"reservation: catalog {want}, cloud {got or 'none'} (a pool's reservation "
                "cannot change: a new reservation means a new pool)"
            )
        return Ensured(
            "node_pool",
            name,
            EnsureAction.FOUND,
            _status(existing.status),
            tuple(diffs),
            url,
            {"reservation": got},
        )
    zone = reservation_zone(scope, pool.reservation.name)
    detail = {"reservation": want, "zone": zone, "nodes": pool.nodes}
    if dry_run:
        accelerator_type(pool.gpu.model, pool.machine_type)  # refuse an unknown GPU early
        return Ensured(
            "node_pool", name, EnsureAction.WOULD_CREATE, ResourceStatus.ABSENT, (), url, detail
        )
    op = call(
        f"create node pool {name}",
        "container.nodePools.create",
        scope.clients.container.create_node_pool,
        parent=cluster_path(scope),
        node_pool=_pool_body(scope, pool, zone, taints),
    )
    return Ensured(
        "node_pool",
        name,
        EnsureAction.CREATED,
        ResourceStatus.CREATING,
        (),
        url,
        {**detail, "operation": op.name},
    )


def _pool_body(scope: Scope, pool: NodePool, zone: str, taints: tuple[Taint, ...]):
    from google.cloud import container_v1

    net = scope.cluster.network
    additional = []
    if net.gvnic is not None:
        additional.append(
            container_v1.AdditionalNodeNetworkConfig(
                network=net.gvnic.name, subnetwork=net.gvnic.name
            )
        )
    for subnet in net.subnets if net.rdma_nics else ():
        additional.append(
            container_v1.AdditionalNodeNetworkConfig(network=net.name, subnetwork=subnet.name)
        )
    node_taints = []
    for taint in taints:
        if taint.effect not in _EFFECTS:
            raise BackendError(
                f"taint {taint.key}: effect {taint.effect!r} is not one of {', '.join(_EFFECTS)}"
            )
        node_taints.append(
            container_v1.NodeTaint(
                key=taint.key,
                value=taint.value or "",
                # proto-plus enums are Python enums; google-cloud-container's types say otherwise
                effect=container_v1.NodeTaint.Effect[_EFFECTS[taint.effect]],  # type: ignore[misc]
            )
        )
    gpu_driver = container_v1.GPUDriverInstallationConfig(
        gpu_driver_version=container_v1.GPUDriverInstallationConfig.GPUDriverVersion.LATEST
    )
    config = container_v1.NodeConfig(
        machine_type=pool.machine_type,
        accelerators=[
            container_v1.AcceleratorConfig(
                accelerator_count=pool.gpu.count,
                accelerator_type=accelerator_type(pool.gpu.model, pool.machine_type),
                gpu_driver_installation_config=gpu_driver,
            )
        ],
        reservation_affinity=container_v1.ReservationAffinity(
            consume_reservation_type=(container_v1.ReservationAffinity.Type.SPECIFIC_RESERVATION),
            key=RESERVATION_KEY,
            values=[_affinity_value(pool)],
        ),
        gvnic=container_v1.VirtualNIC(enabled=True),
        labels={POOL_LABEL: pool.name},
        taints=node_taints,
    )
    return container_v1.NodePool(
        name=pool.name,
        initial_node_count=pool.nodes,
        locations=[zone],
        config=config,
        network_config=container_v1.NodeNetworkConfig(additional_node_network_configs=additional),
    )


def _status(raw: object) -> ResourceStatus:
    return _STATUS.get(getattr(raw, "name", str(raw)), ResourceStatus.ERROR)


def get_node_pool(scope: Scope, name: str) -> NodePoolInfo:
    pool = scope.cluster.pool(name)
    existing = _read(scope, name)
    url = _pool_console(scope, name)
    if existing is None:
        return NodePoolInfo(
            name,
            scope.cluster.name,
            pool.machine_type,
            0,
            pool.reservation.name,
            ResourceStatus.ABSENT,
            url,
        )
    got = _reservation_of(existing)
    return NodePoolInfo(
        name=name,
        cluster=scope.cluster.name,
        machine_type=existing.config.machine_type,
        node_count=int(existing.initial_node_count),
        reservation=got.split("/reservationBlocks/")[0] if got else None,
        status=_status(existing.status),
        console_url=url,
    )


def delete_node_pool(scope: Scope, name: str) -> bool:
    from google.api_core import exceptions as gexc

    from gpufleet.backends.gke.clients import translate

    try:
        scope.clients.container.delete_node_pool(
            name=_pool_path(scope, name), retry=None, timeout=60.0
        )
    except gexc.NotFound:
        return False
    except Exception as exc:  # noqa: BLE001
        raise translate(exc, f"delete node pool {name}", "container.nodePools.delete") from exc
    return True


def ensure_node_pool_deleted(scope: Scope, name: str, operation: str | None) -> PoolDeletion:
    """Delete-if-present, then wait on the delete's operation: GKE accepts a delete at once and
    removes the pool when the operation is DONE, or leaves it (ERROR) when the operation ends
    with an error. A pool already being deleted (STOPPING) is waited on, not deleted again."""
    url = _pool_console(scope, name)
    if operation:
        op = call(
            f"read the delete operation {operation} of node pool {name}",
            "container.operations.get",
            scope.clients.container.get_operation,
            name=f"projects/{scope.project}/locations/{scope.zone}/operations/{operation}",
        )
        if getattr(op.status, "name", str(op.status)) != "DONE":
            return PoolDeletion(name, ResourceStatus.DELETING, operation, console_url=url)
        failure = (op.error.message if op.error else "") or op.status_message
        if failure:
            return PoolDeletion(
                name, ResourceStatus.ERROR, operation, message=failure, console_url=url
            )
    existing = _read(scope, name)
    if existing is None:
        return PoolDeletion(name, ResourceStatus.ABSENT, operation, console_url=url)
    if operation or _status(existing.status) == ResourceStatus.DELETING:
        return PoolDeletion(name, ResourceStatus.DELETING, operation, console_url=url)
    op = get_or_none(
        f"delete node pool {name}",
        "container.nodePools.delete",
        scope.clients.container.delete_node_pool,
        name=_pool_path(scope, name),
    )
    if op is None:
        return PoolDeletion(name, ResourceStatus.ABSENT, console_url=url)
    return PoolDeletion(name, ResourceStatus.DELETING, op.name, requested=True, console_url=url)
