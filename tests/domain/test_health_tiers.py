"""Which dcgmi diag level a node gets tonight (domain.health.tiers): level 1 each night, level 2
for a retest, level 3 on the node's own day of the week, spread over a pool's nodes, and level 4
at a new node's first check when its pool's catalog entry asks for burn-in."""

from __future__ import annotations

from collections import Counter
from datetime import date, timedelta

import pytest

from gpufleet.domain.health.tiers import diag_level, weekly_day

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
