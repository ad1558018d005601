"""The Managed Lustre instance (google-cloud-lustre ``lustre_v1``) a cluster's pools mount.

The instance is created in the cluster's zone on the cluster's PRIMARY VPC
(``projects/P/global/networks/<primary_vpc>``): GKE nodes reach Lustre through their first
NIC, never through the RDMA network. ``per_unit_storage_throughput`` is the catalog's tier
(MB/s per TiB; 25 is the Dynamic tier, sent as ``dynamic_tier_options`` mode DEFAULT_CACHE
with no per-unit throughput) and ``capacity_gib`` the catalog's ``capacity_tib`` x 1024 rounded
to the nearest value the tier allows (``TIERS``, from Google's "Performance tiers" page); the
Lustre ``filesystem`` name is the catalog name's letters and
digits, at most 8 (the API's limit). Create returns at once (status CREATING) while the
long-running operation runs; ``get_filesystem`` reports progress.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gpufleet.backends.base import EnsureAction, Ensured, FilesystemInfo, ResourceStatus
from gpufleet.backends.gke.clients import Scope, call, console, get_or_none
from gpufleet.backends.gke.network import network_url
from gpufleet.errors import CatalogError


@dataclass(frozen=True)
class Tier:
    """The capacities (GiB) a tier allows: multiples of ``step`` from ``minimum`` up to
    ``threshold``, then multiples of ``large_step`` up to ``maximum``."""

    minimum: int
    maximum: int
    step: int
    threshold: int
    large_step: int


# tier (MB/s per TiB) -> capacities, from Google Cloud Managed Lustre "Performance tiers"
# (https://cloud.google.com/managed-lustre/docs/performance-tiers, and the same table in
# "Increase the capacity of a Managed Lustre instance"): the 1000 tier up to 10,008,000 GiB
# (9.5 PiB), no longer the 954,000 GiB of the first release. 25 is the Dynamic tier.
TIERS: dict[int, Tier] = {
    1000: Tier(9_000, 10_008_000, 9_000, 1_530_000, 72_000),
    500: Tier(18_000, 20_016_000, 18_000, 3_060_000, 144_000),
    250: Tier(36_000, 40_032_000, 36_000, 6_120_000, 288_000),
    125: Tier(72_000, 12_240_000, 72_000, 12_240_000, 72_000),
    25: Tier(472_000, 84_016_000, 472_000, 84_016_000, 472_000),
}
DYNAMIC_TIER = 25

_STATUS = {
    "ACTIVE": ResourceStatus.READY,
    "CREATING": ResourceStatus.CREATING,
    "UPDATING": ResourceStatus.UPDATING,
    "UPGRADING": ResourceStatus.UPDATING,
    "REPAIRING": ResourceStatus.UPDATING,
    "DELETING": ResourceStatus.DELETING,
    "STOPPED": ResourceStatus.ERROR,
    "SUSPENDED": ResourceStatus.ERROR,
}


def capacity_gib(capacity_tib: float, tier: int) -> int:
    """The capacity the API accepts nearest to ``capacity_tib`` TiB for ``tier``."""
    if tier not in TIERS:
        raise CatalogError(
            f"Managed Lustre throughput tier {tier} MB/s per TiB does not exist (tiers: "
            f"{', '.join(str(t) for t in sorted(TIERS))}); fix throughput_mbps_per_tib"
        )
    t = TIERS[tier]
    want = capacity_tib * 1024
    small = min(max(t.minimum, round(want / t.step) * t.step), t.threshold)
    gib = small
    if t.threshold < t.maximum and want > t.threshold:
        first = (t.threshold // t.large_step + 1) * t.large_step
        large = max(first, round(want / t.large_step) * t.large_step)
        gib = large if abs(large - want) < abs(want - small) else small
    if gib > t.maximum:
        raise CatalogError(
            f"Managed Lustre at {tier} MB/s per TiB holds at most {t.maximum} GiB "
            f"({t.maximum / 1024:.0f} TiB); capacity_tib {capacity_tib} is too large"
        )
    return gib


def tier_of(instance: Any) -> int:
    """The catalog's tier of an existing instance (Dynamic: 25)."""
    mode = getattr(getattr(instance, "dynamic_tier_options", None), "mode", None)
    if getattr(mode, "name", mode) == "DEFAULT_CACHE":
        return DYNAMIC_TIER
    return int(instance.per_unit_storage_throughput)


def filesystem_name(name: str) -> str:
    """The Lustre filesystem name (mount name): letters and digits only, at most 8."""
    return re.sub(r"[^a-zA-Z0-9]", "", name)[:8] or "lustre"


