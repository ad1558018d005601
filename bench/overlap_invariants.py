"""The overlap campaign's invariants (``overlap_campaign.py --check``), read from the gpufleet
ledger and the simulated fleet's own state after a case's runs: a list of violations, each a
sentence naming what is wrong. Run inside the case's environment (``GPUFLEET_STATE_DIR``,
``GPUFLEET_LEDGER_URL``)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from sqlalchemy import select

from gpufleet.backends.sim.state import SimState
from gpufleet.config.catalog import load_catalog
from gpufleet.domain.workloads import QUARANTINE_KEY, UNVALIDATED_KEY
from gpufleet.store import Ledger
from gpufleet.store import schema as s


def _rows(ledger: Ledger, table, *where) -> list[dict[str, Any]]:
    with ledger.engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(select(table).where(*where)).all()]


def _sim(sql: str, *args: Any) -> list[tuple]:
    with SimState().read() as conn:
        return list(conn.execute(sql, args))


def _nodes(cluster: str, pool: str) -> list[dict[str, Any]]:
    return [
        {"name": name, "taints": [t["key"] for t in json.loads(taints)]}
        for name, taints in _sim(
            "SELECT name, taints FROM nodes WHERE cluster=? AND pool=?", cluster, pool
        )
    ]


def _sim_table_exists(name: str) -> bool:
    return bool(_sim("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", name))


def common(ledger: Ledger) -> list[str]:
    """Every case: no run-scoped fault outlives its run; the ledger's quarantined nodes are
    exactly the fleet's quarantine-tainted ones."""
    out = []
    left = _sim("SELECT cluster, pool, fault, scope FROM faults WHERE scope LIKE 'run:%'")
    if left:
        out.append(f"run-scoped faults outlived their runs: {left}")
    out_of_service = {
        (r["cluster"], r["node"]): r["state"]
        for r in _rows(ledger, s.node_states)
        if r["state"] != "released"
    }
    tainted = {
        (cluster, name)
        for cluster, name, taints in _sim("SELECT cluster, name, taints FROM nodes")
        if any(t["key"] == QUARANTINE_KEY for t in json.loads(taints))
    }
    quarantined = {k for k, state in out_of_service.items() if state == "quarantined"}
    if not quarantined <= tainted or not tainted <= set(out_of_service):
        out.append(
            f"ledger and fleet disagree on nodes out of service: ledger {out_of_service}, "
            f"quarantine-tainted in the fleet {sorted(tainted)}"
        )
    if _sim_table_exists("calls"):
        created = Counter(
            (op, target)
            for op, target in _sim("SELECT op, target FROM calls WHERE effect = 'created'")
        )
        twice = {k: n for k, n in created.items() if n > 1}
        if twice:
            out.append(f"created more than once: {twice}")
        deleted = Counter(
            target for (target,) in _sim("SELECT target FROM calls WHERE effect = 'deleted'")
        )
        twice = {k: n for k, n in deleted.items() if n > 1}
        if twice:
            out.append(f"deleted more than once: {twice}")
    return out


def transition(ledger: Ledger, conf: dict[str, Any]) -> list[str]:
    cluster, old, new = conf["cluster"], conf["old_pool"], conf["new_pool"]
    out = []
    t = s.transitions
    rows = _rows(ledger, t, t.c.cluster == cluster)
    running = [r for r in rows if r["state"] == "running"]
    if running:
        out.append(f"a transition is still running after every run ended: {running}")
    pair = [r for r in rows if (r["from_pool"], r["to_pool"]) == (old, new)]
    if len(pair) != 1:
        out.append(f"{len(pair)} transitions {old} -> {new} (one expected): {pair}")
    if not pair:
        return out
    tr = pair[0]
    if tr["state"] != "done":
        out.append(f"transition {old} -> {new} ended {tr['state']} at {tr['step']}, not done")
    steps = Counter(r["step"] for r in ledger.transition_steps(tr["id"]))
    if any(n > 1 for n in steps.values()):
        out.append(f"steps recorded twice: {steps}")
    catalog = load_catalog()
    old_nodes, new_nodes = _nodes(cluster, old), _nodes(cluster, new)
    expected = catalog.pool(cluster, new).pool.nodes
    states = {
        r["pool"]: r["state"]
        for r in _rows(ledger, s.pool_state, s.pool_state.c.cluster == cluster)
    }
    if tr["state"] == "done":
        if old_nodes:
            out.append(f"{old} recorded retired but the fleet still has {len(old_nodes)} nodes")
        if states.get(old) != "retired":
            out.append(
                f"{old} is {states.get(old)!r} in the ledger after the transition, not retired"
            )
        if len(new_nodes) != expected:
            out.append(f"{new} has {len(new_nodes)} nodes, the catalog says {expected}")
        tainted = [n["name"] for n in new_nodes if UNVALIDATED_KEY in n["taints"]]
        if tainted:
            out.append(f"{new} is in service but {tainted} still carry the unvalidated taint")
        queue = _sim(
            "SELECT body FROM objects WHERE cluster=? AND kind='ClusterQueue' AND name=?",
            cluster,
            f"gpufleet-{new}",
        )
        if queue and json.loads(queue[0][0])["spec"].get("stopPolicy") not in (None, "None"):
            out.append(f"{new} is in service but its ClusterQueue is on hold")
    return out


