"""Read models of the fleet for people: the readiness table (``gpufleet status`` and the UI's
fleet page) and the validation cost over the fleet; one pool's history and a run's report are
``services.views.pool``; what a health row says is ``services.views.health``.

One implementation for the terminal and the browser, so they never disagree about why a pool is
not ready. Reads scale with the fleet, never with its history: the readiness table reads every
pool's latest rows at once (``services.views.fleet_cache``: one statement per table, or only the
clusters whose ledger moved for the api-server, which keeps them), a pool's history is one query
over that pool. No Airflow imports (the UI in ``gpufleet.airflow.ui`` renders these;
``/metrics`` reads ``pool_verdicts``).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from gpufleet.domain.gate import DEFAULT_MAX_AGE, PoolState, pool_problems, problems_change_at
from gpufleet.domain.validation_kinds import ValidationKind
from gpufleet.services.views.cells import (
    age_text,
    fabric_text,
    gpu_minutes,
    lustre_text,
    verdict_text,
)
from gpufleet.services.views.fleet_cache import (
    FleetCache,
    FleetInputs,
    read_inputs,
)
from gpufleet.services.views.health import health_summary, health_text

if TYPE_CHECKING:  # kept out of import time: ``gpufleet status`` imports this module
    from gpufleet.domain.fleet import Catalog, PoolRef
    from gpufleet.domain.gate import PoolFacts
    from gpufleet.store import Ledger

# The DAG that records each kind of ledger row (links from the pages to its Airflow run).
NIGHTLY_DAG = "nightly_fabric_validation"
LAUNCH_DAG = "gated_training_launch"
TRANSITION_DAG = "reservation_transition"
DRIFTING = "drifting"  # a warning state: the pool may launch; its reason holds the figures
# (``domain.gate.PoolState.DRIFTING``; the readiness table shows it even when the pool is ready)


def pool_cost(*rows: dict | None) -> dict[str, Any] | None:
    """What one pool's validations (its fabric, storage and health rows of a night) cost, as
    the nightly report counts it (``services.views.report.validation_cost``): ``gpu_minutes``,
    ``per_node`` (GPU-minutes per node, fabric + storage + health) and ``nodes``; None if
    unmeasured."""
    from gpufleet.services.views.report import validation_cost

    costed = [r for r in rows if r and r.get("details")]  # a row without details has no cost
    if not costed:
        return None
    pools = validation_cost(costed)["pools"]
    return next(iter(pools.values()), None)


def _exists_unonboarded(ref) -> bool:
    """A cluster that exists without gpufleet's onboarding: a ``preexisting`` sim cluster. Any
    other pool that no onboarding, validation or remediation ever recorded is not onboarded
    (the ledger is all a read path asks)."""
    return ref.cluster.sim is not None and ref.cluster.sim.preexisting


class PoolVerdict(NamedTuple):
    """One pool as the readiness table judges it: its catalog entry, the gate's facts and
    problems (``ready`` when there are none), its state and the first reason it is not ready
    (``why``), its node snapshot (None: never seen) and nodes out of service by state."""

    ref: PoolRef
    fact: PoolFacts
    problems: list[str]
    state: str
    why: str
    seen: dict[str, Any] | None
    out_of_service: dict[str, int]

    @property
    def ready(self) -> bool:
        return not self.problems


def pool_verdicts(
    catalog: Catalog,
    ledger: Ledger,
    now: datetime,
    regions: list[str] | None = None,
    cache: FleetCache | None = None,
) -> tuple[list[PoolVerdict], FleetInputs]:
    """Each catalog pool's ``PoolVerdict`` (the rules of ``pool_readiness``) and the ledger's
    inputs they were judged on (``services.views.fleet_cache``: read fleet-wide once, or kept
    by ``cache`` between a long-lived reader's requests)."""
    inputs = (
        cache.inputs(catalog, ledger, regions) if cache else read_inputs(catalog, ledger, regions)
    )
    return judge(inputs, now), inputs


def judge(inputs: FleetInputs, now: datetime) -> list[PoolVerdict]:
    """The verdicts of ``inputs``' pools at ``now``: the gate's rules (``domain.gate.
    pool_problems``: a validation's age counts) and what the catalog and the regions say.

    Inputs a ``FleetCache`` keeps (``inputs.judged``) keep each cluster's verdicts too, for as
    long as they hold: the cluster's version and the regions' (``FLEET``) unchanged, and the
    clock before the first moment one of its pools' answer can change
    (``domain.gate.problems_change_at``: a validation turning stale; a stale one's age text
    moves, so a cluster with one is judged on every call) and not behind the time they were
    judged at. A scrape while a nightly moves a few clusters judges those few."""
    from gpufleet.store.schema_versions import FLEET

    memo, versions = inputs.judged, inputs.versions
    if memo is None or versions is None:
        return [_judge_pool(inputs, ref, now) for ref in inputs.refs]
    clusters: dict[str, list] = {}
    for ref in inputs.refs:
        clusters.setdefault(ref.cluster.name, []).append(ref)
    by_key: dict[str, PoolVerdict] = {}
    for cluster, refs in clusters.items():
        stamp = (versions.get(cluster), versions.get(FLEET))
        kept = memo.get(cluster)
        if (
            kept is not None
            and kept.stamp == stamp
            and kept.judged_at <= now
            and (kept.until is None or now < kept.until)
            and all(ref.key in kept.verdicts for ref in refs)
        ):
            by_key.update(kept.verdicts)
            continue
        verdicts = {ref.key: _judge_pool(inputs, ref, now) for ref in refs}
        memo[cluster] = _Judged(stamp, now, _holds_until(verdicts.values(), now), verdicts)
        by_key.update(verdicts)
    return [by_key[ref.key] for ref in inputs.refs]


class _Judged(NamedTuple):
    """A cluster's verdicts as ``judge`` keeps them: the versions (the cluster's, ``FLEET``)
    they were judged at, when, and until when the clock cannot change them (None: never)."""

    stamp: tuple
    judged_at: datetime
    until: datetime | None
    verdicts: dict[str, PoolVerdict]


def _holds_until(verdicts: Iterable[PoolVerdict], now: datetime) -> datetime | None:
    moments = [problems_change_at(v.fact, now, DEFAULT_MAX_AGE) for v in verdicts]
    return min((m for m in moments if m is not None), default=None)


def _judge_pool(inputs: FleetInputs, ref: PoolRef, now: datetime) -> PoolVerdict:
    cluster, name = ref.cluster.name, ref.pool.name
    fact = inputs.facts[ref.key]
    seen = inputs.snapshots.get((cluster, name))
    problems = pool_problems(fact, now, DEFAULT_MAX_AGE)
    region_state = (inputs.region_states.get(ref.region.name) or {}).get("state")
    if fact.state == "retired":
        problems.insert(0, "retired: remove from the catalog")
    elif ref.pool.planned and (cluster, name) not in inputs.transitioned:
        problems.insert(0, "planned: a reservation transition creates it")
    elif region_state in ("onboarding", "failed"):
        problems.insert(0, f"region: onboarding {region_state}")
    elif region_state is None and seen is None and not _exists_unonboarded(ref):
        problems.insert(0, "region: not onboarded (run region_onboarding)")
    state = str(fact.state.value if isinstance(fact.state, PoolState) else fact.state or "-")
    why = problems[0].split(": ", 1)[-1] if problems else ""
    if not why and state == DRIFTING:
        why = fact.state_reason or "drifting"
    lifecycle = inputs.lifecycle.get((cluster, name), {})
    return PoolVerdict(ref, fact, problems, state, why, seen, lifecycle)


def pool_readiness(
    catalog: Catalog,
    ledger: Ledger,
    now: datetime,
    regions: list[str] | None = None,
    cache: FleetCache | None = None,
) -> list[dict[str, Any]]:
    """One record per catalog pool: what the readiness table shows, typed (the JSON twin).

    The gate's own facts and rules (``services.launch.gate.gather_facts``, ``domain.gate.
    pool_problems``) decide ``ready`` and ``why``; a ``drifting`` pool shows its drift reason
    even while it is ready. Read from the ledger only, never a cluster: the nodes are each
    pool's node snapshot (``gf_node_snapshots``, taken by the last validation or remediation;
    its time is ``nodes_seen_at``). Fleet-wide, none of the history (``services.views.
    fleet_cache``; ``cache``: what a long-lived reader keeps between requests). ``health`` is
    what the pool's last health row says (None: not checked yet); it informs, the gate's rules
    decide ``ready``."""
    verdicts, inputs = pool_verdicts(catalog, ledger, now, regions, cache)
    reads = inputs.reads
    out = []
    for v in verdicts:
        ref, seen = v.ref, v.seen
        cluster, name = ref.cluster.name, ref.pool.name
        latest = reads.latest.get(cluster, {})
        ready_nodes = total = quarantined = None
        if seen is not None:
            ready_nodes, total, quarantined = seen["ready"], seen["nodes"], seen["quarantined"]
        fabric = latest.get((name, ValidationKind.FABRIC))
        storage = latest.get((name, ValidationKind.STORAGE))
        checked = latest.get((name, ValidationKind.HEALTH))
        out.append(
            {
                "region": ref.region.name,
                "cluster": cluster,
                "pool": name,
                "key": ref.key,
                "shape": f"{ref.pool.gpu.count}x{ref.pool.gpu.model}",
                "machine_type": ref.pool.machine_type,
                "expected_transport": ref.pool.transport,
                "nodes_ready": ready_nodes,
                "nodes": total,
                "free": v.fact.schedulable_nodes,
                "quarantined": quarantined,
                "nodes_seen_at": seen["taken_at"] if seen else None,
                "out_of_service": v.out_of_service,
                "state": v.state,
                "fabric": _validation_summary(fabric, now),
                "lustre": _validation_summary(storage, now),
                "health": health_summary(checked, now),
                "has_filesystem": ref.filesystem is not None,
                "ready": v.ready,
                "why": v.why,
                "problems": v.problems,
                "cost": (cost := pool_cost(fabric, storage, checked)),
                "gpu_minutes_per_node": cost["per_node"] if cost else None,
            }
        )
    return out


def _validation_summary(row: dict | None, now: datetime) -> dict[str, Any] | None:
    if row is None:
        return None
    return {
        "run_id": row["run_id"],
        "verdict": verdict_text(row),
        "transport": row["transport"],
        "busbw_gbps": row["busbw_gbps"],
        "read_mb_s": row["read_mb_s"],
        "write_mb_s": row["write_mb_s"],
        "finished_at": row["finished_at"],
        "age": age_text(now, row["finished_at"]),
        "gpu_minutes_per_node": gpu_minutes(row),
        "reasons": list(row["reasons"] or []),
    }


def readiness_rows(
    catalog: Catalog, ledger: Ledger, now: datetime, regions: list[str] | None = None
) -> list[dict[str, str]]:
    """The readiness table as ``gpufleet status`` prints it: column name -> text."""
    rows = []
    for p in pool_readiness(catalog, ledger, now, regions):
        rows.append(
            {
                "REGION": p["region"],
                "POOL": p["key"],
                "GPU": p["shape"],
                "EXPECT": p["expected_transport"],
                "NODES": "?" if p["nodes"] is None else f"{p['nodes_ready']}/{p['nodes']}",
                "FREE": "?" if p["free"] is None else str(p["free"]),
                "QUAR": "?" if p["quarantined"] is None else str(p["quarantined"]),
                "OUT": ",".join(f"{n} {s}" for s, n in sorted(p["out_of_service"].items())) or "-",
                "STATE": p["state"],
                "FABRIC": fabric_text(p),
                "LUSTRE": lustre_text(p),
                "HEALTH": health_text(p),
                "READY": "yes" if p["ready"] else "NO",
                "WHY": p["why"],
            }
        )
    return rows


def fleet_cost(pools: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The validation cost of the pools' last nights, totalled as the nightly report totals a
    run (``services.views.report.validation_cost``): GPU-minutes, and per node over the nodes the
    validations covered."""
    known = [p["cost"] for p in pools if p["cost"]]
    total = sum(c["gpu_minutes"] for c in known)
    nodes = sum(c["nodes"] for c in known)
    return {
        "pools_reporting": len(known),
        "gpu_minutes_total": total if known else None,
        "nodes": nodes,
        "gpu_minutes_per_node": total / nodes if nodes else None,
    }
