"""The ledger's times come from the clock it was given (``Ledger(clock=...)``), never from the
machine's: a test that moves the clock moves every time the ledger records, and a lock held,
a lease taken over or a gate decided with no ``now`` is at the ledger's time."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gpufleet.services.common.leases import hold_lease
from gpufleet.store import Ledger
from tests.support.clock import ManualClock

START = 1_500_000_000.0  # 2017: years from the machine's clock, so a wall-clock read shows


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest.fixture
def ledger(tmp_path, clock) -> Ledger:
    return Ledger(f"sqlite:///{tmp_path}/ledger.db", clock=clock)


def test_rows_are_stamped_with_the_ledgers_clock(ledger, clock):
    ledger.set_pool_state("c", "p", "validated", run_id="r")
    assert ledger.pool_state("c", "p")["updated_at"] == clock.now()
    clock.advance(3600)
    ledger.set_pool_state("c", "p", "degraded", run_id="r")
    assert ledger.pool_state("c", "p")["updated_at"] == clock.now()

    vid = ledger.record_validation_error("r", "c", "p", "fabric", "pods never ran")
    row = ledger.latest_validation("c", "p", "fabric")
    assert (row["id"], row["started_at"], row["finished_at"]) == (vid, clock.now(), clock.now())

    tid = ledger.open_transition("c", "p", "q", "r", dag_id="d")[0]["id"]
    ledger.step_started(tid, "planned")
    clock.advance(60)
    ledger.step_done(tid, "planned")
    step = ledger.transition_steps(tid)[0]
    assert step["finished_at"] - step["at"] == timedelta(seconds=60)

    ledger.set_region_state("r1", "ready")
    assert ledger.region_state("r1")["ready_at"] == clock.now()


def test_a_lock_held_with_no_time_given_is_held_at_the_ledgers_time(ledger, clock):
    held, row, _ = hold_lease(
        ledger.validation_lock("c", "p", "fabric"), "d", "run-a", lambda d, r: None
    )
    assert held and row["heartbeat_at"] == clock.now()
    assert ledger.region_lease("r1").hold("d", "run-a")["taken_at"] == clock.now()