def onboarding(ledger: Ledger, conf: dict[str, Any]) -> list[str]:
    region_name = conf["region"]
    out = []
    acts = _rows(ledger, s.onboarding_actions, s.onboarding_actions.c.region == region_name)
    created = Counter((a["kind"], a["name"]) for a in acts if a["action"] == "created")
    twice = {k: n for k, n in created.items() if n > 1}
    if twice:
        out.append(f"onboarding created these more than once: {twice}")
    region = next(iter(_rows(ledger, s.regions, s.regions.c.region == region_name)), None)
    state = region["state"] if region else None
    if state != "ready":
        out.append(f"region {region_name} is {state!r} after the runs, not ready")
    catalog = load_catalog()
    for ref in catalog.pools(regions=[region_name]):
        nodes = _nodes(ref.cluster.name, ref.pool.name)
        if len(nodes) != ref.pool.nodes:
            out.append(f"{ref.key} has {len(nodes)} nodes, the catalog says {ref.pool.nodes}")
        tainted = [n["name"] for n in nodes if UNVALIDATED_KEY in n["taints"]]
        if state == "ready" and tainted:
            out.append(f"region ready but {tainted} still carry the unvalidated taint")
    return out


def nightly(ledger: Ledger, conf: dict[str, Any]) -> list[str]:
    out = []
    v = s.validations
    per_run = Counter(  # an ``error`` row records an attempt that could not finish (retried)
        (r["run_id"], r["cluster"], r["pool"], r["kind"])
        for r in _rows(ledger, v)
        if r["verdict"] != "error"
    )
    twice = {k: n for k, n in per_run.items() if n > 1}
    if twice:
        out.append(f"a run recorded a pool's verdict more than once: {twice}")
    faulty = {
        spec.split("=", 1)[1].split(":", 1)[1]
        for spec in conf.get("sim_faults", ())
        if spec.split("=", 1)[1].startswith("bad-node:")
    }
    good_out = [
        r["node"]
        for r in _rows(ledger, s.node_states)
        if r["state"] != "released" and r["node"] not in faulty
    ]
    if good_out:
        out.append(f"good nodes taken out of service: {good_out}")
    return out


def launch(ledger: Ledger, conf: dict[str, Any]) -> list[str]:
    out = []
    job = conf["job_name"]
    rows = [  # a refused launch is a record of a refusal, not a job
        r for r in _rows(ledger, s.launches, s.launches.c.job == job) if r["state"] != "refused"
    ]
    if len(rows) > 1:
        runs = [(r["run_id"], r["state"]) for r in rows]
        out.append(f"{len(rows)} launches of job {job} went ahead (at most one): {runs}")
    objects = _sim(
        "SELECT body FROM objects WHERE kind='JobSet' AND namespace=? AND name=?",
        conf["namespace"],
        job,
    )
    if rows and not objects:
        out.append(f"the ledger has launch {job} but the cluster has no JobSet")
    if objects and rows:
        from gpufleet.manifests.labels import RUN_ID_ANNOTATION

        run = json.loads(objects[0][0])["metadata"].get("annotations", {}).get(RUN_ID_ANNOTATION)
        if run != rows[0]["run_id"]:
            out.append(f"JobSet {job} was created by {run}, the ledger says {rows[0]['run_id']}")
    return out


CHECKS = {
    "reservation_transition": transition,
    "region_onboarding": onboarding,
    "nightly_fabric_validation": nightly,
    "sim_fault_drill": nightly,  # the nightly's validation, its bad-node faults named in conf
    "gated_training_launch": launch,
}


def violations(dag_id: str, conf: dict[str, Any]) -> list[str]:
    ledger = Ledger()
    return common(ledger) + CHECKS[dag_id](ledger, conf)
