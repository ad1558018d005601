"""The simulated fleet's topology (issue 19): nodes labelled with their block and sub-block as
GKE or EKS label them, and the ``subblock-down`` and ``block-slow`` faults slowing the pairs
that cross them, while pairs inside stay fast."""

from __future__ import annotations

import pytest

from gpufleet.backends import cluster_backend
from gpufleet.backends.faults import fault_injection
from gpufleet.backends.sim.faults import PoolFaults
from gpufleet.backends.sim.topology import (
    BLOCK_SLOW_BUSBW_FACTOR,
    SUBBLOCK_DOWN_BUSBW_FACTOR,
    crossing_factor,
)
from gpufleet.config.catalog import load_catalog
from gpufleet.domain.faults import ActiveFault, FaultError, parse_fault
from gpufleet.domain.topology import Place, place_of, plan_by_scope


def places(cluster: str, pool: str) -> dict[str, Place | None]:
    nodes = cluster_backend(load_catalog().cluster(cluster)).list_nodes(pool)
    return {n.name: place_of(n.labels) for n in nodes}


def test_nodes_carry_the_topology_labels_of_the_cloud_their_pool_mimics(fleet_state):
    gke = places("a3u-sim", "h200-a")  # 6 nodes on res-a3u-a's block-1, GKE's labels
    assert (
        sorted(gke.values())
        == [Place("block-1", "block-1-sb1")] * 4 + [Place("block-1", "block-1-sb2")] * 2
    )
    eks = places("p5-sim", "h100-a")  # EKS's network-node layers
    assert all(p is not None and p.subblock.startswith(p.block) for p in eks.values())
    plan = plan_by_scope(gke)  # two racks: both crossings run between them
    assert len(plan.crossings) == 2 and len(plan.pairs) == 3


def folded(*texts: str) -> PoolFaults:
    return PoolFaults.of([ActiveFault("c", "p", parse_fault(t), "cli") for t in texts], "p")


def test_a_down_sub_block_slows_the_pairs_crossing_it_only():
    pool = load_catalog().pool("a3u-sim", "h200-a").pool
    faults = folded("subblock-down:block-1-sb2")
    n = [f"a3u-sim-h200-a-{i}" for i in range(6)]  # 0-3 in sb1, 4-5 in sb2

    def factor(*pair):
        return crossing_factor(pool, pair, faults.down_subblocks, faults.slow_blocks)

    assert factor(n[0], n[4]) == SUBBLOCK_DOWN_BUSBW_FACTOR  # crosses sb2's uplink
    assert factor(n[0], n[1]) == 1.0 and factor(n[4], n[5]) == 1.0  # inside sb1, inside sb2
    other = folded("subblock-down:block-1-sb1")
    assert crossing_factor(pool, (n[4], n[0]), other.down_subblocks, ()) == (
        SUBBLOCK_DOWN_BUSBW_FACTOR
    )


def test_a_slow_block_slows_the_pairs_between_blocks_only():
    h200b = load_catalog().pool("a3u-sim", "h200-b").pool  # its reservation names no block
    big = h200b.model_copy(update={"nodes": 16})  # 4 racks of 4: blocks res-a3u-b-b1 and -b2
    n = [f"a3u-sim-h200-b-{i}" for i in range(16)]
    faults = folded("block-slow:res-a3u-b-b1")

    def factor(*pair):
        return crossing_factor(big, pair, faults.down_subblocks, faults.slow_blocks)

    assert factor(n[0], n[8]) == BLOCK_SLOW_BUSBW_FACTOR  # b1 to b2
    assert factor(n[0], n[4]) == 1.0  # two racks of b1
    assert factor(n[8], n[12]) == 1.0 and factor(n[0], n[1]) == 1.0
    pinned = load_catalog().pool("a3u-sim", "h200-a").pool  # its reservation names block-1
    assert crossing_factor(pinned, (n[0], n[5]), (), {"block-1"}) == 1.0  # one block


def test_a_topology_fault_must_name_the_pools_own_sub_block_or_block(fleet_state):
    a3u = load_catalog().cluster("a3u-sim")
    with pytest.raises(
        FaultError, match=r"has no sub-block 'block-9-sb1' \(sub-blocks: block-1-sb1, block-1-sb2\)"
    ):
        fault_injection(a3u).inject("h200-a", "subblock-down:block-9-sb1")
    with pytest.raises(FaultError, match=r"has no block 'block-2' \(blocks: block-1\)"):
        fault_injection(a3u).inject("h200-a", "block-slow:block-2")
    assert fault_injection(a3u).inject("h200-a", "subblock-down:block-1-sb2")
