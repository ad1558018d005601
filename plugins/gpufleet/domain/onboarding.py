"""What region onboarding refuses before it creates anything, and the order of its steps. Pure.

Design: docs/design/workflows.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from gpufleet.domain.fleet import Cluster, NodePool, Region
from gpufleet.domain.inputs import whole

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


# The protocols below are read-only (properties): the backends' reports are frozen dataclasses.


class ReservationReport(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def machine_type(self) -> str: ...
    @property
    def count(self) -> int: ...
    @property
    def in_use(self) -> int: ...
    @property
    def zone(self) -> str | None: ...
    @property
    def blocks(self) -> tuple[str, ...] | None: ...
    @property
    def free(self) -> int: ...


class SubBlockReport(Protocol):
    @property
    def key(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def hosts(self) -> int | None: ...
    @property
    def healthy_hosts(self) -> int | None: ...
    @property
    def degraded_hosts(self) -> int | None: ...


class ProviderView(Protocol):
    """The provider's health of a pool's reservation (its block) before the pool exists."""

    @property
    def reservation(self) -> str: ...
    @property
    def block(self) -> str | None: ...
    @property
    def subblocks(self) -> Sequence[SubBlockReport] | None: ...  # None: no host health reported
    @property
    def why(self) -> str | None: ...  # why there are no sub-blocks, when the provider says


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
    views: Mapping[str, ProviderView] | None = None,
) -> list[Refusal]:
    """Everything that stops onboarding ``region`` before a single create: machine types,
    capacity (with the figures) and the RDMA mapping, for every pool of every cluster, and
    the healthy hosts of the ``views`` read (``healthy_host_refusals``). ``reports``:
    reservation name -> what the cloud reported; ``existing_pools``: ``cluster/pool`` keys
    that exist already (they need no capacity); ``views``: ``cluster/pool`` -> the provider's
    view of the pool's reservation."""
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
    return out + healthy_host_refusals(region, views or {}, exists)


def host_counts(h: SubBlockReport) -> tuple[int | None, int | None, int | None]:
    """``(hosts, healthy, degraded)`` of a sub-block as the provider reports them (None: not
    reported); a figure that is not a host count is a ``ValueError`` naming it."""
    out = []
    for name in ("hosts", "healthy_hosts", "degraded_hosts"):
        value = getattr(h, name)
        if value is not None and not whole(value, 0):
            raise ValueError(f"sub-block {h.key}: {name} {value!r} is not a host count")
        out.append(value)
    return out[0], out[1], out[2]


def healthy_host_refusals(
    region: Region, views: Mapping[str, ProviderView], existing_pools: Iterable[str] = ()
) -> list[Refusal]:
    """The shortfalls of healthy hosts (module doc). ``views``: ``cluster/pool`` -> the
    provider's view of the pool's reservation (a pool without one is not judged);
    ``existing_pools``: ``cluster/pool`` keys that exist already (they hold their machines:
    not judged). Pools on one reservation and block share its hosts. A view of a pool the
    region does not have, or a figure that is not a host count, is a ``ValueError``."""
    pools = {f"{c.name}/{p.name}": p for c in region.clusters for p in c.active_pools}
    strangers = sorted(set(views) - set(pools))
    if strangers:
        raise ValueError(f"provider views of pools region {region.name} does not have: {strangers}")
    exists = set(existing_pools)
    asks: dict[tuple[str, str | None], tuple[ProviderView, list[tuple[str, int]]]] = {}
    for key, view in views.items():
        figures = [host_counts(h) for h in view.subblocks or ()]  # refused before any verdict
        if figures and key not in exists:
            scope = (view.reservation, view.block)
            asks.setdefault(scope, (view, []))[1].append((key, pools[key].nodes))
    out: list[Refusal] = []
    for view, listed in asks.values():
        subblocks = list(view.subblocks or ())
        figures = [host_counts(h) for h in subblocks]
        if any(healthy is None and hosts is None for hosts, healthy, _ in figures):
            continue  # hosts of unknown health, and how many not said: not judged
        healthy = sum(ok or 0 for _, ok, _ in figures)
        unknown = sum(n or 0 for n, ok, _ in figures if ok is None)
        want = sum(n for _, n in listed)
        bad = [h for h in subblocks if _not_all_healthy(h)]
        if want > healthy + unknown and bad:
            out.append(Refusal(view.reservation, _short(view, listed, want, bad, unknown)))
    return out


def _not_all_healthy(h: SubBlockReport) -> bool:
    """The provider reports a host of the sub-block degraded, or fewer healthy than it has."""
    hosts, healthy, degraded = host_counts(h)
    if healthy is None:
        return h.status == "DEGRADED"
    return h.status == "DEGRADED" or bool(degraded) or (hosts is not None and healthy < hosts)


def view_note(view: ProviderView, nodes: int) -> str:
    """The provider's view of a pool's reservation in a sentence, for the preflight's notes."""
    where = f"reservation {view.reservation}" + (f" block {view.block}" if view.block else "")
    if not view.subblocks:
        why = view.why or "the provider lists no sub-block of it"
        return f"{where}: {why}: healthy hosts not judged"
    healthy, degraded = _reported(view.subblocks)
    racks = ", ".join(
        f"{h.key} {h.status} {_or_q(h.healthy_hosts)}/{_or_q(h.degraded_hosts)}"
        for h in view.subblocks
    )
    return (
        f"{where}: the provider reports {healthy} healthy and {degraded} degraded hosts "
        f"(per sub-block, status healthy/degraded: {racks}); the pool asks {nodes}"
    )


def _short(
    view: ProviderView,
    listed: list[tuple[str, int]],
    want: int,
    bad: list[SubBlockReport],
    unknown: int,
) -> str:
    healthy, degraded = _reported(view.subblocks or ())
    where = f"block {view.block} of the reservation" if view.block else "the reservation"
    racks = ", ".join(
        f"{h.key} {_or_q(h.healthy_hosts)} healthy, {_or_q(h.degraded_hosts)} degraded of "
        f"{_or_q(h.hosts)} hosts"
        for h in bad
    )
    return (
        f"healthy hosts short: {', '.join(f'{k} ({n})' for k, n in listed)} need {want} "
        f"machines; the provider reports {healthy} healthy hosts in {where}, {degraded} "
        f"degraded (degraded sub-blocks: {racks})"
        + (f"; {unknown} hosts of no reported health counted as healthy" if unknown else "")
    )


def _reported(subblocks: Iterable[SubBlockReport]) -> tuple[int, int]:
    """The healthy and degraded hosts the provider reports over ``subblocks`` (unreported: 0)."""
    listed = list(subblocks)
    return sum(h.healthy_hosts or 0 for h in listed), sum(h.degraded_hosts or 0 for h in listed)


def _or_q(value: int | None) -> str:
    return "?" if value is None else str(value)
