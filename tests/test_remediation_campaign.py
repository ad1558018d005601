"""The remediation campaign (bench/remediation_campaign.py, issue 34) keeps its promises on a
short run with one roll-out, and its checks catch each broken promise: a rung other than
NVIDIA's, a third reboot in a week, a healthy node acted on, an action past a tripped breaker."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from bench.remediation_campaign import check_rungs, healthy_acted_on, mttr, past_breakers
from tests.support.campaigns import run_campaign

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def ev(node, frm, to, hours, rung=None, by=None):
    return {
        "cluster": "c",
        "pool": "p",
        "node": node,
        "from_state": frm,
        "to_state": to,
        "evidence": {"rung": rung} if rung else {},
        "by": by,
        "at": T0 + timedelta(hours=hours),
    }


def incident(node, start_h, rung, released_h, by=None):
    return [
        ev(node, "released", "quarantined", start_h),
        ev(node, "quarantined", "draining", start_h + 1),
        ev(node, "draining", "drained", start_h + 2),
        ev(node, "drained", "repairing", start_h + 3, rung),
        ev(node, "repairing", "released", released_h, by=by),
    ]


def fault(node, hours, expected):
    return {"night": 1, "node": node, "fault": f"f:{node}", "expected": expected,
            "at": T0 + timedelta(hours=hours)}  # fmt: skip


def test_the_rung_check_wants_nvidias_rung_then_a_climb():
    events = incident("n1", 0, "reboot", 24) + incident("n1", 48, "repair", 72)
    faults = [fault("n1", 0, "reboot"), fault("n1", 47, "reboot")]
    assert check_rungs(faults, events, max_reboots=2) == []
    assert [f["action"] for f in faults] == ["reboot", "repair"]
    # the same node rebooted again within the week: no climb
    again = incident("n1", 0, "reboot", 24) + incident("n1", 48, "reboot", 72)
    broken = check_rungs([fault("n1", 0, "reboot"), fault("n1", 47, "reboot")], again, 2)
    assert len(broken) == 1 and "first action reboot" in broken[0]
    # a fresh node given a rung other than NVIDIA's
    assert check_rungs([fault("n2", 0, "reset_gpu")], incident("n2", 0, "repair", 9), 2)
    # a fault never acted on
    assert "never acted on" in check_rungs([fault("n3", 0, "repair")], [], 2)[0]


def test_the_rung_check_catches_a_third_reboot_in_seven_days():
    events = [e for d in (0, 2, 4) for e in incident("n1", d * 24, "reboot", d * 24 + 20)]
    broken = check_rungs([], events, max_reboots=2)
    assert broken and "3 reboots" in broken[0]
    spread = [e for d in (0, 4, 8) for e in incident("n1", d * 24, "reboot", d * 24 + 20)]
    assert check_rungs([], spread, max_reboots=2) == []


def test_a_move_with_no_fault_in_force_is_a_healthy_node_acted_on():
    events = incident("n1", 10, "repair", 30)
    assert healthy_acted_on(events, {"n1": [(T0, T0 + timedelta(hours=20))]}) == []
    assert len(healthy_acted_on(events, {"n1": [(T0, T0 + timedelta(hours=11))]})) == 2
    assert len(healthy_acted_on(events, {})) == 3  # out, drained, repairing
    by_hand = [ev("n1", "released", "quarantined", 1, by="alice")]
    assert healthy_acted_on(by_hand, {}) == []


def test_a_drain_or_a_rung_between_a_trip_and_its_reset_is_past_the_breaker():
    trip = {"scope": "pool", "key": "c/p", "tripped_at": T0, "reset_at": T0 + timedelta(hours=5)}
    held = incident("n1", 0, "reboot", 30)  # drained at 2 h, repairing at 3 h: inside
    assert len(past_breakers(held, [trip])) == 2
    assert past_breakers(incident("n1", 6, "reboot", 30), [trip]) == []
    cluster = {**trip, "scope": "cluster", "key": "c"}
    assert len(past_breakers(held, [cluster])) == 2
    other = {**trip, "key": "c/other"}
    assert past_breakers(held, [other]) == []
    open_trip = {**trip, "reset_at": None}
    assert len(past_breakers(incident("n1", 100, "reboot", 130), [open_trip])) == 2


def test_mttr_is_leaving_service_to_release_by_who_released():
    events = incident("n1", 0, "reboot", 24) + incident("n2", 10, "repair", 58, by="alice")
    assert mttr(events) == {"machine": [24.0], "person": [48.0]}


@pytest.mark.slow
def test_a_short_campaign_with_a_roll_out_keeps_every_promise():
    out = run_campaign("remediation_campaign", "--nights", "6", "--seed", "7")
    handled = re.search(r"rung NVIDIA's catalog names: (\d+) of (\d+)", out)
    assert handled is not None and handled.group(1) == handled.group(2) != "0", out
    rollouts = re.search(r"roll-outs: (\d+), pool breaker trips: (\d+)", out)
    assert rollouts is not None and int(rollouts.group(1)) >= 1, out
    assert int(rollouts.group(2)) >= int(rollouts.group(1)), out
    assert "roll-outs that did not trip it: 0;" in out
    assert re.search(r"resets by a person: [1-9]", out), out
    assert "healthy nodes acted on: 0\n" in out
    assert "actions past a tripped breaker: 0\n" in out
    assert re.search(r"MTTR \(sim time, leaving service to release\): \d+\.\d h \(n=[1-9]", out)
    assert "BROKEN" not in out and out.rstrip().endswith("PASS")
