"""The event campaign (bench/event_campaign.py, issue 33) keeps its promises on a small run: the
real watcher in a child process SIGKILLed and restarted, the real response and re-admission
sessions, every faulty node out within 5 minutes, no healthy node taken out, no new node
schedulable before its session passed, no event lost."""

from __future__ import annotations

import random
import re

import pytest

from bench.event_campaign import BENIGN_XIDS, COVER, DAY_S, FATAL_XIDS, SETTLE_S, plan
from tests.support.campaigns import run_campaign


def test_a_plan_covers_every_class_first_and_stays_in_the_day():
    events = plan(100, random.Random(5))
    assert len(events) == 100
    assert [e.at for e in events] == sorted(e.at for e in events)
    assert all(600.0 <= e.at <= DAY_S - SETTLE_S + 240.0 for e in events)
    kinds = {(e.kind, e.xid) for e in events}
    assert set(COVER) <= kinds
    assert {x for k, x in kinds if k == "xid"} <= set(FATAL_XIDS) | set(BENIGN_XIDS)
    assert [(e.kind, e.xid) for e in plan(100, random.Random(5))] == [
        (e.kind, e.xid) for e in events
    ]  # seeded: the same campaign again
    small = plan(12, random.Random(5))
    assert {(e.kind, e.xid) for e in small} == set(COVER[:12])


@pytest.mark.slow
def test_a_small_campaign_with_kills_keeps_every_promise(tmp_path):
    out = run_campaign("event_campaign", "--events", "12", "--kills", "2")
    assert re.search(r"12 events over a simulated day, 2 watcher SIGKILLs", out), out
    latency = re.search(
        r"out of schedulable capacity \((\d+)\)\s+p50 (\d+) s, p95 (\d+) s, max (\d+) s", out
    )
    assert latency is not None, out
    assert int(latency.group(1)) >= 5  # the fatal Xids and the prediction among the 12
    assert int(latency.group(4)) <= 300
    assert re.search(r"healthy nodes taken out\s+0\s", out), out
    assert re.search(r"schedulable before their session passed\s+0 of [1-9]", out), out
    assert re.search(r"rebooted nodes schedulable before held pending\s+0 of [1-9]", out), out
    assert re.search(r"events lost \(no signal nor admission recorded\)\s+0 of 12\s", out), out
    assert "BROKEN" not in out and out.rstrip().endswith("PASS")
