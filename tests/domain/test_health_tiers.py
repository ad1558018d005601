"""Which dcgmi diag level a node gets tonight (domain.health.tiers): level 1 each night, level 2
for a retest, level 3 on the node's own day of the week, spread over a pool's nodes, and level 4
at a new node's first check when its pool's catalog entry asks for burn-in."""

from __future__ import annotations

from collections import Counter
from datetime import date, timedelta

import pytest

from gpufleet.domain.health.tiers import (
    DEFAULT_DIAG_TIMEOUT_S,
    DcgmLimits,
    default_limits,
    diag_level,
    diag_timeout,
    level1_tonight,
    next_level1,
    plan_diag,
    resting,
    weekly_day,
)

MONDAY = date(2026, 11, 30)
WEEK = [MONDAY + timedelta(days=i) for i in range(7)]


def test_each_node_gets_level_3_once_a_week_on_the_same_day():
    for node in ("a3u-sim-h200-a-0", "ip-10-0-1-7.ec2.internal", "gke-train-42"):
        levels = [diag_level(node, night, retest=False) for night in WEEK]
        assert sorted(levels) == [1, 1, 1, 1, 1, 1, 3]
        assert levels.index(3) == weekly_day(node)
        # the next week, the same day
        assert diag_level(node, WEEK[weekly_day(node)] + timedelta(days=7), retest=False) == 3


def test_a_retest_is_level_2_and_level_3_on_its_weekly_day():
    node = "gke-train-7"
    day = weekly_day(node)
    for i, night in enumerate(WEEK):
        assert diag_level(node, night, retest=True) == (3 if i == day else 2)


def test_the_weekly_level_3_spreads_over_a_pools_nodes():
    """A pool's level-3 cost lands on every night of the week, not on one: over 700 nodes no
    day takes more than twice its share."""
    days = Counter(weekly_day(f"a3u-sim-h200-a-{i}") for i in range(700))
    assert set(days) == set(range(7))
    assert max(days.values()) < 2 * 100 and min(days.values()) > 100 / 2


@pytest.mark.parametrize("node", ["", None, 7])
def test_a_node_without_a_name_is_refused(node):
    with pytest.raises(ValueError, match="node name"):
        weekly_day(node)


def test_a_new_node_gets_level_4_at_its_first_check_when_the_catalog_asks():
    """Burn-in (``burn_in: true``): NVIDIA's level 4 on a node still tainted unvalidated, every
    night of the week (its weekly level 3 included); without burn-in a new node is any idle
    node; a retest is never a first check, and gets its retest's level."""
    node = "a3u-sim-h200-a-0"
    for night in WEEK:
        weekly = weekly_day(node) == night.weekday()
        assert diag_level(node, night, retest=False, new=True, burn_in=True) == 4
        assert diag_level(node, night, retest=False, new=True) == (3 if weekly else 1)
        assert diag_level(node, night, retest=False, burn_in=True) == (3 if weekly else 1)
        assert diag_level(node, night, retest=True, new=True, burn_in=True) == (3 if weekly else 2)
    with pytest.raises(ValueError, match="node name"):
        diag_level("", MONDAY, retest=False, new=True, burn_in=True)


def test_plan_levels_burns_in_only_the_new_idle_nodes_of_a_pool_that_asks():
    from gpufleet.services.validation.health import plan_levels

    idle = [f"n{i}" for i in range(4)]
    retest = ["n9"]
    night = next(d for d in WEEK if all(weekly_day(n) != d.weekday() for n in [*idle, *retest]))
    plain = plan_levels(idle, retest, night)
    assert plain == {"n0": 1, "n1": 1, "n2": 1, "n3": 1, "n9": 2}
    assert plan_levels(idle, retest, night, new=["n1", "n2"]) == plain  # the catalog did not ask
    burnt = plan_levels(idle, retest, night, new=["n1", "n2", "n9"], burn_in=True)
    assert burnt == {"n0": 1, "n1": 4, "n2": 4, "n3": 1, "n9": 2}


# --- per GPU model: the highest level and each level's hard timeout (issue 31 item 4) ----------


def test_the_default_timeouts_per_level():
    """Level 1 under 120 s (Azure: 1 min), 2 under 900 s (AWS: up to 10.5 min), 3 under 2700 s
    (NVIDIA: about 15 min), 4 under 9000 s (AWS: up to 2.25 h)."""
    assert DEFAULT_DIAG_TIMEOUT_S == {1: 120, 2: 900, 3: 2700, 4: 9000}
    assert [diag_timeout("H200", level) for level in (1, 2, 3, 4)] == [120, 900, 2700, 9000]
    custom = DcgmLimits("H100", timeouts_s={**DEFAULT_DIAG_TIMEOUT_S, 2: 600})
    assert diag_timeout(custom, 2) == 600
    with pytest.raises(ValueError, match="1, 2, 3 or 4"):
        diag_timeout("H200", 5)


@pytest.mark.parametrize("model", ["B200", "gb200", "B300", "GB300"])
def test_the_b_series_stops_at_level_1_by_default(model):
    assert default_limits(model).max_level == 1
    assert "NVIDIA/DCGM#247" in default_limits(model).why
    assert default_limits("H200").max_level == 4