def _instance_path(scope: Scope, name: str) -> str:
    return f"projects/{scope.project}/locations/{scope.zone}/instances/{name}"


def _console(scope: Scope, name: str) -> str:
    return console(f"managed-lustre/instances/details/{scope.zone}/{name}", scope.project)


def _read(scope: Scope, name: str) -> Any:
    return get_or_none(
        f"read Lustre instance {name}",
        "lustre.instances.get",
        scope.clients.lustre.get_instance,
        name=_instance_path(scope, name),
    )


def _status(raw: object) -> ResourceStatus:
    return _STATUS.get(getattr(raw, "name", str(raw)), ResourceStatus.ERROR)


def ensure_filesystem(scope: Scope, name: str, dry_run: bool) -> Ensured:
    fs = scope.cluster.filesystem(name)
    tier = fs.throughput_mbps_per_tib
    gib = capacity_gib(fs.capacity_tib, tier)
    network = network_url(scope.project, scope.cluster.network.primary_vpc)
    url = _console(scope, name)
    detail = {
        "capacity_gib": gib,
        "throughput_mbps_per_tib": tier,
        "network": network,
        "filesystem": filesystem_name(name),
    }
    existing = _read(scope, name)
    if existing is not None:
        diffs = []
        if existing.capacity_gib != gib:
            diffs.append(f"capacity: catalog {gib} GiB, cloud {existing.capacity_gib} GiB")
        if tier_of(existing) != tier:
            diffs.append(f"throughput tier: catalog {tier} MB/s per TiB, cloud {tier_of(existing)}")
        if not existing.network.endswith(network):
            diffs.append(
                f"network: catalog {network} (the cluster's primary VPC), cloud "
                f"{existing.network}: GKE nodes reach Lustre through their primary NIC only"
            )
        return Ensured(
            "filesystem",
            name,
            EnsureAction.FOUND,
            _status(existing.state),
            tuple(diffs),
            url,
            {**detail, "id": existing.name},
        )
    if dry_run:
        return Ensured(
            "filesystem", name, EnsureAction.WOULD_CREATE, ResourceStatus.ABSENT, (), url, detail
        )
    from google.cloud import lustre_v1

    performance: dict[str, Any] = {"per_unit_storage_throughput": tier}
    if tier == DYNAMIC_TIER:  # no per-unit throughput with the Dynamic tier (API reference)
        mode = lustre_v1.DynamicTierOptions.Mode.DEFAULT_CACHE
        performance = {"dynamic_tier_options": lustre_v1.DynamicTierOptions(mode=mode)}
    instance = lustre_v1.Instance(
        filesystem=filesystem_name(name),
        capacity_gib=gib,
        network=network,
        description=f"gpufleet: {scope.cluster.name}/{name}",
        labels={"managed-by": "gpufleet", "cluster": scope.cluster.name},
        **performance,
    )
    op = call(
        f"create Lustre instance {name}",
        "lustre.instances.create",
        scope.clients.lustre.create_instance,
        parent=f"projects/{scope.project}/locations/{scope.zone}",
        instance_id=name,
        instance=instance,
    )
    op_name = getattr(getattr(op, "operation", None), "name", None)
    return Ensured(
        "filesystem",
        name,
        EnsureAction.CREATED,
        ResourceStatus.CREATING,
        (),
        url,
        {**detail, "operation": op_name},
    )


def get_filesystem(scope: Scope, name: str) -> FilesystemInfo:
    fs = scope.cluster.filesystem(name)
    existing = _read(scope, name)
    if existing is None:
        return FilesystemInfo(
            name,
            fs.capacity_tib,
            fs.throughput_mbps_per_tib,
            ResourceStatus.ABSENT,
            console_url=_console(scope, name),
        )
    mount_point = existing.mount_point or ""
    return FilesystemInfo(
        name=name,
        capacity_tib=existing.capacity_gib / 1024,
        throughput_mbps_per_tib=tier_of(existing),
        status=_status(existing.state),
        id=existing.name,
        mount_name=existing.filesystem or None,
        endpoint=mount_point.split(":/")[0] or None,
        network=existing.network or None,
        console_url=_console(scope, name),
        csi_handle=_csi_handle(existing.name),
    )


def _csi_handle(full_name: str) -> str:
    """The Managed Lustre CSI driver's volumeHandle, ``<project>/<location>/<instance>``, from
    the instance's ``projects/P/locations/L/instances/I``."""
    parts = full_name.split("/")
    if len(parts) == 6 and parts[0] == "projects":
        return f"{parts[1]}/{parts[3]}/{parts[5]}"
    return full_name
