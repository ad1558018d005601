"""Read models of one pool for people: its nights (the pool page's charts and table), its GPU
health (its last health row and each node it found unhealthy), its quarantines, gate decisions,
launches and transitions, and a run's nightly report (the run tab).

A pool's history is one query over that pool, bounded by the nights the page draws, never by the
pool's whole history. No Airflow imports (the UI in ``gpufleet.airflow.ui`` renders these); the
fleet-wide readiness table is ``services.views.fleet``.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from gpufleet.domain.stages import LAUNCH
from gpufleet.domain.validation_kinds import ValidationKind
from gpufleet.services.views.cells import details_of
from gpufleet.services.views.cost import night_stages
from gpufleet.services.views.fleet import (
    LAUNCH_DAG,
    NIGHTLY_DAG,
    TRANSITION_DAG,
    pool_cost,
    verdict_text,
)
from gpufleet.services.views.health import health_summary
from gpufleet.services.views.racks import racks_view
from gpufleet.services.views.reliability import pool_reliability

if TYPE_CHECKING:
    from gpufleet.domain.fleet import Catalog
    from gpufleet.store import Ledger


def pool_nights(ledger: Ledger, cluster: str, pool: str, limit: int) -> list[dict[str, Any]]:
    """The pool's last ``limit`` nights, oldest first: one entry per run with a validation of
    it, from the last fabric, storage and health rows that run recorded (a retry supersedes
    the error its failed attempt recorded). One query over this pool's rows, newest first."""
    from sqlalchemy import select

    from gpufleet.store import schema as s

    v = s.validations
    q = (
        select(  # what a night shows: not the started_at, counts and names of every row
            v.c.id,
            v.c.cluster,
            v.c.pool,
            v.c.run_id,
            v.c.kind,
            v.c.passed,
            v.c.verdict,
            v.c.transport,
            v.c.busbw_gbps,
            v.c.baseline_gbps,
            v.c.read_mb_s,
            v.c.write_mb_s,
            v.c.expected_mb_s,
            v.c.reasons,
            v.c.details,
            v.c.finished_at,
        )
        .where(v.c.cluster == cluster, v.c.pool == pool)
        .order_by(v.c.id.desc())
        .limit(limit * 3 + 8)  # three kinds a night, and room for a few retries
    )
    with ledger.engine.connect() as conn:
        rows = [dict(r._mapping) for r in conn.execute(q)]
    runs: dict[str, dict[str, dict]] = {}
    for r in rows:  # newest first: the first row seen per (run, kind) is the last recorded
        runs.setdefault(r["run_id"], {}).setdefault(r["kind"], r)
    chosen = list(runs.items())[:limit]
    fab_kind = ValidationKind.FABRIC
    latency = ledger.small_latencies(k[fab_kind] for _, k in chosen if fab_kind in k)
    nights = []
    for run_id, kinds in reversed(chosen):
        fab = kinds.get(ValidationKind.FABRIC)
        sto = kinds.get(ValidationKind.STORAGE)
        hea = kinds.get(ValidationKind.HEALTH)
        first = fab or sto or hea or next(iter(kinds.values()))
        nights.append(
            {
                "run_id": run_id,
                "night": first["finished_at"].date().isoformat(),
                "busbw_gbps": fab["busbw_gbps"] if fab else None,
                "small_latency_us": latency.get(fab["id"]) if fab else None,
                "passed": all(k["passed"] is True for k in kinds.values()),
                "verdict": verdict_text(fab) if fab else None,
                "transport": fab["transport"] if fab else None,
                "read_mb_s": sto["read_mb_s"] if sto else None,
                "write_mb_s": sto["write_mb_s"] if sto else None,
                "lustre_verdict": verdict_text(sto) if sto else None,
                "health_verdict": verdict_text(hea) if hea else None,
                "reasons": [
                    *((fab or {}).get("reasons") or []),
                    *((sto or {}).get("reasons") or []),
                    *((hea or {}).get("reasons") or []),
                ],
                "baseline_gbps": fab["baseline_gbps"] if fab else None,
                "tolerance": details_of(fab).get("tolerance"),
                "expected_mb_s": sto["expected_mb_s"] if sto else None,
                "gpu_minutes_per_node": (pool_cost(fab, sto, hea) or {}).get("per_node"),
                "stages": night_stages([fab, sto, hea]),
            }
        )
    return nights


