"""A remediation campaign (issue 34): 30 nights of mixed faults, correlated ones among them,
through the real services on the simulated fleet (docs/remediation.md).

The structure is the GPU health campaign's (``bench.health_campaign``): each night faults go
onto random nodes in service (Xids whose NVIDIA action is a GPU reset, a reboot, the provider's
repair or a person; pending and failed row remaps; a double-bit ECC error; an NVLink down; a bad
NIC), a third of them onto a node that had a fault in the last week (a recurring node climbs the
ladder); then the nightly's per-pool work runs on every pool (``FabricValidation`` with its GPU
health check and retests, then ``NodeRemediation.step``), the sim's clock passing a day between
nights. A fault stays until what the lifecycle does clears it (a reboot clears Xids and a pending
remap, a repair everything); a node handed to a person is fixed by that person the next morning.

Some nights a **roll-out** fault (a bad driver: Xid 79) hits 30% of ``h200-a`` (10 nodes here) at
once, each node quarantined as its signal arrives (the event path's quarantine, with its GPU
health evidence): the pool breaker (``max(2, 20%)``) must trip and hold every drain, reboot and
repair in its scope; a person resets it the next morning (recorded: who, when, why).

It checks, from the ledger (``gf_node_events``, ``gf_breakers``):

- every fault handled by the rung NVIDIA's catalog names: the node's first action after the
  fault (its first move to ``repairing``, or to ``needs_human``) is the rung NVIDIA's action
  starts the ladder at; on a node given a rung in the last 7 days it climbs above every such
  rung, never below NVIDIA's; and no node has more than ``max_reboots`` (2) reboots in any 7 days;
- 0 healthy nodes acted on: no node left service, was drained or was rebooted/repaired while no
  fault was in force on it;
- 0 actions past a tripped breaker: no move to ``drained`` (the drain) or ``repairing`` (the
  reboot or repair) of a node in a breaker's scope between its trip and its reset (a move to
  ``draining`` is the retest's verdict only: the drain itself is the guarded action);

and reports MTTR: the mean sim time from a node leaving service to its release (computed here
from ``gf_node_events``), split into incidents the machine closed and those a person closed.

    python -m bench.remediation_campaign [--nights 30] [--seed 7]

Exits 1 when a promise breaks. The sim's clock is frozen and advanced.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from bench.health_campaign import DAY_S, FABRIC_FAULT, GPU_FAULTS, validate_fabric

ROOT = Path(__file__).resolve().parents[1]
ROLLOUT_POOL = ("a3u-sim", "h200-a")
ROLLOUT_NODES = 10  # h200-a grown to 10 nodes: 3 bad nodes are 30% of it
ROLLOUT_SHARE = 0.3
ROLLOUT_FAULT = "xid:{node}:79"  # a bad driver: GPUs fall off the bus
POOLS = [ROLLOUT_POOL, ("a3u-sim", "h200-b"), ("p5-sim", "h100-a")]
# the faults NVIDIA's catalog names an action for (an Xid 13 is the application's: not here)
FAULTS = {text: action for text, action in GPU_FAULTS.items() if action != "healthy"}
FAULTS[FABRIC_FAULT] = "repair"  # a bad NIC: no GPU health action, the provider's repair
LADDER = ("reset_gpu", "reboot", "repair", "needs_human")
REBOOTS = ("reset_gpu", "reboot")
WEEK = timedelta(days=7)
SETTLE = 6  # nights without a new fault at the end, for the last faults' actions
PERSON = "campaign-operator"


def write_catalog() -> Path:
    """The shipped sim catalog with h200-a (and its reservation) at ``ROLLOUT_NODES`` nodes."""
    data = yaml.safe_load((ROOT / "include" / "fleet" / "sim.yaml").read_text())
    region = data["regions"][0]
    pool = region["clusters"][0]["node_pools"][0]
    assert (region["clusters"][0]["name"], pool["name"]) == ROLLOUT_POOL
    pool["nodes"] = ROLLOUT_NODES
    next(r for r in region["reservations"] if r["name"] == pool["reservation"]["name"])["count"] = (
        ROLLOUT_NODES
    )
    folder = Path(tempfile.mkdtemp(prefix="gpufleet-remediation-catalog-"))
    (folder / "sim.yaml").write_text(yaml.safe_dump(data))
    return folder


def nightly(catalog, ledger, run_id: str) -> dict[str, Any]:
    """The nightly's per-pool work on every pool: the fabric validation (GPU health check,
    retests first), then the remediation pass. Returns each pool's remediation result."""
    from gpufleet.services.nodes.remediation import NodeRemediation

    results = {}
    for cluster, pool in POOLS:
        ref = catalog.pool(cluster, pool)
        validate_fabric(ref, ledger, run_id)
        results[ref.key] = NodeRemediation(ref, ledger, catalog=catalog).step(run_id)
    return results


