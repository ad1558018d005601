"""The simulated fleet's provider view of its racks (``topology_api``; ``SimCloudBackend.
subblock_health`` / ``report_faulty_subblock`` delegate here).

Design: docs/design/simulated-fleet.md.
"""

from __future__ import annotations

import json
from typing import Any

from gpufleet.backends.base import EnsureAction, Ensured, ResourceStatus
from gpufleet.backends.sim.cloud_table import CloudTable
from gpufleet.backends.sim.topology import host_place, sim_place
from gpufleet.backends.topology_api import (
    DEGRADED,
    HEALTHY,
    REPORT_KIND,
    ReservationHealth,
    SubBlockHealth,
    split_key,
)
from gpufleet.domain.topology import Place
from gpufleet.errors import BackendError


def _places(cloud: CloudTable, pool: str) -> dict[Place, list[str]]:
    spec = cloud.cluster.pool(pool)
    with cloud.state.read() as conn:
        nodes = [
            row[0]
            for row in conn.execute(
                "SELECT name FROM nodes WHERE cluster=? AND pool=? ORDER BY name",
                (cloud.cluster.name, pool),
            )
        ]
    places: dict[Place, list[str]] = {}
    for node in nodes:
        places.setdefault(sim_place(spec, node), []).append(node)
    return places


def subblock_health(cloud: CloudTable, pool: str) -> list[SubBlockHealth]:
    """The pool's sub-blocks, degraded where a ``subblock-down`` fault is in force."""
    cloud._api_call("list sub-block health")
    down = cloud.faults(pool).down_subblocks
    reports = {r["key"]: r["reports"] for r in subblock_reports(cloud, pool)}
    out = []
    for place, nodes in sorted(_places(cloud, pool).items()):
        degraded = len(nodes) if place.subblock in down else 0
        out.append(
            SubBlockHealth(
                block=place.block,
                subblock=place.subblock,
                status=DEGRADED if degraded else HEALTHY,
                healthy_hosts=len(nodes) - degraded,
                degraded_hosts=degraded,
                hosts=len(nodes),
                detail={"nodes": nodes, "reports": reports.get(place.key, 0)},
            )
        )
    return out


def reservation_health(cloud: CloudTable, pool: str) -> ReservationHealth:
    """The pool's reservation's hosts by sub-block, degraded where a ``subblock-down`` fault
    of a pool on it is in force (none on an EKS-like cluster: see the module)."""
    cloud._api_call("read reservation sub-block health")
    spec = cloud.cluster.pool(pool)
    name = spec.reservation.name
    if cloud.cluster.shape == "eks":
        why = (
            "the sim mimics EKS, where EC2 reports no host health of a capacity reservation "
            "before instances run on it (its network nodes only)"
        )
        return ReservationHealth(name, None, None, why, {"network_nodes": [f"nn-{name}"]})
    on_it = [p.name for p in cloud.cluster.node_pools if p.reservation.name == name]
    down = set().union(*(cloud.faults(p).down_subblocks for p in on_it))
    hosts: dict[Place, int] = {}
    for index in range(cloud.reserved(name)):
        place = host_place(spec, index)
        hosts[place] = hosts.get(place, 0) + 1
    out = []
    for place, count in sorted(hosts.items()):
        degraded = count if place.subblock in down else 0
        status = DEGRADED if degraded else HEALTHY
        out.append(
            SubBlockHealth(place.block, place.subblock, status, count - degraded, degraded, count)
        )
    return ReservationHealth(name, spec.reservation.block, tuple(out))


def report_faulty_subblock(
    cloud: CloudTable, pool: str, key: str, reason: str, dry_run: bool
) -> Ensured:
    """Record a report of sub-block ``key`` of ``pool`` (see the module)."""
    cloud._api_call("report a faulty sub-block")
    split_key(key)
    known = sorted(p.key for p in _places(cloud, pool))
    if key not in known:
        raise BackendError(
            f"sim {cloud.cluster.name}: sub-block {key!r} is not a sub-block of pool {pool!r} "
            f"(its sub-blocks: {', '.join(known) or 'none'}): refusing to report it"
        )
    name = f"{pool}/{key}"
    url = cloud.url(REPORT_KIND, name)
    had = cloud.row(REPORT_KIND, name)
    now = cloud.state.clock.time()
    if had is not None and now < had["ready_at"]:
        return Ensured(
            REPORT_KIND, key, EnsureAction.FOUND, ResourceStatus.UPDATING, (), url, _detail(had)
        )
    if dry_run:
        return Ensured(
            REPORT_KIND, key, EnsureAction.WOULD_CREATE, ResourceStatus.ABSENT, console_url=url
        )
    body = {
        "pool": pool,
        "key": key,
        "reason": reason,
        "reported_at": now,
        "reports": (had or {}).get("reports", 0) + 1,
    }
    with cloud.state.tx() as conn:
        conn.execute(
            "DELETE FROM cloud WHERE cluster=? AND kind=? AND name=?",
            (cloud.cluster.name, REPORT_KIND, name),
        )
        cloud.insert(conn, REPORT_KIND, name, body)
    return Ensured(
        REPORT_KIND,
        key,
        EnsureAction.CREATED,
        ResourceStatus.UPDATING,
        (),
        url,
        _detail(cloud.row(REPORT_KIND, name)),
    )


def _detail(body: dict[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (body or {}).items() if k != "key"}


def subblock_reports(cloud: CloudTable, pool: str | None = None) -> list[dict[str, Any]]:
    """The sub-block reports recorded (the latest per sub-block, with how many it had)."""
    with cloud.state.read() as conn:
        rows = conn.execute(
            "SELECT body FROM cloud WHERE cluster=? AND kind=? ORDER BY name",
            (cloud.cluster.name, REPORT_KIND),
        ).fetchall()
    bodies = [json.loads(row["body"]) for row in rows]
    return [b for b in bodies if pool is None or b["pool"] == pool]