def test_a_level_above_the_models_highest_is_capped_and_the_reason_says_so():
    node = "a4-b200-0"
    day = WEEK[weekly_day(node)]
    b200 = default_limits("B200")
    plan = plan_diag(node, day, retest=True, limits=b200)
    assert (plan.level, plan.wanted, plan.timeout_s, plan.capped) == (1, 3, 120, True)
    assert "capped from level 3" in plan.reason and "B200's highest dcgmi diag level is 1" in (
        plan.reason
    )
    assert diag_level(node, day, retest=False, new=True, burn_in=True, limits=b200) == 1
    two = DcgmLimits("H100", max_level=2)
    assert diag_level(node, day, retest=False, new=True, burn_in=True, limits=two) == 2
    uncapped = plan_diag(node, day, retest=True)
    assert (uncapped.level, uncapped.capped, uncapped.timeout_s) == (3, False, 2700)
    assert "capped" not in uncapped.reason


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_level": 0}, "1, 2, 3 or 4"),
        ({"max_level": True}, "1, 2, 3 or 4"),
        ({"timeouts_s": {1: 120}}, "each level 1-4"),
        ({"timeouts_s": {1: 0, 2: 1, 3: 1, 4: 1}}, "level-1 timeout"),
        ({"timeouts_s": {1: 1, 2: 1, 3: 1, 4: 10**9}}, "level-4 timeout"),
    ],
)
def test_bad_limits_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DcgmLimits("H200", **kwargs)


# --- the level-1 rotation (issue 35) --------------------------------------------------------


NODES = [f"a3u-sim-h200-a-{i}" for i in range(64)]


@pytest.mark.parametrize("every", [1, 2, 3, 4, 7])
def test_the_rotation_gives_each_node_level_1_once_in_every_nights_on_the_same_nights(every):
    nights = [MONDAY + timedelta(days=i) for i in range(3 * every)]
    for node in NODES:
        due = [i for i, night in enumerate(nights) if level1_tonight(node, night, every)]
        assert len(due) == 3  # once a cycle, never twice, never skipped
        assert [b - a for a, b in zip(due, due[1:], strict=False)] == [every, every]


def test_the_rotation_spreads_a_pools_nodes_over_its_nights():
    nights = [MONDAY + timedelta(days=i) for i in range(4)]
    per_night = [sum(level1_tonight(n, night, 4) for n in NODES) for night in nights]
    assert sum(per_night) == len(NODES)
    assert max(per_night) <= 2 * len(NODES) // 4  # no night carries the pool alone


def test_every_night_rests_nothing():
    assert resting(NODES, MONDAY, 1) == []


def test_a_pending_node_and_a_node_on_its_weekly_day_never_rest():
    nights = [MONDAY + timedelta(days=i) for i in range(14)]
    pending = set(NODES[:8])
    for night in nights:
        rest = resting(NODES, night, 4, pending=pending)
        assert not pending & set(rest)
        assert all(weekly_day(n) != night.weekday() for n in rest)
        assert all(not level1_tonight(n, night, 4) for n in rest)
        # every other node rests: the nights it is not due
        others = [
            n
            for n in NODES
            if n not in pending
            and weekly_day(n) != night.weekday()
            and not level1_tonight(n, night, 4)
        ]
        assert rest == others


@pytest.mark.parametrize("every", [0, 8, -1, True, 2.0, "4", None])
def test_a_rotation_outside_1_to_7_whole_nights_is_refused(every):
    with pytest.raises(ValueError, match="level1_every_nights must be a whole number from 1 to 7"):
        level1_tonight("gke-train-7", MONDAY, every)


@pytest.mark.parametrize("every", [1, 3, 4, 7])
def test_the_next_level_1_is_the_first_night_of_the_nodes_rotation_after_tonight(every):
    for node in NODES[:16]:
        nxt = next_level1(node, MONDAY, every)
        assert MONDAY < nxt <= MONDAY + timedelta(days=every)
        assert level1_tonight(node, nxt, every)
        assert not any(
            level1_tonight(node, MONDAY + timedelta(days=d), every)
            for d in range(1, (nxt - MONDAY).days)
        )


def test_a_pools_nodes_share_its_weekly_night_spread_over_the_week_by_pool():
    """Given the pool's key, every node of the pool gets its level 3 on the pool's night (the
    nightly checks a pair's nodes in its pods, and a level 3 beside a level 1 would hold the
    partner), and the pools' nights spread over the week; a node resting its level 1 never
    rests on that night."""
    pool = "a3u-sim/h200-a"
    nodes = [f"a3u-sim-h200-a-{i}" for i in range(12)]
    day = weekly_day(nodes[0], pool)
    for night in WEEK:
        levels = {diag_level(n, night, retest=False, pool=pool) for n in nodes}
        assert levels == ({3} if night.weekday() == day else {1})
        if night.weekday() == day:
            assert resting(nodes, night, 4, pool=pool) == []
    pools = Counter(weekly_day("n", f"cluster-{i}/pool") for i in range(700))
    assert set(pools) == set(range(7)) and max(pools.values()) < 2 * 100
