"""The nightly over a whole fleet, fanned out: one ``nightly_fabric_validation`` run per
cluster (per part of a cluster past ``pools_per_run`` pools), started by the
``nightly_fleet_validation`` planner.

Why: a DAG run maps its per-pool tasks, and Airflow fails a mapped task past ``[core]
max_map_length`` (1,024 by default) and runs at most ``max_active_tasks`` (16) tasks of one run
at once; a 2,000-pool fleet in one run cannot run at all. One run per cluster keeps each map
small, lets clusters run side by side (each run's own 16 tasks), and keeps a slow or failing
cluster from holding another's verdicts: each run records its own pools' verdicts as they come.

``plan_cluster_runs`` is the plan (pure: the pools come from ``scope.plan_scope``), and
``check_run_size`` the one rule a single run enforces on its own scope.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gpufleet.errors import GpufleetError

CHILD_DAG = "nightly_fabric_validation"
PLANNER_DAG = "nightly_fleet_validation"
POOLS_PER_RUN = 200  # default of ``[gpufleet] pools_per_run``
MAX_RUN_ID = 250  # Airflow's run_id column
# The run's settings a planner hands on to each cluster's run, as that DAG's Params name them.
SETTINGS = ("mode", "max_quarantine_share", "tolerance", "max_repairs", "repair_drain")


@dataclass(frozen=True)
class ClusterRun:
    """One run the planner starts: its run id, its cluster and pools (``cluster/pool`` keys)."""

    run_id: str
    cluster: str
    pools: tuple[str, ...]

    def trigger_kwargs(self, settings: dict[str, Any]) -> dict[str, Any]:
        """The mapping kwargs of the planner's ``TriggerDagRunOperator``: the run id, and the
        conf (``settings`` plus this run's pools)."""
        conf = {k: settings[k] for k in SETTINGS if k in settings}
        conf.update(pools=list(self.pools))
        return {"trigger_run_id": self.run_id, "conf": conf}


def check_pools_per_run(value: Any, max_map_length: int) -> int:
    """``[gpufleet] pools_per_run`` as read from Airflow's configuration: a whole number from 1
    to ``max_map_length`` (a run's mapped tasks must stay below Airflow's limit)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not (1 <= number <= max_map_length and number == int(number)):
        raise GpufleetError(
            f"[gpufleet] pools_per_run must be a whole number from 1 to {max_map_length} "
            f"([core] max_map_length), not {value!r}"
        )
    return int(number)


def check_run_size(pools: int, pools_per_run: int) -> None:
    """Refuse one run over more pools than ``pools_per_run``, saying how to run them."""
    if pools > pools_per_run:
        raise GpufleetError(
            f"{pools} pools in one {CHILD_DAG} run is more than [gpufleet] pools_per_run "
            f"({pools_per_run}): run {PLANNER_DAG}, which validates the fleet as one run per "
            f"cluster of at most {pools_per_run} pools each, or narrow regions, clusters or pools"
        )


def child_run_id(parent_run_id: str, cluster: str, part: int, parts: int) -> str:
    """``<planner run id>--<cluster>`` (``-<part>of<parts>`` when a cluster is split): the same
    for the same plan, so a retried planner task finds its run instead of starting another.
    A planner run id too long to carry it is shortened to a digest of itself."""
    suffix = f"--{cluster}" + (f"-{part}of{parts}" if parts > 1 else "")
    if len(parent_run_id) + len(suffix) > MAX_RUN_ID:
        parent_run_id = "run-" + hashlib.sha256(parent_run_id.encode()).hexdigest()[:16]
    return parent_run_id + suffix


def plan_cluster_runs(
    pools: Iterable[str],
    parent_run_id: str,
    pools_per_run: int,
) -> list[ClusterRun]:
    """One run per cluster of ``pools`` (``cluster/pool`` keys, each once), a cluster with
    more than ``pools_per_run`` split into near-equal parts. Ordered by cluster, then part."""
    by_cluster: dict[str, list[str]] = {}
    for key in dict.fromkeys(pools):
        by_cluster.setdefault(key.split("/", 1)[0], []).append(key)
    runs = []
    for cluster in sorted(by_cluster):
        keys = by_cluster[cluster]
        parts = math.ceil(len(keys) / pools_per_run)
        size = math.ceil(len(keys) / parts)
        for part in range(parts):
            chunk = tuple(keys[part * size : (part + 1) * size])
            runs.append(
                ClusterRun(
                    run_id=child_run_id(parent_run_id, cluster, part + 1, parts),
                    cluster=cluster,
                    pools=chunk,
                )
            )
    return runs


# The node states a remediation step acts on (``services.nodes.remediation``): draining ones
# it drains, drained ones it repairs, repairing ones the cloud may have replaced, and
# needs-human ones it pages for once.
REMEDIATED_STATES = ("draining", "drained", "repairing", "needs_human")


def pools_to_remediate(
    targets: Iterable[dict[str, str]], rows: Iterable[dict[str, Any]]
) -> list[dict[str, str]]:
    """The ``targets`` (``cluster``/``node_pool`` mappings, in their order) with a node the
    remediation step has something to do for, from the ledger's node ``rows``: one in a
    ``REMEDIATED_STATES`` state but a needs-human node already paged for. A healthy pool has
    none: the nightly maps no remediation task for it (a task per pool was a third of the
    nightly's tasks, docs/PERFORMANCE.md)."""
    due = {
        (r["cluster"], r["pool"])
        for r in rows
        if r["state"] in REMEDIATED_STATES
        and not (r["state"] == "needs_human" and (r.get("evidence") or {}).get("paged") is not None)
    }
    return [t for t in targets if (t["cluster"], t["node_pool"]) in due]
