"""When a ledger lock's holder is dead (``domain.leases``): what this Airflow knows of its run
decides; for a run it does not know, only the lease."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpufleet.domain.leases import LEASE_RENEW, LEASE_TTL, holder_dead

T0 = datetime(2026, 12, 1, 3, 0, tzinfo=UTC)
ROW = {"dag_id": "d", "run_id": "r", "taken_at": T0 - timedelta(hours=1), "heartbeat_at": T0}


@pytest.mark.parametrize(
    ("known", "after", "dead"),
    [
        (True, timedelta(days=3), False),  # running: never taken, however silent
        (False, timedelta(0), True),  # ended: taken at once
        (None, LEASE_TTL, False),  # unknown: the lease decides, to the second
        (None, LEASE_TTL + timedelta(seconds=1), True),
    ],
)
def test_a_holder_is_dead_when_its_run_ended_or_unknown_with_an_expired_lease(known, after, dead):
    assert holder_dead(ROW, lambda d, r: known, T0 + after, dag_id="x") is dead


def test_the_lease_counts_from_the_lock_taken_or_the_transition_started_without_a_heartbeat():
    row = {"run_id": "r", "started_at": T0}
    assert not holder_dead(row, lambda d, r: None, T0 + LEASE_TTL, dag_id="x")
    assert holder_dead(row, lambda d, r: None, T0 + LEASE_TTL * 2, dag_id="x")
    assert holder_dead({"run_id": None}, lambda d, r: True, T0, dag_id="x")  # no holder


def test_the_holders_dag_is_asked_else_the_callers():
    asked = []
    holder_dead(ROW, lambda d, r: asked.append(d), T0, dag_id="x")
    holder_dead({**ROW, "dag_id": None}, lambda d, r: asked.append(d), T0, dag_id="x")
    assert asked == ["d", "x"]


def test_a_holder_touches_its_lock_several_times_per_lease():
    assert LEASE_RENEW * 3 <= LEASE_TTL
