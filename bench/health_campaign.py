"""A GPU health campaign (issue 20): 30 nights of GPU faults mixed with fabric faults, through the
real services on the simulated fleet.

Each night one GPU fault (an Xid 79, 48, 61 or 13, a pending or failed row remap, a double-bit
ECC error, an NVLink down, a GPU throttling for heat) goes onto a random node in service, and
every third night a bad NIC onto another node of another pool. A fault is the hardware's: it
stays until what the node lifecycle does clears it (a reboot clears Xids and a pending remap, a
repair everything). The nightly's per-pool work then runs on every pool (the GPU health check
and fabric pairs, retests first; storage; the remediation pass), the sim's clock passing a
repair's time between nights. A node handed to a person is fixed by that person the next
morning (its faults cleared, `released` by hand). It reports:

- faults detected by the next nightly (the node quarantined that night, for the GPU health
  check's reason with the action NVIDIA recommends; an Xid 13 is an application's, left in
  service with a note);
- actions taken as NVIDIA recommends within two more nights (a reboot for a GPU reset or a
  reboot, the cloud's repair for hardware, a person for what only a person settles), on the
  remediation ladder (issue 34): a node given a rung in the last 7 days climbs above it
  (``domain.remediation.next_rung``, from the node's history when the fault lands);
- the breakers a person reset in the morning (a tripped breaker holds every action in its
  scope until then); the ledger keeps the sim's time, so the breakers' and the ladder's
  windows count simulated nights;
- healthy nodes taken out of service (a node moved out with no fault in force on it);
- the cost per node per night of the nightly tier (fabric + Lustre + the level-1/2 health
  check, from the ledger's rows) and of the weekly level 3 averaged over the week.

    python -m bench.health_campaign [--nights 30] [--seed 11]

Exits 1 unless every fault was detected, every action taken, and no healthy node taken out.
The sim's clock is frozen and advanced: the run takes about a minute whatever the nights.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

POOLS = [("a3u-sim", "h200-a"), ("a3u-sim", "h200-b"), ("p5-sim", "h100-a")]
# fault -> the action NVIDIA recommends (gpufleet.domain.health; docs/health.md)
GPU_FAULTS = {
    "xid:{node}:79": "reboot",
    "xid:{node}:48": "reset_gpu",
    "xid:{node}:61": "needs_human",
    "xid:{node}:13": "healthy",
    "row-remap-pending:{node}": "reset_gpu",
    "row-remap-failed:{node}": "repair",
    "ecc-dbe:{node}": "repair",
    "nvlink-down:{node}": "repair",
    "thermal-throttle:{node}": "repair",
}
FABRIC_FAULT = "bad-node:{node}:nic"
STEP_S = 0.5  # the sim clock's step while a workload runs
DAY_S = 86400.0
PERSON = "campaign-operator"  # who resets a tripped breaker in the morning
SETTLE = 3  # nights without a new fault at the end, for the last faults' actions


def _wait(backend, workload) -> None:
    from gpufleet.services.nodes.drain import backend_clock

    clock, waited = backend_clock(backend), 0.0
    while not backend.workload_status(workload.kind, workload.name, workload.namespace).done:
        if waited > 7200:
            raise TimeoutError(f"{workload.name} did not finish in 2 simulated hours")
        clock.advance(STEP_S)
        waited += STEP_S


def validate_fabric(ref, ledger, run_id: str):
    """A pool's fabric validation (with its GPU health round) to its verdict on the sim's
    clock: begin, wait for each workload, collect, finish. Returns ``finish``'s summary."""
    from gpufleet.services.nodes.drain import backend_clock
    from gpufleet.services.validation.fabric import FabricValidation

    fab = FabricValidation(ref, ledger)
    state = fab.begin(run_id)
    while state.workload or state.health_recheck_at is not None:
        if state.workload:
            _wait(fab.backend, state.workload)
            state = fab.collect(state)
            continue
        # nodes DCGM found in use: checked again once their recheck is due (as the operator
        # waits for it, deferred)
        clock = backend_clock(fab.backend)
        clock.advance(max(0.0, state.health_recheck_at - clock.time()))
        state = fab.recheck(state)
    return fab.finish(state)


def nightly(catalog, ledger, run_id: str, pools=POOLS) -> dict:
    """The nightly's per-pool work on each of ``pools`` (fabric with its GPU health round,
    storage, the remediation pass) on the sim's clock: (cluster, pool) -> their outcomes."""
    from gpufleet.services.nodes.remediation import NodeRemediation
    from gpufleet.services.validation.storage import StorageValidation

    out = {}
    for cluster, pool in pools:
        ref = catalog.pool(cluster, pool)
        fabric = validate_fabric(ref, ledger, run_id)
        sto = StorageValidation(ref, ledger)
        st = sto.begin(run_id)
        if st.workload:
            _wait(sto.backend, st.workload)
        storage = sto.finish(st)
        remediation = NodeRemediation(ref, ledger).step(run_id)
        out[(cluster, pool)] = {"fabric": fabric, "storage": storage, "remediation": remediation}
    return out


