"""The catalog's cross-reference rules: what a region's fields cannot check alone (duplicate
names, the reservations and blocks pools name, machine types, the transports a provider can
deliver, GKE device-network name lengths, filesystems, sim faults). Pure; the types are in
``gpufleet.domain.fleet``, and ``gpufleet.config.catalog`` reports these with the file."""

from __future__ import annotations

from gpufleet.domain.faults import FaultError, parse_fault
from gpufleet.domain.fleet import Region

# GKE multi-networking: a Device-type Network object's name is at most 41 characters (it
# becomes part of a UNIX socket path); our RDMA Network objects are named after the subnets.
MAX_GKE_DEVICE_NETWORK_NAME = 41

# Which transports each real provider's plumbing can deliver; a sim cluster mimics one of them.
PROVIDER_TRANSPORTS = {
    "gke": ("gib", "roce", "ib", "tcpxo", "socket"),
    "eks": ("ofi-efa", "socket"),
}


def region_problems(region: Region, base: str = "") -> list[tuple[str, str]]:  # noqa: C901  one cross-reference check after another, read top to bottom
    """Cross-references a region's fields cannot check alone, as ``(where, message)`` pairs:
    duplicate names, reservations and blocks pools name, machine types, transports the provider
    can deliver, filesystems, and the sim faults. Empty when the region is consistent."""
    problems: list[tuple[str, str]] = []

    def problem(where: str, message: str) -> None:
        problems.append((where, message))

    reservations = {}
    for i, res in enumerate(region.reservations):
        if res.name in reservations:
            problem(f"{base}reservations[{i}].name", f"duplicate reservation {res.name!r}")
        reservations[res.name] = res
    for c, cluster in enumerate(region.clusters):
        cbase = f"{base}clusters[{c}]"
        shape = cluster.shape
        if (
            shape == "gke"
            and cluster.network.rdma_nics
            and (len(cluster.network.subnets) != cluster.network.rdma_nics)
        ):
            problem(
                f"{cbase}.network.subnets",
                f"a GKE RDMA network needs one subnet per NIC: {cluster.network.rdma_nics} "
                f"NICs but {len(cluster.network.subnets)} subnets",
            )
        names: set[str] = set()
        for s, subnet in enumerate(cluster.network.subnets):
            if subnet.name in names:
                problem(f"{cbase}.network.subnets[{s}].name", f"duplicate {subnet.name!r}")
            names.add(subnet.name)
            if shape == "gke" and len(subnet.name) > MAX_GKE_DEVICE_NETWORK_NAME:
                problem(
                    f"{cbase}.network.subnets[{s}].name",
                    f"{subnet.name!r} is {len(subnet.name)} characters; GKE names a device "
                    f"Network object after it, which may be at most "
                    f"{MAX_GKE_DEVICE_NETWORK_NAME}",
                )
        fs_names: set[str] = set()
        for f, fs in enumerate(cluster.filesystems):
            if fs.name in fs_names:
                problem(f"{cbase}.filesystems[{f}].name", f"duplicate filesystem {fs.name!r}")
            fs_names.add(fs.name)
            want = "managed-lustre" if shape == "gke" else "fsx-lustre"
            if fs.kind != want:
                problem(f"{cbase}.filesystems[{f}].kind", f"a {shape} cluster uses {want}")
        pool_names: set[str] = set()
        for p, pool in enumerate(cluster.node_pools):
            pbase = f"{cbase}.node_pools[{p}]"
            if pool.name in pool_names:
                problem(f"{pbase}.name", f"duplicate node pool {pool.name!r}")
            pool_names.add(pool.name)
            found = reservations.get(pool.reservation.name)
            if found is None:
                declared = ", ".join(sorted(reservations)) or "none"
                problem(
                    f"{pbase}.reservation",
                    f"reservation {pool.reservation.name!r} is not declared in region "
                    f"{region.name!r} (declared: {declared})",
                )
            elif pool.reservation.block and pool.reservation.block not in found.blocks:
                problem(
                    f"{pbase}.reservation.block",
                    f"block {pool.reservation.block!r} is not a block of reservation {found.name!r}"
                    f" (blocks: {', '.join(found.blocks) or 'none'})",
                )
            elif found.machine_type != pool.machine_type:
                problem(
                    f"{pbase}.machine_type",
                    f"{pool.machine_type!r} differs from reservation {found.name!r}'s "
                    f"machine type {found.machine_type!r}",
                )
            if pool.transport not in PROVIDER_TRANSPORTS[shape]:
                problem(
                    f"{pbase}.transport",
                    f"{pool.transport!r} is not a transport a {shape} cluster provides "
                    f"({', '.join(PROVIDER_TRANSPORTS[shape])})",
                )
            if pool.filesystem and pool.filesystem not in fs_names:
                problem(
                    f"{pbase}.filesystem",
                    f"filesystem {pool.filesystem!r} is not declared in cluster {cluster.name!r}",
                )
        if cluster.sim:
            for pool_name, faults in cluster.sim.faults.items():
                if pool_name not in pool_names:
                    problem(f"{cbase}.sim.faults.{pool_name}", "no such node pool")
                for fault in faults:
                    try:
                        parse_fault(fault)
                    except FaultError as exc:
                        problem(f"{cbase}.sim.faults.{pool_name}", str(exc))
    return problems
