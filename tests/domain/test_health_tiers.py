"""Which dcgmi diag level a node gets tonight (domain.health.tiers): level 1 each night, level 2
for a retest, level 3 on the node's own day of the week, spread over a pool's nodes."""

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
