"""Reliability figures for people and Prometheus: each pool's and node's incidents, time to
repair (MTTR) and time between incidents (MTBI) over a window (``domain.reliability``), read from
the ledger's node moves (``gf_node_events``) alone, never from a cluster.

One query per read, bounded by the window: the moves recorded in it, plus per node the last
release and the last departure recorded before it (so an incident open when the window starts,
or the incident before the window's first, is known without reading the node's whole history).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from gpufleet.domain.nodes import IN_SERVICE
from gpufleet.domain.reliability import Move, Reliability, reliability

if TYPE_CHECKING:
    from gpufleet.store import Ledger

WINDOW = timedelta(days=30)


@dataclass(frozen=True)
class ReliabilityWindow:
    """The figures of a window ``[since, until]``: per pool ``(cluster, pool)`` and per node
    ``(cluster, pool, node)``."""

    since: datetime
    until: datetime
    pools: dict[tuple[str, str], Reliability]
    nodes: dict[tuple[str, str, str], Reliability]


def node_moves(
    ledger: Ledger, since: datetime, cluster: str | None = None, pool: str | None = None
) -> list[Move]:
    """The node moves the window needs (of ``cluster`` and ``pool`` when given), in recorded
    order: one query."""
    from sqlalchemy import and_, func, or_, select

    from gpufleet.store import schema as s

    e = s.node_events
    where = []
    if cluster is not None:
        where.append(e.c.cluster == cluster)
    if pool is not None:
        where.append(e.c.pool == pool)
    released = str(IN_SERVICE)
    left = and_(or_(e.c.from_state.is_(None), e.c.from_state == released), e.c.to_state != released)
    came_back = and_(e.c.to_state == released, e.c.from_state != released)

    def last_before(kind) -> Any:
        return (
            select(func.max(e.c.id))
            .where(e.c.at < since, kind, *where)
            .group_by(e.c.cluster, e.c.node)
        )

    q = (
        select(e.c.cluster, e.c.pool, e.c.node, e.c.from_state, e.c.to_state, e.c.at)
        .where(
            *where,
            or_(e.c.at >= since, e.c.id.in_(last_before(left)), e.c.id.in_(last_before(came_back))),
        )
        .order_by(e.c.id)
    )
    with ledger.engine.connect() as conn:
        return [Move(*row) for row in conn.execute(q)]


def reliability_window(
    ledger: Ledger,
    now: datetime,
    window: timedelta = WINDOW,
    cluster: str | None = None,
    pool: str | None = None,
) -> ReliabilityWindow:
    """The reliability figures of the ``window`` up to ``now`` (of ``cluster`` and ``pool`` when
    given)."""
    since = now - window
    moves = node_moves(ledger, since, cluster, pool)
    pools, nodes = reliability(moves, since, now)
    return ReliabilityWindow(since, now, pools, nodes)


def duration_text(seconds: float | None) -> str:
    """A duration for people: ``42m``, ``5.5h``, ``3.2d``; an em dash when there is none."""
    if seconds is None:
        return "—"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def pool_reliability(
    ledger: Ledger, cluster: str, pool: str, now: datetime, window: timedelta = WINDOW
) -> dict[str, Any]:
    """What the pool page shows: the window in days, the pool's MTTR and MTBI (seconds and
    text), incidents repaired and open, each open incident (node, since) and each node with
    incidents in the window (its MTTR, MTBI, counts, and since when it is out when open)."""
    got = reliability_window(ledger, now, window, cluster, pool)
    mine = got.pools.get((cluster, pool), Reliability())
    nodes = [
        {
            "node": node,
            "repaired": len(r.repair_seconds),
            "open": len(r.open),
            "mttr": duration_text(r.mttr_seconds),
            "mtbi": duration_text(r.mtbi_seconds),
            "open_since": r.open[0].start if r.open else None,
        }
        for (c, p, node), r in sorted(got.nodes.items())
        if (c, p) == (cluster, pool)
    ]
    return {
        "window_days": window.total_seconds() / 86400,
        "mttr_seconds": mine.mttr_seconds,
        "mtbi_seconds": mine.mtbi_seconds,
        "mttr": duration_text(mine.mttr_seconds),
        "mtbi": duration_text(mine.mtbi_seconds),
        "repaired": len(mine.repair_seconds),
        "open": [{"node": i.node, "since": i.start} for i in mine.open],
        "nodes": nodes,
    }


def report_lines(ledger: Ledger, now: datetime, window: timedelta = WINDOW) -> list[str]:
    """The nightly report's reliability section: a line per pool with incidents in the window
    (repaired or open), by cluster and pool."""
    got = reliability_window(ledger, now, window)
    days = f"{window.total_seconds() / 86400:g}"
    lines = []
    for (cluster, pool), r in sorted(got.pools.items()):
        if not r.incidents:
            continue
        lines.append(
            f"{cluster}/{pool}: {r.incidents} incident(s) in {days} days, "
            f"{len(r.repair_seconds)} repaired (MTTR {duration_text(r.mttr_seconds)}), "
            f"{len(r.open)} open, MTBI {duration_text(r.mtbi_seconds)}"
        )
    return lines
