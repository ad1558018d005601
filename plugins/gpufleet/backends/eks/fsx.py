"""FSx for Lustre filesystems: PERSISTENT_2, sized and tiered as the catalog says.

FSx takes ``StorageCapacity`` in GiB; for PERSISTENT_2 (SSD) the valid sizes are 1200 GiB,
2400 GiB and then multiples of 2400 GiB, and ``PerUnitStorageThroughput`` is one of 125, 250,
500 or 1000 MB/s per TiB (botocore's CreateFileSystem documentation). The catalog says TiB
(``capacity_tib``, 1 TiB = 1024 GiB): a size FSx would reject is refused here, naming the
nearest valid values, before any call. The filesystem sits in the node subnet (the zone of
the reservation of the first pool that mounts it) and in the EFA security group, which
allows all traffic among its members (Lustre's ports 988 and 1018-1023 included).
"""

from __future__ import annotations

import math
from typing import Any

from gpufleet.backends.base import EnsureAction, Ensured, FilesystemInfo, ResourceStatus
from gpufleet.backends.eks.clients import AwsClients, console_url, tag
from gpufleet.backends.eks.network import NetworkIds
from gpufleet.domain.fleet import Cluster, Filesystem
from gpufleet.errors import CatalogError

DEPLOYMENT_TYPE = "PERSISTENT_2"
THROUGHPUT_TIERS = (125, 250, 500, 1000)
GIB_PER_TIB = 1024
LIFECYCLE = {
    "AVAILABLE": ResourceStatus.READY,
    "CREATING": ResourceStatus.CREATING,
    "UPDATING": ResourceStatus.UPDATING,
    "DELETING": ResourceStatus.DELETING,
    "FAILED": ResourceStatus.ERROR,
    "MISCONFIGURED": ResourceStatus.ERROR,
    "MISCONFIGURED_UNAVAILABLE": ResourceStatus.ERROR,
}


def valid_capacities_gib(near_gib: float) -> tuple[int, int | None]:
    """The valid PERSISTENT_2 sizes just below and just above ``near_gib`` (GiB)."""
    if near_gib <= 1200:
        return 1200, None
    if near_gib <= 2400:
        return 1200, 2400
    below = max(2400, math.floor(near_gib / 2400) * 2400)
    return below, math.ceil(near_gib / 2400) * 2400


def storage_capacity_gib(cluster: Cluster, fs: Filesystem) -> int:
    """FSx's ``StorageCapacity`` for the catalog's ``capacity_tib``; refuses a size FSx would
    reject and a throughput tier PERSISTENT_2 does not offer."""
    if fs.throughput_mbps_per_tib not in THROUGHPUT_TIERS:
        raise CatalogError(
            f"cluster {cluster.name!r} filesystem {fs.name!r}: throughput_mbps_per_tib "
            f"{fs.throughput_mbps_per_tib} is not a PERSISTENT_2 tier; use one of "
            f"{', '.join(map(str, THROUGHPUT_TIERS))}"
        )
    gib = fs.capacity_tib * GIB_PER_TIB
    if gib.is_integer() and (int(gib) in (1200, 2400) or int(gib) % 2400 == 0):
        return int(gib)
    if gib < 1200:
        options = [1200]
    else:
        low, high = valid_capacities_gib(gib)
        options = [v for v in (low, high) if v]
    named = " or ".join(f"{v} GiB (capacity_tib: {v / GIB_PER_TIB:g})" for v in options)
    raise CatalogError(
        f"cluster {cluster.name!r} filesystem {fs.name!r}: capacity_tib {fs.capacity_tib:g} is "
        f"{gib:g} GiB, which FSx for Lustre PERSISTENT_2 does not offer (1200 GiB, 2400 GiB, "
        f"then multiples of 2400 GiB); the nearest valid sizes are {named}"
    )