def all_events(ledger) -> list[dict[str, Any]]:
    from sqlalchemy import select

    from gpufleet.store import schema as s

    e = s.node_events
    with ledger.engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(select(e).order_by(e.c.id)).all()]


def all_trips(ledger) -> list[dict[str, Any]]:
    from sqlalchemy import select

    from gpufleet.store import schema as s

    t = s.breakers
    with ledger.engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(select(t).order_by(t.c.id)).all()]


def _leaves(event: dict[str, Any]) -> bool:
    return event["from_state"] in (None, "released") and event["to_state"] != "released"


def _rung(event: dict[str, Any]) -> str | None:
    if event["to_state"] == "needs_human" and event["from_state"] != "needs_human":
        return "needs_human"
    if event["to_state"] == "repairing":
        evidence = event["evidence"] or {}
        return evidence.get("rung") or evidence.get("kind")
    return None


def check_rungs(faults: list[dict], events: list[dict], max_reboots: int) -> list[str]:
    """Each fault's first action after it: NVIDIA's rung, or a climb above the rungs the node
    was given in the 7 days before; and no node past ``max_reboots`` reboots in any 7 days.
    Fills each fault's ``action`` and ``acted_at``; returns the broken promises."""
    broken = []
    by_node: dict[str, list[dict]] = defaultdict(list)
    for e in events:
        by_node[e["node"]].append(e)
    for f in faults:
        start = LADDER.index(f["expected"])
        first = next(
            (e for e in by_node[f["node"]] if e["at"] >= f["at"] and _rung(e) is not None), None
        )
        if first is None:
            f["action"], f["ok"] = None, False
            broken.append(f"night {f['night']}: {f['fault']}: never acted on")
            continue
        rung = _rung(first)
        f["action"], f["acted_at"] = rung, first["at"]
        before = [
            _rung(e)
            for e in by_node[f["node"]]
            if e["at"] < f["at"] and e["at"] >= first["at"] - WEEK and e["to_state"] == "repairing"
        ]
        f["climbed_from"] = before
        # NVIDIA's rung; above every rung given in the last 7 days; past the reboot rungs once
        # the node had max_reboots reboots in them (docs/remediation.md)
        want = max([start] + [LADDER.index(r) + 1 for r in before if r in LADDER])
        want = min(want, len(LADDER) - 1)
        while LADDER[want] in REBOOTS and sum(r in REBOOTS for r in before) >= max_reboots:
            want += 1
        f["want"] = LADDER[want]
        ok = rung == LADDER[want]
        f["ok"] = ok
        if not ok:
            given = f"; given in the last 7 days: {before}" if before else ""
            broken.append(
                f"night {f['night']}: {f['fault']}: first action {rung}, not {f['want']} "
                f"(NVIDIA's rung {f['expected']}{given})"
            )
    for node, evs in by_node.items():
        boots = [e["at"] for e in evs if _rung(e) in REBOOTS]
        for at in boots:
            within = [b for b in boots if at - WEEK < b <= at]
            if len(within) > max_reboots:
                broken.append(f"{node}: {len(within)} reboots in the 7 days to {at}")
                break
    return broken


def healthy_acted_on(
    events: list[dict], in_force: dict[str, list[tuple[datetime, datetime | None]]]
) -> list[str]:
    """Moves out of service, drains and rungs on a node with no fault in force at the time
    (a person's moves are theirs, not the machine's)."""
    out = []
    for e in events:
        if e["by"]:
            continue
        acted = _leaves(e) or e["to_state"] in ("drained", "repairing")
        if not acted:
            continue
        spans = in_force.get(e["node"], [])
        if not any(a <= e["at"] and (b is None or e["at"] <= b) for a, b in spans):
            out.append(f"{e['node']}: {e['from_state']} -> {e['to_state']} at {e['at']}")
    return out


def past_breakers(events: list[dict], trips: list[dict]) -> list[str]:
    """Drains (moves to ``drained``) and rungs (moves to ``repairing``) in a breaker's scope
    while it was tripped."""
    out = []
    for e in events:
        if e["to_state"] not in ("drained", "repairing") or e["by"]:
            continue
        for t in trips:
            scope_key = {
                "pool": f"{e['cluster']}/{e['pool']}",
                "cluster": e["cluster"],
                "fleet": "fleet",
            }[t["scope"]]
            if t["key"] != scope_key:
                continue
            if t["tripped_at"] <= e["at"] and (t["reset_at"] is None or e["at"] < t["reset_at"]):
                out.append(
                    f"{e['node']}: {e['to_state']} at {e['at']} past the {t['scope']} breaker "
                    f"{t['key']} tripped at {t['tripped_at']}"
                )
    return out


