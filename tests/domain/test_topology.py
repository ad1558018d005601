"""Fabric pairs planned and judged by topology scope (issue 19): ``gpufleet.domain.topology``."""

from __future__ import annotations

import random

import pytest

from gpufleet.domain.topology import (
    ACROSS,
    ACROSS_BLOCKS,
    EKS_LAYERS,
    GKE_BLOCK,
    GKE_SUBBLOCK,
    INSIDE,
    Place,
    judge_scopes,
    place_of,
    plan_by_scope,
)


def test_a_nodes_place_from_gke_or_eks_labels():
    assert place_of({GKE_BLOCK: "b1", GKE_SUBBLOCK: "sb3", "x": "y"}) == Place("b1", "sb3")
    three = dict(zip(EKS_LAYERS, ("nn-top", "nn-mid", "nn-tor"), strict=False))
    assert place_of(three) == Place("nn-mid", "nn-tor")
    four = dict(zip(EKS_LAYERS, ("a", "b", "c", "d"), strict=True))
    assert place_of(four) == Place("c", "d")
    assert place_of({EKS_LAYERS[0]: "a"}) is None
    assert place_of({GKE_BLOCK: "b1"}) is None and place_of({}) is None


def fleet(shape: list[list[int]]) -> dict[str, Place]:
    """``shape``: per block, the node count of each of its sub-blocks."""
    return {
        f"b{b}-s{s}-n{n}": Place(f"b{b}", f"s{s}")
        for b, subs in enumerate(shape)
        for s, count in enumerate(subs)
        for n in range(count)
    }


SHAPES = [[[4, 4, 4]], [[4, 4], [4, 4]], [[3, 5, 2], [1, 6]], [[2, 2], [2], [3, 3]], [[5, 5]]]


@pytest.mark.parametrize("shape", SHAPES)
def test_every_node_is_tested_once_at_a_flat_plans_cost(shape):
    places = fleet(shape)
    plan = plan_by_scope(places)
    tested = [n for pair in plan.pairs for n in pair]
    assert len(tested) == len(set(tested))  # no node twice in a round
    assert sorted(tested + list(plan.odd)) == sorted(places)
    assert len(plan.pairs) == len(places) // 2 and len(plan.odd) == len(places) % 2
    for pair, scope in zip(plan.pairs, plan.scopes, strict=True):
        a, b = (places[n] for n in pair)
        want = INSIDE if a == b else ACROSS if a.block == b.block else ACROSS_BLOCKS
        assert scope == want, (pair, scope)


@pytest.mark.parametrize("shape", SHAPES)
def test_each_sub_blocks_uplink_is_crossed_towards_two_neighbours(shape):
    """A sub-block of two nodes or more, in a ring of three or more such: two crossings, to two
    different sub-blocks; with two such sub-blocks, two pairs between them."""
    places = fleet(shape)
    plan = plan_by_scope(places)
    lenders = sorted({p.key for p in places.values() if sum(q == p for q in places.values()) > 1})
    for key in lenders:
        idx = plan.crossings[key]
        neighbours = {places[n].key for i in idx for n in plan.pairs[i] if places[n].key != key}
        assert len(idx) >= 2 and len(neighbours) >= min(2, len(lenders) - 1), (key, idx)
    if len(shape) > 1:
        assert ACROSS_BLOCKS in plan.scopes


def run(plan, places, bad_node=None, bad_subblock=None, slow_block=None) -> list[bool]:
    """Each pair's result on a fleet with one fault."""
    out = []
    for pair in plan.pairs:
        a, b = (places[n] for n in pair)
        fails = bad_node in pair
        fails |= a != b and bad_subblock in (a.key, b.key)
        fails |= a.block != b.block and slow_block in (a.block, b.block)
        out.append(not fails)
    return out