class EksFilesystems:
    """FSx for Lustre filesystems of one cluster, found by their ``Name`` tag."""

    def __init__(self, clients: AwsClients, cluster: Cluster) -> None:
        self.clients = clients
        self.cluster = cluster
        self.region = cluster.location

    def url(self, fs_id: str | None) -> str | None:
        if not fs_id:
            return None
        return console_url(
            self.region, f"fsx/home?region={self.region}#file-system-details/{fs_id}"
        )

    def describe(self, name: str) -> dict[str, Any] | None:
        items = self.clients.pages(
            "fsx", "describe_file_systems", "FileSystems", f"find filesystem {name!r}"
        )
        matches = [
            f
            for f in items
            if f.get("FileSystemType") == "LUSTRE"
            and tag(f) == name
            and f.get("Lifecycle") not in ("DELETING",)
        ]
        return matches[0] if matches else None

    def node_zone(self, name: str, zones_by_reservation: dict[str, str | None]) -> str | None:
        """The zone of the reservation of the first pool that mounts the filesystem."""
        for pool in self.cluster.node_pools:
            if pool.filesystem == name:
                return zones_by_reservation.get(pool.reservation.name)
        return None

    def ensure(
        self, name: str, network: NetworkIds | None, zone: str | None, dry_run: bool
    ) -> Ensured:
        spec = self.cluster.filesystem(name)
        capacity = storage_capacity_gib(self.cluster, spec)
        found = self.describe(name)
        if found is not None:
            lustre = found.get("LustreConfiguration") or {}
            diffs = []
            if found.get("StorageCapacity") != capacity:
                diffs.append(
                    f"capacity: catalog {capacity} GiB, cloud {found.get('StorageCapacity')} GiB"
                )
            if lustre.get("PerUnitStorageThroughput") != spec.throughput_mbps_per_tib:
                diffs.append(
                    f"throughput: catalog {spec.throughput_mbps_per_tib} MB/s/TiB, cloud "
                    f"{lustre.get('PerUnitStorageThroughput')} MB/s/TiB"
                )
            if lustre.get("DeploymentType") != DEPLOYMENT_TYPE:
                diffs.append(
                    f"deployment type: catalog {DEPLOYMENT_TYPE}, cloud "
                    f"{lustre.get('DeploymentType')}"
                )
            return self._ensured(name, EnsureAction.FOUND, found, tuple(diffs))
        if dry_run:
            return Ensured(
                "filesystem",
                name,
                EnsureAction.WOULD_CREATE,
                ResourceStatus.ABSENT,
                console_url=console_url(self.region, f"fsx/home?region={self.region}#file-systems"),
                detail={"capacity_gib": capacity, "throughput": spec.throughput_mbps_per_tib},
            )
        assert network is not None
        subnets = network.subnet_ids(self.cluster, zone=zone)
        created = self.clients.call(
            "fsx",
            "create_file_system",
            f"create filesystem {name!r}",
            ClientRequestToken=f"gpufleet-{self.cluster.name}-{name}"[:63],
            FileSystemType="LUSTRE",
            StorageCapacity=capacity,
            StorageType="SSD",
            SubnetIds=subnets[:1],
            SecurityGroupIds=[network.require_security_group(self.cluster)],
            Tags=[
                {"Key": "Name", "Value": name},
                {"Key": "gpufleet.io/cluster", "Value": self.cluster.name},
            ],
            LustreConfiguration={
                "DeploymentType": DEPLOYMENT_TYPE,
                "PerUnitStorageThroughput": spec.throughput_mbps_per_tib,
            },
        )["FileSystem"]
        return self._ensured(name, EnsureAction.CREATED, created, ())

    def _ensured(
        self, name: str, action: EnsureAction, found: dict[str, Any], diffs: tuple[str, ...]
    ) -> Ensured:
        info = self._info(name, found)
        return Ensured(
            "filesystem",
            name,
            action,
            info.status,
            diffs,
            console_url=info.console_url,
            detail={
                "id": info.id,
                "mount_name": info.mount_name,
                "dns_name": info.endpoint,
                "capacity_gib": found.get("StorageCapacity"),
            },
        )

    def _info(self, name: str, found: dict[str, Any]) -> FilesystemInfo:
        lustre = found.get("LustreConfiguration") or {}
        # The real API always reports Lifecycle; without it nothing says the filesystem is
        # usable, so it counts as still creating.
        status = LIFECYCLE.get(found.get("Lifecycle") or "CREATING", ResourceStatus.ERROR)
        fs_id = found.get("FileSystemId")
        return FilesystemInfo(
            name=name,
            capacity_tib=(found.get("StorageCapacity") or 0) / GIB_PER_TIB,
            throughput_mbps_per_tib=int(lustre.get("PerUnitStorageThroughput") or 0),
            status=status,
            id=fs_id,
            mount_name=lustre.get("MountName"),
            endpoint=found.get("DNSName"),
            network=found.get("VpcId"),
            console_url=self.url(fs_id),
        )

    def info(self, name: str) -> FilesystemInfo:
        spec = self.cluster.filesystem(name)
        found = self.describe(name)
        if found is None:
            return FilesystemInfo(
                name, spec.capacity_tib, spec.throughput_mbps_per_tib, ResourceStatus.ABSENT
            )
        return self._info(name, found)
