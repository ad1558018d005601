"""A pool's node snapshot: what a task that listed the pool's nodes saw, recorded in the ledger
so that the read paths (fleet and pool pages, ``/metrics``, ``gpufleet status``) never list a
cluster. Counts follow the nodes' own definitions (``NodeInfo.ready``, ``.free``: what the gate
counts, ``.quarantined``, and running a training workload)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from gpufleet.store import Ledger

if TYPE_CHECKING:
    from gpufleet.backends.base import ClusterBackend
    from gpufleet.domain.fleet import PoolRef

log = logging.getLogger(__name__)


def summarize(nodes: Iterable[Any]) -> tuple[dict[str, int], list[dict[str, Any]]]:
    """(the counts, one dict per node) of a pool's listed nodes (``NodeInfo``)."""
    detail = [
        {
            "name": n.name,
            "ready": n.ready,
            "free": n.free,
            "quarantined": n.quarantined,
            "unvalidated": n.unvalidated,
            "workloads": len(n.workloads),
        }
        for n in nodes
    ]
    counts = {
        "nodes": len(detail),
        "ready": sum(d["ready"] for d in detail),
        "free": sum(d["free"] for d in detail),
        "quarantined": sum(d["quarantined"] for d in detail),
        "busy": sum(d["workloads"] > 0 for d in detail),
    }
    return counts, detail


def record_snapshot(
    ledger: Ledger,
    cluster: str,
    pool: str,
    nodes: Iterable[Any],
    *,
    source: str,
    run_id: str | None = None,
) -> None:
    """Record the pool's snapshot. A snapshot that cannot be recorded is logged, never raised:
    the task's own work (a verdict, a repair) matters more than the pages' view of it."""
    counts, detail = summarize(nodes)
    try:
        ledger.record_node_snapshot(cluster, pool, counts, detail, source=source, run_id=run_id)
    except Exception as exc:  # noqa: BLE001 - see above
        log.warning("%s/%s: node snapshot not recorded: %s", cluster, pool, exc)


def snapshot_pool(
    ref: PoolRef, ledger: Ledger, backend: ClusterBackend, *, source: str, run_id: str
) -> None:
    """List the pool's nodes (``ref``) now, after the task changed them, and
    record what they look like. Logged, never raised (see ``record_snapshot``)."""
    try:
        nodes = backend.list_nodes(ref.pool.name)
    except Exception as exc:  # noqa: BLE001 - the task's own outcome stands
        log.warning("%s: node snapshot not taken: %s", ref.key, exc)
        return
    record_snapshot(ledger, ref.cluster.name, ref.pool.name, nodes, source=source, run_id=run_id)