@pytest.mark.parametrize("shape", [[[4, 4, 4]], [[4, 4], [4, 4]], [[3, 5, 2], [1, 6]]])
def test_a_bad_sub_block_uplink_is_told_from_its_nodes(shape):
    places = fleet(shape)
    plan = plan_by_scope(places)
    for key in sorted({p.key for p in places.values()}):
        if len(plan.crossings.get(key, ())) < 2:
            continue
        verdict = judge_scopes(plan, run(plan, places, bad_subblock=key))
        assert set(verdict.bad_subblocks) == {key}, (key, verdict)
        assert not verdict.slow_blocks
        assert verdict.explained == {
            i for i, ok in enumerate(run(plan, places, bad_subblock=key)) if not ok
        }


@pytest.mark.parametrize("shape", SHAPES)
def test_a_bad_node_is_left_to_the_node_localizer(shape):
    places = fleet(shape)
    plan = plan_by_scope(places)
    for node in random.Random(7).sample(sorted(places), 4):
        verdict = judge_scopes(plan, run(plan, places, bad_node=node))
        assert not verdict.bad_subblocks and not verdict.slow_blocks and not verdict.explained


def test_a_slow_block_among_three_is_named_and_two_blocks_are_named_together():
    places = fleet([[2, 2], [2, 2], [2, 2]])
    plan = plan_by_scope(places)
    verdict = judge_scopes(plan, run(plan, places, slow_block="b1"))
    assert set(verdict.slow_blocks) == {"b1"} and not verdict.bad_subblocks
    assert "its pairs across its own sub-blocks passed" in verdict.slow_blocks["b1"]
    two = fleet([[2, 2], [2, 2]])
    plan = plan_by_scope(two)
    verdict = judge_scopes(plan, run(plan, two, slow_block="b0"))
    assert (
        list(verdict.slow_blocks) == ["b0+b1"]
        and "needs a third block" in verdict.slow_blocks["b0+b1"]
    )


def test_a_pool_without_topology_or_in_one_sub_block_is_paired_flat():
    plan = plan_by_scope({f"n{i}": None for i in range(5)})
    assert plan.pairs == (("n0", "n1"), ("n2", "n3")) and plan.odd == ("n4",)
    assert set(plan.scopes) == {INSIDE} and not plan.crossings
    one = plan_by_scope(fleet([[4]]))
    assert set(one.scopes) == {INSIDE} and len(one.pairs) == 2
    with pytest.raises(ValueError, match="3 results for 2 pairs"):
        judge_scopes(one, [True, True, True])


def test_two_sub_blocks_alone_cannot_say_whose_uplink_failed():
    places = fleet([[5, 5]])
    plan = plan_by_scope(places)
    verdict = judge_scopes(plan, run(plan, places, bad_subblock="b0/s0"))
    assert not verdict.bad_subblocks and not verdict.explained  # the nodes are retested


@pytest.mark.parametrize("shape", [None, *SHAPES])
def test_nodes_of_one_rank_pair_together_and_every_node_is_still_tested_once(shape):
    """The GPU health level a node's pod runs first is its rank: a pair's pods wait for each
    other, so nodes of one level pair together (at most one pair per group mixes levels), and
    the plan still covers every node once, by scope."""
    places = {f"n{i}": None for i in range(9)} if shape is None else fleet(shape)
    rng = random.Random(7)
    rank = {n: rng.choice((0, 0, 1)) for n in places}
    plan = plan_by_scope(places, rank)
    unranked = plan_by_scope(places)
    assert sorted(n for p in plan.pairs for n in p) == sorted(n for p in unranked.pairs for n in p)
    assert plan.scopes == unranked.scopes  # the same scopes are crossed
    mixed = [p for p in plan.pairs if rank[p[0]] != rank[p[1]]]
    groups = {places[n] for n in places} if shape else {None}
    assert len(mixed) <= len(groups) + len(plan.crossings)
    if shape is None:  # flat: the ranked nodes first, by name within a rank
        due = sorted(n for n in places if rank[n])
        assert [n for p in plan.pairs for n in p][: len(due)] == due
    assert plan_by_scope(places, {}) == unranked  # no rank: by name, as before
