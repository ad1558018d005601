"""Where the simulated fleet's nodes sit: blocks and sub-blocks (racks), as real GPU capacity
is built (``gpufleet.domain.topology``), and what the ``subblock-down`` and ``block-slow``
faults do to a pair.

Design: docs/design/simulated-fleet.md.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpufleet.domain.fleet import NodePool
from gpufleet.domain.topology import EKS_LAYERS, GKE_BLOCK, GKE_HOST, GKE_SUBBLOCK, Place

SIM_HOSTS_PER_SUBBLOCK = 4
SIM_SUBBLOCKS_PER_BLOCK = 2
SUBBLOCK_DOWN_BUSBW_FACTOR = 0.3
BLOCK_SLOW_BUSBW_FACTOR = 0.5


def node_index(node: str) -> int:
    """A sim node's index in its pool (``<cluster>-<pool>-<index>``); 0 when unreadable."""
    tail = node.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def sim_place(pool: NodePool, node: str) -> Place:
    return host_place(pool, node_index(node))


def host_place(pool: NodePool, index: int) -> Place:
    """Where the pool's ``index``-th host sits (its node's, once the node exists)."""
    rack = index // SIM_HOSTS_PER_SUBBLOCK
    block = pool.reservation.block
    if block is None:
        block = f"{pool.reservation.name}-b{rack // SIM_SUBBLOCKS_PER_BLOCK + 1}"
        rack %= SIM_SUBBLOCKS_PER_BLOCK
    return Place(block, f"{block}-sb{rack + 1}")


def topology_labels(pool: NodePool, node: str) -> dict[str, str]:
    """The node's topology labels, as the cloud its pool mimics writes them."""
    place = sim_place(pool, node)
    if pool.transport == "ofi-efa":
        spine = f"nn-{pool.reservation.name}"
        return dict(zip(EKS_LAYERS, (spine, place.block, place.subblock), strict=False))
    return {
        GKE_BLOCK: place.block,
        GKE_SUBBLOCK: place.subblock,
        GKE_HOST: f"{place.subblock}-h{node_index(node) % SIM_HOSTS_PER_SUBBLOCK + 1}",
    }


def crossing_factor(
    pool: NodePool, nodes: Iterable[str], down_subblocks: Iterable[str], slow_blocks: Iterable[str]
) -> float:
    """The share of bus bandwidth a pair on ``nodes`` keeps under the topology faults."""
    places = [sim_place(pool, n) for n in nodes]
    factor = 1.0
    subblocks = {p.subblock for p in places}
    if len(subblocks) > 1 and subblocks & set(down_subblocks):
        factor *= SUBBLOCK_DOWN_BUSBW_FACTOR
    blocks = {p.block for p in places}
    if len(blocks) > 1 and blocks & set(slow_blocks):
        factor *= BLOCK_SLOW_BUSBW_FACTOR
    return factor
