"""Where a node sits in the hardware, and fabric pairs planned and judged by scope.
Pure domain code: no I/O.

Design: docs/design/topology.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

GKE_BLOCK = "cloud.google.com/gce-topology-block"
GKE_SUBBLOCK = "cloud.google.com/gce-topology-subblock"
GKE_HOST = "cloud.google.com/gce-topology-host"
EKS_LAYERS = tuple(f"topology.k8s.aws/network-node-layer-{i}" for i in (1, 2, 3, 4))

INSIDE = "subblock"  # a pair inside one sub-block
ACROSS = "cross-subblock"  # across two sub-blocks of one block
ACROSS_BLOCKS = "cross-block"  # across two blocks

Pair = tuple[str, str]


@dataclass(frozen=True, order=True)
class Place:
    """A node's block and sub-block (the sub-block's name is unique inside its block)."""

    block: str
    subblock: str

    @property
    def key(self) -> str:
        return f"{self.block}/{self.subblock}"


def place_of(labels: Mapping[str, str]) -> Place | None:
    """The node's place from its labels (GKE's block and sub-block, else EKS's network-node
    layers: the deepest is the sub-block, the one above it the block); None when the node
    carries neither (a machine type without topology: pairs are planned flat)."""
    block, subblock = labels.get(GKE_BLOCK), labels.get(GKE_SUBBLOCK)
    if block and subblock:
        return Place(block, subblock)
    layers = [labels[k] for k in EKS_LAYERS if labels.get(k)]
    if len(layers) >= 2:
        return Place(layers[-2], layers[-1])
    return None


@dataclass(frozen=True)
class ScopedPlan:
    """Pass 1 by scope: ``pairs`` with the scope each tests (``scopes``, same order), the odd
    one out, which pairs cross each sub-block's uplink (``crossings``: sub-block key ->
    indexes into ``pairs``) and each placed node's sub-block key (``subblock_of``)."""

    pairs: tuple[Pair, ...]
    scopes: tuple[str, ...]
    odd: tuple[str, ...]
    crossings: Mapping[str, tuple[int, ...]]
    subblock_of: Mapping[str, str]

    def block_of(self, node: str) -> str | None:
        key = self.subblock_of.get(node)
        return key.split("/", 1)[0] if key else None


