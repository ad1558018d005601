"""A simulated fault campaign: 30 nights, one random fault per night, through the real services.

Each night one fault is injected into one pool of the simulated fleet (chosen at random among
fabric-down, bad-node, bad-node NIC, lustre-slow and none), the nightly's per-pool work runs on
every pool in service (the fabric validation, which retests nodes out of service first; the
storage validation; the remediation pass: drain, repair within the budget, page), the gate is
asked for a launch onto every pool, and the fault is cleared at dawn. It reports:

- faults detected by the next nightly (the pool failed, or the bad node was quarantined);
- good nodes quarantined (a node quarantined while nothing was wrong with it);
- launches the gate allowed onto a pool known bad that night;
- nights a quarantined node stayed out of service after its fault was cleared or repaired.

    python -m bench.fault_campaign [--nights 30] [--seed 7]

Exits 1 unless every fault was detected, no good node was quarantined, no launch went onto a
known-bad pool, and every quarantined node was back in service within two nights.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

POOLS = [("a3u-sim", "h200-a"), ("a3u-sim", "h200-b"), ("p5-sim", "h100-a")]
FAULTS = ("fabric-down", "bad-node", "bad-node-nic", "lustre-slow", "none")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nights", type=int, default=30)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    state_dir = tempfile.mkdtemp(prefix="gpufleet-campaign-")
    os.environ["GPUFLEET_STATE_DIR"] = state_dir
    for var in ("GPUFLEET_LEDGER_URL", "AIRFLOW_CONN_GPUFLEET_LEDGER", "GPUFLEET_SIM_SPEED"):
        os.environ.pop(var, None)

    from bench.health_campaign import DAY_S
    from bench.health_campaign import nightly as campaign_night
    from gpufleet.backends import cluster_backend
    from gpufleet.backends.sim.state import SimState
    from gpufleet.config.catalog import load_catalog
    from gpufleet.services.launch.gate import check_gate
    from gpufleet.store import Ledger

    rng = random.Random(args.seed)
    sim = SimState()
    sim.clock.freeze()
    # the nights are the sim's, and so are the ledger's times: the breakers' and the ladder's
    # windows, a node's night of rotation, count simulated nights (bench.health_campaign)
    catalog, ledger = load_catalog(), Ledger(clock=sim.clock)
    nodes_of = {
        key: [n.name for n in cluster_backend(catalog.cluster(key[0])).list_nodes(key[1])]
        for key in POOLS
    }
    campaign_night(catalog, ledger, "night-0", POOLS)  # a clean first night: all validated
    faults, detected, good_quarantined, bad_launches = [], 0, [], []
    out_since: dict[str, int] = {}  # node -> night its fault was cleared (or repaired)
    late: list[tuple[str, int]] = []
    started = time.monotonic()
    for night in range(1, args.nights + 1):
        kind = rng.choice(FAULTS)
        key = rng.choice(POOLS)
        node = rng.choice(nodes_of[key])
        fault = {
            "fabric-down": "fabric-down",
            "bad-node": f"bad-node:{node}",
            "bad-node-nic": f"bad-node:{node}:nic",
            "lustre-slow": "lustre-slow",
        }.get(kind)
        if fault:
            sim.inject(key[0], key[1], fault, scope="campaign")
        results = campaign_night(catalog, ledger, f"night-{night}", POOLS)
        res = results[key]
        quarantined_now = {r["node"] for r in ledger.quarantined()}
        if kind in ("fabric-down", "bad-node", "bad-node-nic"):
            hit = not res["fabric"].passed or node in quarantined_now
        elif kind == "lustre-slow":
            hit = not res["storage"].passed
        else:
            hit = True
        detected += int(hit and kind != "none")
        faults.append((night, kind, key, node if "node" in kind else None, hit))
        bad_nodes = {node} if "node" in kind else set()
        for r in ledger.quarantined():
            if r["node"] not in bad_nodes and r["node"] not in out_since:
                good_quarantined.append((night, r["node"]))
        if kind in ("fabric-down", "lustre-slow"):
            decision = check_gate(catalog, lambda: ledger, key[0], [key[1]], 1)
            if decision.launch:
                bad_launches.append((night, key))
        sim.clear(scope="campaign")  # the fault is gone at dawn (cleared or repaired)
        for r in ledger.quarantined():
            out_since.setdefault(r["node"], night)
        for n, since in list(out_since.items()):
            if n not in {r["node"] for r in ledger.quarantined()}:
                del out_since[n]
            elif night - since > 2:
                late.append((n, night - since))
        sim.clock.advance(DAY_S)  # the next night; simulated repairs are done by then
    took = time.monotonic() - started
    injected = sum(1 for f in faults if f[1] != "none")
    print(f"fault campaign: {args.nights} nights, seed {args.seed}, {took:.0f} s")
    for night, kind, key, node, hit in faults:
        print(
            f"  night {night:2d}: {kind:13s} {key[0]}/{key[1]}{' ' + node if node else ''}"
            f" -> {'detected' if hit else 'MISSED'}"
        )
    print(f"faults detected by the next nightly: {detected} of {injected}")
    print(f"good nodes quarantined: {len(good_quarantined)} {good_quarantined or ''}")
    print(f"launches onto a known-bad pool: {len(bad_launches)} {bad_launches or ''}")
    print(
        f"quarantined nodes out of service > 2 nights after the fault went: {len(late)}"
        f" {sorted(set(late)) or ''}"
    )
    ok = detected == injected and not good_quarantined and not bad_launches and not late
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
