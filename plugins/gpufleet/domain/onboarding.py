"""What region onboarding refuses before it creates anything, and the order of its steps. Pure.

The preflight reads each reservation the region's pools are pinned to, as the cloud reports it
(``ReservationReport``: the backends' ``ReservationInfo`` has these fields), and refuses, with
both values or the figures:

- a reservation whose machine type is not the pool's;
- a shortfall: the pools still to be created on a reservation need more machines than it has
  free (pools that already exist hold their machines and need none);
- an RDMA mapping that does not follow where the reservation physically is: the pool's RDMA
  network and subnets are chosen by the reservation's zone (GKE: the RoCE network profile
  ``<zone>-vpc-roce`` of the cluster's zone; EKS: the EFA subnets in the reservation's
  availability zone) and, where the API reports them, its blocks. A zone or block the API does
  not report is never guessed: onboarding stops and says what is missing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from gpufleet.domain.fleet import Cluster, NodePool, Region

# The steps of one onboarding run, in order (the DAG's task ids follow them).
STEPS = (
    "preflight",
    "network",
    "cluster",
    "filesystems",
    "node_pools",
    "nodes_ready",
    "addons",
    "validate",
    "release",
)

RDMA_MTU = 8896  # the MTU of GCP's RoCE network profiles


def gke_network_profile(zone: str) -> str:
    """The RDMA network profile of a GCP zone (``us-central1-b-vpc-roce``)."""
    return f"{zone}-vpc-roce"


class ReservationReport(Protocol):
    name: str
    machine_type: str
    count: int
    in_use: int
    zone: str | None
    blocks: tuple[str, ...] | None

    @property
    def free(self) -> int: ...


@dataclass(frozen=True)
class Refusal:
    """One reason not to create anything: where (``reservation/pool``) and why."""

    where: str
    reason: str

    def __str__(self) -> str:
        return f"{self.where}: {self.reason}"


def _zone_of(cluster: Cluster) -> str | None:
    """A zonal location (``us-central1-b``) is a zone; a region (``us-central1``) is not."""
    parts = cluster.location.split("-")
    return cluster.location if len(parts) >= 3 and len(parts[-1]) == 1 else None


def rdma_mapping_refusals(
    region: Region, cluster: Cluster, pool: NodePool, report: ReservationReport
) -> list[Refusal]:
    """The pool's RDMA attachment checked against where its reservation physically is."""
    where = f"{cluster.name}/{pool.name}"
    out: list[Refusal] = []
    declared = next((r for r in region.reservations if r.name == pool.reservation.name), None)
    if report.zone is None:
        return [
            Refusal(
                where,
                f"the cloud did not report the zone of reservation {report.name!r}: the RDMA "
                "network its nodes attach to follows that zone, so nothing is created until it "
                "is known (check the reservation exists and the credentials may read it)",
            )
        ]
    if declared is not None and declared.zone and declared.zone != report.zone:
        out.append(
            Refusal(
                where,
                f"reservation {report.name!r} is in zone {report.zone} but the catalog says "
                f"{declared.zone}: correct the catalog (the RDMA mapping follows the zone)",
            )
        )
    if cluster.shape == "gke":
        zone = _zone_of(cluster)
        if zone is not None and zone != report.zone:
            out.append(
                Refusal(
                    where,
                    f"reservation {report.name!r} is in {report.zone} but the cluster's RDMA "
                    f"network uses the profile of {zone} ({gke_network_profile(zone)}): "
                    f"a pool's RDMA NICs must be in its reservation's zone",
                )
            )
    else:
        zones = sorted({s.zone for s in cluster.network.subnets if s.zone})
        if report.zone not in zones:
            out.append(
                Refusal(
                    where,
                    f"reservation {report.name!r} is in {report.zone} but the network's subnets "
                    f"are in {', '.join(zones) or 'no declared zone'}: EFA interfaces attach "
                    f"to a subnet in the instance's zone; add one in {report.zone}",
                )
            )
    block = pool.reservation.block
    if block:
        if report.blocks is None:
            out.append(
                Refusal(
                    where,
                    f"the catalog pins block {block!r} of reservation {report.name!r}, but the "
                    "cloud did not report the reservation's blocks: nothing is created until "
                    "it does (or remove the block from the catalog to use any block)",
                )
            )
        elif block not in report.blocks:
            out.append(
                Refusal(
                    where,
                    f"block {block!r} is not a block of reservation {report.name!r} as the "
                    f"cloud reports it ({', '.join(report.blocks) or 'no blocks'})",
                )
            )
    return out


def preflight_refusals(
    region: Region,
    reports: Mapping[str, ReservationReport],
    existing_pools: Iterable[str],
) -> list[Refusal]:
    """Everything that stops onboarding ``region`` before a single create: machine types,
    capacity (with the figures) and the RDMA mapping, for every pool of every cluster.
    ``reports``: reservation name -> what the cloud reported; ``existing_pools``:
    ``cluster/pool`` keys that exist already (they need no capacity)."""
    exists = set(existing_pools)
    out: list[Refusal] = []
    needed: dict[str, list[tuple[str, int]]] = {}
    for cluster in region.clusters:
        for pool in cluster.active_pools:
            report = reports.get(pool.reservation.name)
            key = f"{cluster.name}/{pool.name}"
            if report is None:
                out.append(Refusal(key, f"reservation {pool.reservation.name!r} was not read"))
                continue
            if report.machine_type != pool.machine_type:
                out.append(
                    Refusal(
                        key,
                        f"reservation {report.name!r} holds {report.machine_type} machines but "
                        f"the pool is {pool.machine_type}",
                    )
                )
            out += rdma_mapping_refusals(region, cluster, pool, report)
            if key not in exists:
                needed.setdefault(report.name, []).append((key, pool.nodes))
    for name, pools in needed.items():
        report = reports[name]
        want = sum(n for _, n in pools)
        if want > report.free:
            listed = ", ".join(f"{k} ({n})" for k, n in pools)
            out.append(
                Refusal(
                    name,
                    f"capacity short: {listed} need {want} machines; the reservation has "
                    f"{report.free} free ({report.count} reserved, {report.in_use} in use)",
                )
            )
    return out