def plan_by_scope(
    places: Mapping[str, Place | None], rank: Mapping[str, int] | None = None
) -> ScopedPlan:
    """Disjoint pairs covering every node of ``places`` (node -> place), planned by scope
    (module doc). Nodes without a place, or a pool in one sub-block, are paired flat (sorted,
    as ``pairing.plan_pass1``), each pair's scope ``subblock``. ``rank`` (node -> a number,
    0 when absent): inside each group the nodes of the highest rank come first, so nodes of
    one rank pair together (the GPU health level each pod runs before its pair's test: a
    pair's pods wait for the longer one); by name within a rank."""
    ranks = rank or {}

    def order(nodes: Iterable[str]) -> list[str]:
        return sorted(nodes, key=lambda n: (-ranks.get(n, 0), n))

    groups: dict[Place, list[str]] = {}
    unplaced: list[str] = []
    for node in order(places):
        place = places[node]
        if place is None:
            unplaced.append(node)
        else:
            groups.setdefault(place, []).append(node)
    if unplaced or len(groups) < 2:
        nodes = order(places)
        flat = tuple((nodes[i], nodes[i + 1]) for i in range(0, len(nodes) - 1, 2))
        odd = (nodes[-1],) if len(nodes) % 2 else ()
        return ScopedPlan(flat, (INSIDE,) * len(flat), odd, {}, {})
    # the ring: sub-blocks of two nodes or more, by block; each lends its first node to the
    # pair with the next one ("out") and its second to the pair with the previous one ("in").
    # Two sub-blocks: both pairs run between them. A one-node sub-block's node pairs across
    # with the other sub-blocks' odd ones (below): its uplink is crossed once.
    ring = [p for p in sorted(groups) if len(groups[p]) >= 2]
    pairs: list[Pair] = []
    scopes: list[str] = []
    crossings: dict[str, list[int]] = {}
    used: set[str] = set()

    def cross(here: Place, a: str, there: Place, b: str) -> None:
        used.update((a, b))
        crossings.setdefault(here.key, []).append(len(pairs))
        crossings.setdefault(there.key, []).append(len(pairs))
        pairs.append((a, b))
        scopes.append(ACROSS_BLOCKS if here.block != there.block else ACROSS)

    for i, here in enumerate(ring if len(ring) >= 2 else ()):
        there = ring[(i + 1) % len(ring)]
        cross(here, groups[here][0], there, groups[there][1])
    leftovers: list[tuple[Place, str]] = []
    for place in sorted(groups):
        rest = [n for n in groups[place] if n not in used]
        pairs += [(rest[i], rest[i + 1]) for i in range(0, len(rest) - 1, 2)]
        scopes += [INSIDE] * (len(rest) // 2)
        leftovers += [(place, rest[-1])] if len(rest) % 2 else []
    # the sub-blocks' odd ones pair across too, so at most one node of the pool waits
    for (here, a), (there, b) in zip(leftovers[::2], leftovers[1::2], strict=False):
        cross(here, a, there, b)
    odd = (leftovers[-1][1],) if len(leftovers) % 2 else ()
    return ScopedPlan(
        tuple(pairs),
        tuple(scopes),
        tuple(odd),
        {k: tuple(v) for k, v in crossings.items()},
        {n: p.key for p, nodes in groups.items() for n in nodes},
    )


@dataclass(frozen=True)
class ScopeVerdict:
    """What pass 1 says beyond single nodes: sub-blocks whose uplink is bad and slow blocks
    (key -> reason), and the pairs whose failure those explain (not the nodes' to answer for)."""

    bad_subblocks: Mapping[str, str]
    slow_blocks: Mapping[str, str]
    explained: frozenset[int]


def judge_scopes(plan: ScopedPlan, passed: Iterable[bool]) -> ScopeVerdict:
    """Read pass 1's results (``passed``, in ``plan.pairs`` order) by scope (module doc)."""
    ok = list(passed)
    if len(ok) != len(plan.pairs):
        raise ValueError(f"{len(ok)} results for {len(plan.pairs)} pairs")
    bad: dict[str, str] = {}
    explained: set[int] = set()
    for key, idx in plan.crossings.items():
        if len(set(idx)) < 2 or any(ok[i] for i in idx):
            continue
        # both crossings failed: the sub-block's uplink, if each neighbour crossed fine
        # elsewhere (else the neighbour's uplink or a bad node may be the cause)
        neighbours_fine = all(
            any(ok[j] for j in plan.crossings[other] if j != i)
            for i in idx
            for other in plan.crossings
            if other != key and i in plan.crossings[other]
        )
        if neighbours_fine:
            bad[key] = (
                f"sub-block {key}: every pair crossing its uplink failed ({len(idx)}) while "
                "its neighbours' other crossings passed"
            )
            explained.update(idx)
    slow: dict[str, str] = {}
    cross_of: dict[str, list[int]] = {}
    inner_of: dict[str, list[int]] = {}
    for i, (scope, pair) in enumerate(zip(plan.scopes, plan.pairs, strict=True)):
        for block in {b for n in pair if (b := plan.block_of(n)) is not None}:
            if scope == ACROSS_BLOCKS:
                cross_of.setdefault(block, []).append(i)
            elif scope == ACROSS:
                inner_of.setdefault(block, []).append(i)
    failing = [
        b
        for b, cross in sorted(cross_of.items())
        if not any(ok[i] for i in cross)
        and not all(i in explained for i in cross)  # one bad sub-block's uplink accounts for them
    ]
    if len(cross_of) == 2 and len(failing) == 2:  # two blocks: the pairs cannot say which
        key = "+".join(failing)
        slow[key] = (
            f"blocks {failing[0]} and {failing[1]}: every pair between them failed "
            f"({len(cross_of[failing[0]])}); which block's spine is at fault needs a third block"
        )
        explained.update(cross_of[failing[0]])
    elif len(failing) < len(cross_of):
        for block in failing:
            inner = inner_of.get(block, ())
            within = sum(not ok[i] for i in inner)
            slow[block] = (
                f"block {block}: every pair crossing to another block failed "
                f"({len(cross_of[block])}); "
                + (
                    f"{within} of its {len(inner)} pair(s) across its own sub-blocks failed too"
                    if within
                    else "its pairs across its own sub-blocks passed"
                )
            )
            explained.update(cross_of[block])
    return ScopeVerdict(bad, slow, frozenset(explained))
