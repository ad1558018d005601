"""One run validates a pool's fabric (or its filesystem) at a time (``gf_validation_locks``):
the second learns at once who is validating and, in a nightly, skips the pool instead of
waiting out its timeout on nodes the first run's pairs hold."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from airflow.sdk.exceptions import AirflowSkipException, TaskDeferred
from airflow.sdk.execution_time.context import OutletEventAccessors

from gpufleet.airflow.operators import FabricValidationOperator
from gpufleet.services.validation import validation_lock
from gpufleet.store import Ledger
from tests.support.race import race
from tests.test_ledger import ledger_url  # noqa: F401 - fixture (SQLite and PostgreSQL)

CLUSTER, POOL, DAG = "a3u-sim", "h200-a", "nightly_fabric_validation"
T0 = datetime(2026, 12, 1, 2, 0, tzinfo=UTC)


def alive(*runs: str):
    return lambda dag_id, run_id: run_id in runs


def test_a_second_run_is_told_who_validates_and_a_dead_holders_lock_goes_on(ledger_url):  # noqa: F811
    ledger = Ledger(ledger_url)
    hold = validation_lock.hold
    assert hold(ledger, CLUSTER, POOL, "fabric", DAG, "night-a", alive("night-a"), T0) is None
    why = hold(ledger, CLUSTER, POOL, "fabric", "other_dag", "manual-b", alive("night-a"), T0)
    assert why.startswith(f"{CLUSTER}/{POOL} fabric: being validated by run night-a of {DAG}")
    # storage of the same pool, and the fabric of another pool, are other locks
    assert hold(ledger, CLUSTER, POOL, "storage", DAG, "manual-b", alive(), T0) is None
    assert hold(ledger, CLUSTER, "h200-b", "fabric", DAG, "manual-b", alive(), T0) is None
    # the holder renews its lease; a release by another run changes nothing
    later = T0 + timedelta(minutes=5)
    assert hold(ledger, CLUSTER, POOL, "fabric", DAG, "night-a", alive("night-a"), later) is None
    assert ledger.validation_lock(CLUSTER, POOL, "fabric").row()["heartbeat_at"] == later
    assert not validation_lock.release(ledger, CLUSTER, POOL, "fabric", "manual-b")
    # the holder's run ended (killed): the next run takes the lock over
    assert hold(ledger, CLUSTER, POOL, "fabric", DAG, "manual-b", alive(), later) is None
    assert validation_lock.release(ledger, CLUSTER, POOL, "fabric", "manual-b")
    assert ledger.validation_lock(CLUSTER, POOL, "fabric").row() is None


def test_of_eight_runs_taking_over_a_dead_holder_exactly_one_wins(ledger_url):  # noqa: F811
    Ledger(ledger_url).validation_lock(CLUSTER, POOL, "fabric").hold(DAG, "dead-run", T0)
    barrier = threading.Barrier(8)

    def judged(dag_id, run_id):
        barrier.wait(30)  # all eight read the dead holder before any takes it over
        return run_id != "dead-run"

    class Busy(Exception):
        pass

    def attempt(me: str) -> None:
        why = validation_lock.hold(Ledger(ledger_url), CLUSTER, POOL, "fabric", DAG, me, judged, T0)
        if why:
            raise Busy(why)

    won, refused = race(attempt, Busy)
    holder = Ledger(ledger_url).validation_lock(CLUSTER, POOL, "fabric").row()["run_id"]
    assert won == [holder] and len(refused) == 7


class _OtherRunsAlive:
    """The task instance's one call here: another run's state (that run is running)."""

    def get_dagrun_state(self, dag_id: str, run_id: str) -> str:
        return "running"


def _context(run_id: str) -> dict:
    return {"run_id": run_id, "outlet_events": OutletEventAccessors(), "ti": _OtherRunsAlive()}


@pytest.fixture
def held_by_another_run(airflow_db, fleet_state):
    ledger = Ledger()
    ledger.validation_lock(CLUSTER, POOL, "fabric").hold("nightly_elsewhere", "night-x")
    return ledger


def test_a_nightly_skips_a_pool_another_run_validates_naming_it(held_by_another_run):
    op = FabricValidationOperator(
        task_id="validate_fabric", cluster=CLUSTER, node_pool=POOL, when_busy="skip"
    )
    with pytest.raises(AirflowSkipException, match="being validated by run night-x of nightly_"):
        op.execute(_context("night-y"))
    assert held_by_another_run.validations_for_run("night-y") == []  # nothing recorded
    assert held_by_another_run.validation_lock(CLUSTER, POOL, "fabric").row()["run_id"] == "night-x"


def test_a_transitions_validation_waits_for_the_other_run_then_validates(held_by_another_run):
    op = FabricValidationOperator(task_id="validate_new_pool", cluster=CLUSTER, node_pool=POOL)
    with pytest.raises(TaskDeferred) as waiting:
        op.execute(_context("transition-1"))
    assert waiting.value.method_name == "execute_after_wait"
    assert type(waiting.value.trigger).__name__ == "WaitTrigger"
    held_by_another_run.validation_lock(CLUSTER, POOL, "fabric").release("night-x")
    with pytest.raises(TaskDeferred) as pairs:  # the lock is free: its pairs go out
        op.execute_after_wait(_context("transition-1"))
    assert type(pairs.value.trigger).__name__ == "WorkloadTrigger"
    assert held_by_another_run.validation_lock(CLUSTER, POOL, "fabric").row()["run_id"] == (
        "transition-1"
    )


def test_a_validation_that_cannot_finish_hands_the_lock_on(airflow_db, fleet_state):
    """An error ends the validation (here: the cluster is not in the catalog); the lock goes
    with it, so the retry or the next run is not kept waiting."""
    op = FabricValidationOperator(task_id="v", cluster="no-such-cluster", node_pool=POOL)
    with pytest.raises(Exception):  # noqa: B017, PT011 - any error: it is recorded
        op.execute(_context("night-z"))
    assert Ledger().validation_lock("no-such-cluster", POOL, "fabric").row() is None