def mttr(events: list[dict]) -> dict[str, list[float]]:
    """Hours from each node leaving service to its release, by who released it."""
    left: dict[tuple[str, str], datetime] = {}
    out: dict[str, list[float]] = {"machine": [], "person": []}
    for e in events:
        key = (e["cluster"], e["node"])
        if _leaves(e):
            left[key] = e["at"]
        elif e["to_state"] == "released" and key in left:
            hours = (e["at"] - left.pop(key)).total_seconds() / 3600
            out["person" if e["by"] else "machine"].append(hours)
    return out


def _mean(values: list[float]) -> str:
    return f"{statistics.mean(values):.1f} h (n={len(values)})" if values else "n/a"


def main(argv: list[str] | None = None) -> int:  # noqa: C901, PLR0915  a campaign read top to bottom
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nights", type=int, default=30)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)  # the services' alerts: the report below says what matters
    os.environ["GPUFLEET_STATE_DIR"] = tempfile.mkdtemp(prefix="gpufleet-remediation-campaign-")
    os.environ["GPUFLEET_CATALOG_DIR"] = str(write_catalog())
    for var in ("GPUFLEET_LEDGER_URL", "AIRFLOW_CONN_GPUFLEET_LEDGER", "GPUFLEET_SIM_SPEED"):
        os.environ.pop(var, None)

    from gpufleet.backends import cluster_backend
    from gpufleet.backends.sim.state import SimState
    from gpufleet.config.catalog import load_catalog
    from gpufleet.domain.nodes import NodeState
    from gpufleet.services.nodes.lifecycle import NodeLifecycle
    from gpufleet.store import Ledger

    rng = random.Random(args.seed)
    sim = SimState()
    sim.clock.freeze()
    catalog, ledger = load_catalog(), Ledger(clock=sim.clock)  # the ledger's times: sim time
    nodes_of = {
        key: [n.name for n in cluster_backend(catalog.cluster(key[0])).list_nodes(key[1])]
        for key in POOLS
    }
    assert len(nodes_of[ROLLOUT_POOL]) == ROLLOUT_NODES, nodes_of[ROLLOUT_POOL]
    pool_of = {n: key for key, nodes in nodes_of.items() for n in nodes}
    nightly(catalog, ledger, "night-0")  # a clean first night
    faults: list[dict] = []
    in_force: dict[str, list[tuple[datetime, datetime | None]]] = defaultdict(list)
    open_scopes: dict[str, str] = {}  # sim scope -> node
    rollouts: list[dict] = []
    resets: list[dict] = []
    rollout_due = False
    started = time.monotonic()

    def out_of_service() -> dict[str, dict]:
        return {
            r["node"]: r
            for key in POOLS
            for r in ledger.node_states(key[0], key[1], None)
            if r["state"] != NodeState.RELEASED.value
        }

    def inject(node: str, text: str, expected: str, night: int, scope: str) -> None:
        key = pool_of[node]
        fault = text.format(node=node)
        sim.inject(key[0], key[1], fault, scope=scope)
        now = ledger.clock.now()
        faults.append(
            {"night": night, "node": node, "fault": fault, "expected": expected, "at": now}
        )
        in_force[node].append((now, None))
        open_scopes[scope] = node

    def close_cleared() -> None:
        """Faults the lifecycle's reboot or repair (or a person) cleared are over now."""
        live = {f.fault.node for f in sim.faults(cluster=None)}
        now = ledger.clock.now()
        for scope, node in list(open_scopes.items()):
            if node not in live:
                del open_scopes[scope]
                in_force[node] = [(a, now if b is None else b) for a, b in in_force[node]]

    for night in range(1, args.nights + SETTLE + 1):
        run_id = f"night-{night}"
        # the morning: a person resets each tripped breaker (the bad driver rolled back)
        for trip in ledger.tripped_breakers():
            row = ledger.reset_breaker(trip["scope"], trip["key"], PERSON, "driver rolled back")
            resets.append(row)
        out = out_of_service()
        busy = {pool_of[n] for n in out} | {pool_of[n] for n in open_scopes.values()}
        free = [key for key in POOLS if key not in busy]
        if night <= args.nights:
            if night % 9 == 3:
                rollout_due = True
            if rollout_due and ROLLOUT_POOL in free:  # the correlated fault: 30% at once
                rollout_due = False
                free.remove(ROLLOUT_POOL)
                ref = catalog.pool(*ROLLOUT_POOL)
                lifecycle = NodeLifecycle(ref, ledger)
                hit = rng.sample(nodes_of[ROLLOUT_POOL], round(ROLLOUT_SHARE * ROLLOUT_NODES))
                for node in hit:
                    inject(node, ROLLOUT_FAULT, "reboot", night, f"rollout:{night}:{node}")
                    why = "GPU health: reboot: Xid 79 (GPU has fallen off the bus)"
                    lifecycle.quarantine(  # the event path's quarantine, as its signal arrives
                        node,
                        why,
                        {
                            "signal": {"source": "campaign"},
                            "health": {"action": "reboot", "reason": why},
                        },
                        run_id=f"events-{night}",
                    )
                rollouts.append({"night": night, "nodes": hit})
            recent = {
                f["node"]
                for f in faults
                if f["at"] >= ledger.clock.now() - WEEK and f["node"] not in out
            }
            for key in list(free):
                if rng.random() < 0.45:
                    continue
                again = [n for n in nodes_of[key] if n in recent]
                node = rng.choice(again if again and rng.random() < 0.35 else nodes_of[key])
                text, expected = rng.choice(sorted(FAULTS.items()))
                inject(node, text, expected, night, f"campaign:{night}:{node}")
        nightly(catalog, ledger, run_id)
        close_cleared()
        # a person fixes what was handed to them, the next morning
        for n, row in out_of_service().items():
            if row["state"] == NodeState.NEEDS_HUMAN.value:
                for scope in [s for s, node in open_scopes.items() if node == n]:
                    sim.clear(scope=scope)
                NodeLifecycle(catalog.pool(*pool_of[n]), ledger).release(
                    n, "fixed by hand (campaign)", by=PERSON, run_id=None
                )
        close_cleared()
        sim.clock.advance(DAY_S)
    took = time.monotonic() - started

    events, trips = all_events(ledger), all_trips(ledger)
    rung_broken = check_rungs(faults, events, catalog.remediation.max_reboots)
    healthy = healthy_acted_on(events, in_force)
    past = past_breakers(events, trips)
    repair_hours = mttr(events)
    rollout_trips = [
        t for t in trips if t["scope"] == "pool" and t["key"] == "/".join(ROLLOUT_POOL)
    ]
    missed_trips = [
        r["night"]
        for r in rollouts
        if not any(
            t["run_id"] in (f"night-{r['night']}", f"night-{r['night'] + 1}") for t in rollout_trips
        )
    ]

    print(f"remediation campaign: {args.nights} nights, seed {args.seed}, {took:.0f} s wall")
    for f in faults:
        climb = f" (climbed from {f['climbed_from']})" if f.get("climbed_from") else ""
        print(
            f"  night {f['night']:2d}: {f['fault']:38s} NVIDIA {f['expected']:11s} "
            f"first action {f.get('action') or 'NONE'}{climb}{'' if f['ok'] else '  <- BROKEN'}"
        )
    for r in rollouts:
        print(f"  roll-out night {r['night']}: {len(r['nodes'])} of {ROLLOUT_NODES} nodes")
    for t in trips:
        print(
            f"  breaker {t['scope']} {t['key']} tripped {t['tripped_at']} ({t['reason']}); "
            f"reset {t['reset_at']} by {t['reset_by']}"
        )
    recurring = sum(1 for f in faults if f.get("climbed_from"))
    handled = sum(1 for f in faults if f["ok"])
    print(
        f"faults handled by the rung NVIDIA's catalog names: {handled} of {len(faults)} "
        f"({recurring} on a node given a rung in the last 7 days, climbing)"
    )
    for line in rung_broken:
        print(f"    {line}")
    print(
        f"roll-outs: {len(rollouts)}, pool breaker trips: {len(rollout_trips)}, "
        f"roll-outs that did not trip it: {missed_trips or 0}; resets by a person: {len(resets)}"
    )
    print(f"healthy nodes acted on: {len(healthy)}")
    for line in healthy:
        print(f"    {line}")
    print(f"actions past a tripped breaker: {len(past)}")
    for line in past:
        print(f"    {line}")
    every = repair_hours["machine"] + repair_hours["person"]
    print(
        f"MTTR (sim time, leaving service to release): {_mean(every)}; closed by the machine "
        f"{_mean(repair_hours['machine'])}, by a person {_mean(repair_hours['person'])}"
    )
    ok = (
        not rung_broken
        and not healthy
        and not past
        and not missed_trips
        and bool(faults)
        and bool(every)
    )
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
