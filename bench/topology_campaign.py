"""A topology campaign (issue 19): 30 nights of faults at node, sub-block and block scope through
the real services, on a simulated fleet whose pools span racks and blocks.

The shipped sim catalog with two bigger pools: ``a3u-sim/h200-a`` at 12 nodes in one block
(three sub-blocks of four) and ``a3u-sim/h200-b`` at 16 nodes over two blocks of two sub-blocks.
Each night one fault goes onto one of them: a bad NIC on a node, a sub-block's uplink down
(``subblock-down``), or a block's spine slow (``block-slow``, on the two-block pool). A node's
fault stays until the lifecycle's repair clears it; a rack's or a block's is fixed by the
provider three nights later. The nightly's per-pool work runs (GPU health and fabric by scope,
retests first; the remediation pass), and the gate is asked for a launch onto each pool. It
reports:

- faults localized to their scope by the next nightly (the node quarantined alone; the
  sub-block's nodes quarantined as a unit; the block reported slow and the pool paged);
- good nodes taken out: a node out of service outside every faulty scope in force;
- nights a degraded sub-block's node stayed free (schedulable) while the gate allowed a launch
  onto its pool: a job could have been placed across the bad uplink;
- what pass 1 costs by scope: pairs per node (a flat plan's is one per two nodes) and the fabric
  GPU-minutes per node per night.

    python -m bench.topology_campaign [--nights 30] [--seed 5]

Exits 1 unless every fault was localized to its scope, no good node was taken out, and no
launch could go across a degraded sub-block.
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

import yaml

ROOT = Path(__file__).resolve().parents[1]

CLUSTER = "a3u-sim"
RACKED, BLOCKS = "h200-a", "h200-b"
SIZES = {RACKED: 12, BLOCKS: 16}
SUBBLOCKS = {
    RACKED: ["block-1-sb1", "block-1-sb2", "block-1-sb3"],
    BLOCKS: ["res-a3u-b-b1-sb1", "res-a3u-b-b1-sb2", "res-a3u-b-b2-sb1", "res-a3u-b-b2-sb2"],
}
BLOCK_IDS = ["res-a3u-b-b1", "res-a3u-b-b2"]
HEAL_NIGHTS = 3  # the provider fixes a rack or a block after this many nights
DAY_S = 86400.0


def catalog_dir() -> Path:
    """The shipped sim catalog with the two bigger pools."""
    data = yaml.safe_load((ROOT / "include" / "fleet" / "sim.yaml").read_text())
    region = data["regions"][0]
    for reservation, pool in zip(
        region["reservations"][:2], region["clusters"][0]["node_pools"][:2], strict=True
    ):
        reservation["count"] = pool["nodes"] = SIZES[pool["name"]]
    folder = Path(tempfile.mkdtemp(prefix="gpufleet-topology-catalog-"))
    (folder / "sim.yaml").write_text(yaml.safe_dump(data))
    return folder


def nightly(catalog, ledger, run_id: str) -> dict:
    from bench.health_campaign import validate_fabric
    from gpufleet.services.nodes.remediation import NodeRemediation

    out = {}
    for pool in SIZES:
        ref = catalog.pool(CLUSTER, pool)
        out[pool] = validate_fabric(ref, ledger, run_id)
        NodeRemediation(ref, ledger).step(run_id)
    return out


def main() -> int:  # noqa: C901  a campaign script read top to bottom: options, nights, tallies
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nights", type=int, default=30)
    parser.add_argument("--seed", type=int, default=5)
    args = parser.parse_args()
    os.environ["GPUFLEET_STATE_DIR"] = tempfile.mkdtemp(prefix="gpufleet-topology-campaign-")
    os.environ["GPUFLEET_CATALOG_DIR"] = str(catalog_dir())
    for var in ("GPUFLEET_LEDGER_URL", "AIRFLOW_CONN_GPUFLEET_LEDGER", "GPUFLEET_SIM_SPEED"):
        os.environ.pop(var, None)

    from gpufleet.backends import cluster_backend
    from gpufleet.backends.sim.state import SimState
    from gpufleet.backends.sim.topology import sim_place
    from gpufleet.config.catalog import load_catalog
    from gpufleet.services.launch.gate import check_gate
    from gpufleet.store import Ledger

    rng = random.Random(args.seed)
    sim = SimState()
    sim.clock.freeze()
    # the ledger's times are the sim's nights, as bench.health_campaign's are
    catalog, ledger = load_catalog(), Ledger(clock=sim.clock)
    backend = cluster_backend(catalog.cluster(CLUSTER))
    nodes_of = {p: [n.name for n in backend.list_nodes(p)] for p in SIZES}
    rack_of = {
        n: sim_place(catalog.pool(CLUSTER, p).pool, n).subblock for p in SIZES for n in nodes_of[p]
    }
    block_of = {
        n: sim_place(catalog.pool(CLUSTER, p).pool, n).block for p in SIZES for n in nodes_of[p]
    }
    nightly(catalog, ledger, "night-0")
    log: list[dict] = []
    in_force: list[dict] = []  # faults not yet fixed: {"pool", "kind", "id", "night", "scope"}
    good_out: list[tuple[int, str]] = []
    bad_launches: list[tuple[int, str]] = []  # a degraded rack's node free, the gate saying go
    pairs_per_node: list[float] = []
    cost: list[float] = []
    started = time.monotonic()

    def out_of_service(pool: str) -> dict[str, str]:
        return {
            r["node"]: r["state"]
            for r in ledger.node_states(CLUSTER, pool, None)
            if r["state"] != "released"
        }

    for night in range(1, args.nights + 1):
        run_id = f"night-{night}"
        busy_pools = {f["pool"] for f in in_force}
        free_pools = [p for p in SIZES if p not in busy_pools and not out_of_service(p)]
        fault = None
        if free_pools:
            pool = rng.choice(free_pools)
            kinds = ["node", "subblock"] + (["block"] if pool == BLOCKS else [])
            kind = rng.choice(kinds)
            if kind == "node":
                target = rng.choice(nodes_of[pool])
                text = f"bad-node:{target}:nic"
            elif kind == "subblock":
                target = rng.choice(SUBBLOCKS[pool])
                text = f"subblock-down:{target}"
            else:
                target = rng.choice(BLOCK_IDS)
                text = f"block-slow:{target}"
            scope = f"campaign-{night}"
            sim.inject(CLUSTER, pool, text, scope=scope)
            fault = {"pool": pool, "kind": kind, "id": target, "night": night, "scope": scope}
            in_force.append(fault)
        results = nightly(catalog, ledger, run_id)
        if fault:
            pool, kind, target = fault["pool"], fault["kind"], fault["id"]
            out = out_of_service(pool)
            row = ledger.latest_validation(CLUSTER, pool, "fabric")
            if kind == "node":
                hit = set(out) == {target}
            elif kind == "subblock":
                members = {n for n in nodes_of[pool] if rack_of[n] == target}
                hit = set(out) == members and any(
                    k.endswith("/" + target) for k in row["details"].get("bad_subblocks", {})
                )
            else:
                hit = bool(row["details"].get("slow_blocks")) and results[pool].page and not out
            log.append({**fault, "localized": hit})
        for pool in SIZES:  # good nodes out: outside every faulty scope in force
            faulty = set()
            for f in in_force:
                if f["pool"] != pool:
                    continue
                if f["kind"] == "node":
                    faulty.add(f["id"])
                elif f["kind"] == "subblock":
                    faulty |= {n for n in nodes_of[pool] if rack_of[n] == f["id"]}
                else:
                    faulty |= {n for n in nodes_of[pool] if block_of[n] == f["id"]}
            recent = {
                f["id"] for f in log if f["pool"] == pool and night - f["night"] <= HEAL_NIGHTS
            }
            for node in out_of_service(pool):
                if node not in faulty and rack_of[node] not in recent and node not in recent:
                    good_out.append((night, node))
            degraded = {
                k.split("/", 1)[1]
                for k in (
                    ledger.latest_validation(CLUSTER, pool, "fabric")["details"].get(
                        "bad_subblocks"
                    )
                    or {}
                )
            }
            free = {n.name for n in backend.list_nodes(pool) if n.free}
            if degraded and any(rack_of[n] in degraded for n in free):
                decision = check_gate(catalog, lambda: ledger, CLUSTER, [pool], 2)
                if decision.launch:
                    bad_launches.append((night, pool))
            row = ledger.latest_validation(CLUSTER, pool, "fabric")
            pass1 = [p for p in ledger.pairs(row["id"]) if p["pass_no"] == 1]
            if row["run_id"] == run_id and row["nodes_tested"]:
                pairs_per_node.append(len(pass1) / row["nodes_tested"])
                cost.append(row["details"].get("gpu_minutes_per_node") or 0)
        # the provider fixes racks and blocks after HEAL_NIGHTS; node faults wait for a repair
        for f in list(in_force):
            fixed = f["kind"] != "node" and night - f["night"] >= HEAL_NIGHTS - 1
            repaired = f["kind"] == "node" and not any(
                a.fault.node == f["id"] for a in sim.faults(cluster=CLUSTER)
            )
            if fixed or repaired:
                sim.clear(scope=f["scope"])
                in_force.remove(f)
        sim.clock.advance(DAY_S)
    took = time.monotonic() - started
    print(f"topology campaign: {args.nights} nights, seed {args.seed}, {took:.0f} s wall")
    for e in log:
        print(
            f"  night {e['night']:2d}: {e['kind']:8s} {e['pool']}/{e['id']:22s} -> "
            f"{'localized' if e['localized'] else 'MISSED'}"
        )
    hits = sum(e["localized"] for e in log)
    by_kind = {k: sum(1 for e in log if e["kind"] == k) for k in ("node", "subblock", "block")}
    print(f"faults localized to their scope by the next nightly: {hits} of {len(log)} {by_kind}")
    print(f"good nodes taken out of service: {len(good_out)} {good_out or ''}")
    print(
        "nights a degraded sub-block's node stayed free while the gate allowed a launch: "
        f"{len(bad_launches)} {bad_launches or ''}"
    )
    print(
        f"pass 1: {statistics.mean(pairs_per_node):.3f} pairs per node tested (a flat plan: 0.5);"
        f" fabric cost {statistics.mean(cost):.2f} GPU-minutes per node per night on average"
    )
    ok = hits == len(log) and not good_out and not bad_launches
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