def night_cost(ledger, run_id: str) -> tuple[list[float], list[float]]:
    """Per pool: the nightly tier's GPU-minutes per node (fabric + storage + health levels 1
    and 2), and the weekly level 3's GPU-minutes per node of the pool that night."""
    tier, weekly = [], []
    rows = ledger.validations_for_run(run_id)
    for cluster, pool in POOLS:
        mine = [r for r in rows if (r["cluster"], r["pool"]) == (cluster, pool)]
        tier.append(sum(r["details"].get("gpu_minutes_per_node") or 0 for r in mine))
        health = [r for r in mine if r["kind"] == "health"]
        if health:
            d = health[0]["details"]
            nodes = sum(d.get("levels", {}).values()) or 1
            weekly.append(d.get("weekly_gpu_minutes", 0) / nodes)
    return tier, weekly


def main() -> int:  # noqa: C901  a campaign script read top to bottom: options, nights, tallies
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nights", type=int, default=30)
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()
    os.environ["GPUFLEET_STATE_DIR"] = tempfile.mkdtemp(prefix="gpufleet-health-campaign-")
    for var in ("GPUFLEET_LEDGER_URL", "AIRFLOW_CONN_GPUFLEET_LEDGER", "GPUFLEET_SIM_SPEED"):
        os.environ.pop(var, None)

    from gpufleet.backends import cluster_backend
    from gpufleet.backends.sim.state import SimState
    from gpufleet.config.catalog import load_catalog
    from gpufleet.domain.health import repair_kind
    from gpufleet.domain.nodes import NodeState
    from gpufleet.domain.remediation import next_rung
    from gpufleet.services.nodes.lifecycle import NodeLifecycle
    from gpufleet.store import Ledger

    rng = random.Random(args.seed)
    sim = SimState()
    clock = sim.clock
    clock.freeze()
    # the ledger's times are the sim's: the ladder's window (7 days), the breakers' (24 h) and
    # the Lustre full test's (a night) count simulated nights, not the seconds the run takes
    catalog, ledger = load_catalog(), Ledger(clock=clock)
    nodes_of = {
        key: [n.name for n in cluster_backend(catalog.cluster(key[0])).list_nodes(key[1])]
        for key in POOLS
    }
    pool_of = {n: key for key, nodes in nodes_of.items() for n in nodes}
    nightly(catalog, ledger, "night-0")  # a clean first night
    faulty: dict[str, tuple[int, str, str]] = {}  # node -> (night, fault, expected action)
    log: list[dict] = []
    healthy_out: list[tuple[int, str]] = []
    tier_costs: list[float] = []
    weekly_costs: list[float] = []
    started = time.monotonic()

    def out_of_service() -> dict[str, dict]:
        return {
            r["node"]: r
            for key in POOLS
            for r in ledger.node_states(key[0], key[1], None)
            if r["state"] != NodeState.RELEASED.value
        }

    def inject(node: str, text: str, expected: str, night: int) -> None:
        key = pool_of[node]
        sim.inject(key[0], key[1], text.format(node=node), scope=f"campaign:{node}")
        faulty[node] = (night, text.format(node=node), expected)
        # the action taken: the ladder's rung for NVIDIA's (issue 34), from the node's history
        # and this fault's incident (it leaves service now): a node given a rung in the last 7
        # days climbs above it
        rung = expected
        if expected != "healthy":
            now = ledger.clock.now()
            leaves = {"from_state": "released", "to_state": "quarantined", "at": now}
            history = [*ledger.node_history(key[0], node), leaves]
            rung = next_rung(history, expected, now).rung.value
        log.append(
            {
                "night": night,
                "node": node,
                "fault": text.format(node=node),
                "expected": expected,
                "rung": rung,
                "detected": None,
                "action": None,
            }
        )

    resets = 0
    for night in range(1, args.nights + SETTLE + 1):  # then nights for the last actions
        run_id = f"night-{night}"
        # the morning: a person looked at each tripped breaker (issue 34: a small pool with a
        # node out and two acted on trips it) and resets it, as `gpufleet node breaker-reset`
        for trip in ledger.tripped_breakers():
            ledger.reset_breaker(trip["scope"], trip["key"], PERSON, "faults looked at")
            resets += 1
        out = out_of_service()
        # a pool of 5 or 6 nodes may have one node out at a time (max_quarantine_share 0.2):
        # faults go onto pools with none out and none in force, or the cap would (rightly)
        # page instead of taking a second node out
        busy = {pool_of[n] for n in out} | {pool_of[n] for n in faulty}
        free = [key for key in POOLS if key not in busy]
        if night > args.nights:
            pass
        elif not free:
            log.append(
                {
                    "night": night,
                    "node": None,
                    "fault": "(every pool has a node out)",
                    "expected": "none",
                    "detected": True,
                    "action": True,
                }
            )
        else:
            key = rng.choice(free)
            text, expected = rng.choice(sorted(GPU_FAULTS.items()))
            inject(rng.choice(nodes_of[key]), text, expected, night)
            others = [k for k in free if k != key]
            if night % 3 == 0 and others:
                inject(rng.choice(nodes_of[rng.choice(others)]), FABRIC_FAULT, "repair", night)
        nightly(catalog, ledger, run_id)
        tier, weekly = night_cost(ledger, run_id)
        tier_costs += tier
        weekly_costs += weekly
        out = out_of_service()
        for entry in log:
            n = entry["node"]
            if n is None:
                continue
            row = out.get(n)
            history = [e for e in ledger.node_history(pool_of[n][0], n) if e["run_id"]]
            if entry["night"] == night:  # detection, by this (the next) nightly
                if entry["expected"] == "healthy":
                    entry["detected"] = n not in out
                    entry["action"] = entry["detected"]  # the action is none: left in service
                    faulty.pop(n, None)
                    sim.clear(scope=f"campaign:{n}")  # the application restarted
                elif entry["fault"].startswith("bad-node"):
                    entry["detected"] = row is not None and row["state"] == "quarantined"
                else:
                    health = (row or {}).get("evidence", {}).get("health") or {}
                    entry["detected"] = health.get("action") == entry["expected"]
            elif entry["action"] is None and night - entry["night"] <= 3:
                if entry["rung"] == "needs_human":
                    took = any(e["to_state"] == "needs_human" for e in history)
                else:
                    want = repair_kind({"action": entry["rung"]})
                    took = any(
                        e["to_state"] == "repairing"
                        and (e["evidence"] or {}).get("kind", "repair") == want
                        for e in history
                    )
                if took:
                    entry["action"] = True
        # healthy nodes taken out: out of service with no fault in force on them
        in_force = {f.fault.node for f in sim.faults(cluster=None)}
        for n, row in out.items():
            if (
                n not in in_force
                and row["state"] == "quarantined"
                and not any(e["node"] == n and e["night"] >= night - 3 for e in log)
            ):
                healthy_out.append((night, n))
        # a person fixes what was handed to them, the next morning
        for n, row in out.items():
            if row["state"] == NodeState.NEEDS_HUMAN.value:
                key = pool_of[n]
                sim.clear(scope=f"campaign:{n}")
                faulty.pop(n, None)
                NodeLifecycle(catalog.pool(*key), ledger).release(
                    n, "fixed by hand (campaign)", by="campaign", run_id=None
                )
        # faults the lifecycle's reboot or repair cleared are no longer the node's
        in_force = {f.fault.node for f in sim.faults(cluster=None)}
        for n in [n for n in faulty if n not in in_force]:
            faulty.pop(n)
        clock.advance(DAY_S)  # the next night (a repair or a reboot is over by then)
    took = time.monotonic() - started
    for entry in log:
        if entry["action"] is None:
            entry["action"] = False
    skipped = [e["night"] for e in log if e["node"] is None]
    log = [e for e in log if e["node"] is not None]
    gpu = [e for e in log if not e["fault"].startswith("bad-node")]
    print(f"GPU health campaign: {args.nights} nights, seed {args.seed}, {took:.0f} s wall")
    for e in log:
        climbed = f" (the ladder: {e['rung']})" if e["rung"] != e["expected"] else ""
        print(
            f"  night {e['night']:2d}: {e['fault']:40s} -> {e['expected']:11s} "
            f"{'detected' if e['detected'] else 'MISSED'}, "
            f"{'action taken' if e['action'] else 'NO ACTION'}{climbed}"
        )
        if not (e["detected"] and e["action"]):
            moves = [
                f"{ev['run_id']}:{ev['to_state']}"
                for ev in ledger.node_history(pool_of[e["node"]][0], e["node"])
            ]
            print(f"      its moves: {', '.join(moves) or 'none'}")
    detected = sum(bool(e["detected"]) for e in log)
    acted = sum(bool(e["action"]) for e in log)
    if skipped:
        print(f"nights without a new fault (every pool had a node out): {skipped}")
    print(f"faults detected by the next nightly: {detected} of {len(log)} ({len(gpu)} GPU)")
    print(f"actions taken as NVIDIA recommends (within 3 nights): {acted} of {len(log)}")
    print(f"healthy nodes taken out of service: {len(healthy_out)} {healthy_out or ''}")
    print(f"breakers a person reset in the morning: {resets}")
    print(
        "cost per node per night (GPU-minutes): nightly tier (fabric + Lustre + health L1/L2) "
        f"mean {statistics.mean(tier_costs):.2f}, max {max(tier_costs):.2f}; weekly level 3 "
        f"averaged over the week {statistics.mean(weekly_costs):.2f}"
    )
    ok = detected == len(log) and acted == len(log) and not healthy_out
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