def pool_view(
    catalog: Catalog,
    ledger: Ledger,
    cluster: str,
    pool: str,
    nights: int = 60,
    now: datetime | None = None,
) -> dict[str, Any]:
    """Everything the pool page shows (``UnknownPool`` for a pool the catalog does not name):
    the nights, the baseline and the pass threshold, the Lustre expectation, GPU health (the
    last health row, each unhealthy node with its action and reasons; None: not checked yet),
    quarantines and nodes out of service, gate decisions, launches and transitions, each with
    the DAG that recorded it, and the reliability figures of the last 30 days (MTTR, MTBI,
    open incidents: ``services.views.reliability``). ``now``: for the health row's age and the
    reliability window (default: the clock)."""
    from gpufleet.config.baselines import find_baseline

    ref = catalog.pool(cluster, pool)  # GpufleetError names the pool and the known ones
    history = pool_nights(ledger, cluster, pool, nights)
    fabric = [n for n in history if n["baseline_gbps"] is not None]
    baseline = fabric[-1]["baseline_gbps"] if fabric else None
    if baseline is None:
        base = find_baseline(
            ref.pool.gpu.model, ref.pool.gpu.count, 2, "all_reduce", ref.pool.transport
        )
        baseline = base.busbw_gbps if base else None
    tolerances = [n["tolerance"] for n in history if n["tolerance"] is not None]
    tolerance = tolerances[-1] if tolerances else ref.pool.tolerance
    storage = [n["expected_mb_s"] for n in history if n["expected_mb_s"] is not None]
    expected = storage[-1] if storage else None
    if expected is None and ref.filesystem is not None:
        expected = ref.filesystem.expected_mb_s
    last = history[-1]["stages"] if history else {}
    total = sum(last.values())
    launch = sum(v for k, v in last.items() if k in LAUNCH)
    return {
        "region": ref.region.name,
        # where the last night's GPU time went, per node (domain.stages)
        "stages": [
            {"stage": k, "per_node": v, "share": v / total if total else None}
            for k, v in last.items()
        ],
        "stages_launch_share": launch / total if total else None,
        "cluster": cluster,
        "pool": pool,
        "shape": f"{ref.pool.gpu.count}x{ref.pool.gpu.model}",
        "expected_transport": ref.pool.transport,
        "nightly_dag": NIGHTLY_DAG,
        "nights": history,
        "baseline_gbps": baseline,
        "tolerance": tolerance,
        "tolerance_gbps": tolerance * baseline if baseline is not None else None,
        "expected_mb_s": expected,
        "health": health_summary(
            ledger.latest_validation(cluster, pool, ValidationKind.HEALTH),
            now or ledger.clock.now(),
        ),
        "racks": racks_view(ledger.latest_validation(cluster, pool, ValidationKind.FABRIC)),
        "state": ledger.pool_state(cluster, pool),
        "quarantined": ledger.quarantined(cluster, pool),
        "nodes_out": ledger.node_states(cluster, pool),
        "reliability": pool_reliability(ledger, cluster, pool, now or ledger.clock.now()),
        "gate_decisions": _gate_decisions(ledger, cluster, pool),
        "launches": _launches(ledger, cluster, pool),
        "transitions": _transitions(ledger, cluster, pool),
    }


def _gate_decisions(ledger: Ledger, cluster: str, pool: str, limit: int = 20) -> list[dict]:
    """The last ``limit`` gate decisions that considered this pool (newest first)."""
    from sqlalchemy import select

    from gpufleet.store import schema as s

    g = s.gate_decisions
    q = select(g).where(g.c.cluster == cluster).order_by(g.c.id.desc()).limit(limit * 10)
    with ledger.engine.connect() as conn:
        rows = [dict(r._mapping) for r in conn.execute(q)]
    mine = [r for r in rows if pool in (r["pools"] or []) or r["pool"] == pool]
    return [{**r, "dag_id": LAUNCH_DAG} for r in mine[:limit]]


def _launches(ledger: Ledger, cluster: str, pool: str, limit: int = 20) -> list[dict]:
    from sqlalchemy import select

    from gpufleet.store import schema as s

    t = s.launches
    q = (
        select(t)
        .where(t.c.cluster == cluster, t.c.pool == pool)
        .order_by(t.c.id.desc())
        .limit(limit)
    )
    with ledger.engine.connect() as conn:
        return [{**dict(r._mapping), "dag_id": LAUNCH_DAG} for r in conn.execute(q)]


def _transitions(ledger: Ledger, cluster: str, pool: str, limit: int = 10) -> list[dict]:
    """Transitions to or from this pool (newest first), each with its steps: two queries."""
    from sqlalchemy import or_, select

    from gpufleet.store import schema as s

    t, ts = s.transitions, s.transition_steps
    q = (
        select(t)
        .where(t.c.cluster == cluster, or_(t.c.from_pool == pool, t.c.to_pool == pool))
        .order_by(t.c.id.desc())
        .limit(limit)
    )
    with ledger.engine.connect() as conn:
        rows = [
            {**dict(r._mapping), "dag_id": TRANSITION_DAG, "steps": []} for r in conn.execute(q)
        ]
        by_id = {r["id"]: r for r in rows}
        if by_id:
            steps = select(ts).where(ts.c.transition_id.in_(list(by_id))).order_by(ts.c.id)
            for step in conn.execute(steps):
                by_id[step.transition_id]["steps"].append(dict(step._mapping))
    return rows


# --- a run's report ------------------------------------------------------------------------


def run_report(ledger: Ledger, catalog: Catalog, run_id: str) -> dict[str, str] | None:
    """The nightly report of ``run_id`` rendered from the ledger (``services.views.report``'s
    Markdown and HTML, as the nightly run wrote them), or None when the run validated nothing."""
    from gpufleet.domain.verdicts import latest_per_check
    from gpufleet.services.views.nightly_report import render_report

    rows = latest_per_check(ledger.validations_for_run(run_id))
    if not rows:
        return None
    md_text, html_text = render_report(ledger, catalog, run_id, rows)
    return {"markdown": md_text, "html": html_text}
