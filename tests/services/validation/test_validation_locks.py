"""One run validates a pool's fabric (or its filesystem) at a time (``gf_validation_locks``):
the second learns at once who is validating and, in a nightly, skips the pool instead of
waiting out its timeout on nodes the first run's pairs hold."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from airflow.sdk.exceptions import AirflowSkipException, TaskDeferred
from airflow.sdk.execution_time.context import OutletEventAccessors

from gpufleet.airflow.operators import FabricValidationOperator
from gpufleet.services.validation import validation_lock
from gpufleet.store import Ledger
from tests.store.test_ledger import ledger_url  # noqa: F401 - fixture (SQLite and PostgreSQL)
from tests.support.race import race

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


# --- a run that validated nothing says so (issue 31) --------------------------------------------


class _Ti:
    """The report task's task instance: this run's targets (XCom), no failed task, and what
    Airflow says of another run (``states``: run id -> state; 404 for the rest)."""

    def __init__(self, targets: dict[str, list[dict]], states: dict[str, str]):
        self.targets, self.states = targets, states

    def xcom_pull(self, task_ids: str):
        return self.targets.get(task_ids)

    def get_task_states(self, dag_id, run_ids):
        return {}

    def get_dagrun_state(self, dag_id: str, run_id: str) -> str:
        if run_id not in self.states:
            from airflow.sdk.api.client import ServerResponseError

            raise ServerResponseError.from_response(_404())  # unknown to this Airflow
        return self.states[run_id]


def _404():
    import httpx

    request = httpx.Request("GET", "http://api/execution/dag-runs/x/y/state")
    return httpx.Response(404, json={"detail": "not found"}, request=request)


def _report(run_id: str, ti: _Ti):
    from types import SimpleNamespace

    from gpufleet.airflow.operators.nightly import ValidationReportOperator

    ctx = {"run_id": run_id, "ti": ti, "dag": SimpleNamespace(dag_id=DAG)}
    return ValidationReportOperator(task_id="report").execute(ctx)


TARGETS = {
    "fabric_targets": [{"cluster": CLUSTER, "node_pool": POOL}],
    "storage_targets": [{"cluster": CLUSTER, "node_pool": POOL}],
}


def test_a_run_that_skipped_every_pool_fails_saying_it_validated_nothing(airflow_db, fleet_state):
    """Another run (unknown to this Airflow, its lease fresh) validates the pool: this run's
    tasks skipped it and it recorded nothing. Green would read "validated"; it fails, naming
    the holder, and its report says so first."""
    from airflow.sdk.exceptions import AirflowFailException

    ledger = Ledger()
    now = datetime.now(UTC)
    for kind in ("fabric", "storage"):
        ledger.validation_lock(CLUSTER, POOL, kind).hold("nightly_elsewhere", "night-x", now)
    with pytest.raises(AirflowFailException) as err:
        _report("night-y", _Ti(TARGETS, {}))
    message = str(err.value)
    assert message.startswith("this run validated nothing: none of its 2 planned checks")
    assert f"{CLUSTER}/{POOL} fabric: skipped" in message and "run night-x" in message
    assert "its verdict stands" in message and "Mark run as failed" not in message
    report = (fleet_state / "reports" / "night-y" / "report.md").read_text()
    assert "## Not validated by this run" in report
    assert "**VALIDATED NOTHING: 2 planned checks recorded no verdict**" in report
    html = (fleet_state / "reports" / "night-y" / "report.html").read_text()
    assert 'id="not-validated"' in html and "night-x" in html


def _another_pool_validated(ledger: Ledger) -> dict:
    """Run night-y validated h200-b's fabric; its targets were that pool and POOL."""

    ledger.record_validation(
        run_id="night-y",
        cluster=CLUSTER,
        pool="h200-b",
        kind="fabric",
        passed=True,
        transport="gib",
        expected_transport="gib",
        busbw_gbps=350.0,
        baseline_gbps=355.0,
        started_at=datetime.now(UTC),
    )
    return {"fabric_targets": [{"cluster": CLUSTER, "node_pool": p} for p in (POOL, "h200-b")]}


def test_a_stuck_holder_is_named_with_how_to_clear_it(airflow_db, fleet_state):
    """A killed ``airflow dags test`` leaves its run ``running``: Airflow calls it alive, so
    its lock never passes on. Silent for three hours (the lease is one), it is named as stuck,
    with the exact way to mark its run failed, and the run fails even though another pool
    was validated."""
    from airflow.sdk.exceptions import AirflowFailException

    ledger = Ledger()
    silent_since = datetime.now(UTC) - timedelta(hours=3)
    ledger.validation_lock(CLUSTER, POOL, "fabric").hold(DAG, "manual__killed", silent_since)
    targets = _another_pool_validated(ledger)
    with pytest.raises(AirflowFailException) as err:
        _report("night-y", _Ti(targets, {"manual__killed": "running"}))
    message = str(err.value)
    assert "run manual__killed of nightly_fabric_validation" in message
    assert "Airflow still shows that run running (or queued)" in message
    assert "has not renewed its lease for 180 minutes" in message
    assert "killed `airflow dags test`" in message
    clear = (
        "Dags > nightly_fabric_validation > Runs > manual__killed > Mark run as failed; or the "
        "REST API: PATCH /api/v2/dags/nightly_fabric_validation/dagRuns/manual__killed with "
        '{"state": "failed"}'
    )
    assert clear in message
    report = (fleet_state / "reports" / "night-y" / "report.md").read_text()
    assert "Mark run as failed" in report and "VALIDATED NOTHING" not in report


def test_a_pool_skipped_behind_a_live_holder_leaves_a_run_that_validated_others_green(
    airflow_db, fleet_state
):
    """One pool skipped (its holder alive and heard from), another validated: the run
    succeeds, and its report lists what it did not validate and who does."""
    ledger = Ledger()
    ledger.validation_lock(CLUSTER, POOL, "fabric").hold(DAG, "manual__live", datetime.now(UTC))
    targets = _another_pool_validated(ledger)
    paths = _report("night-y", _Ti(targets, {"manual__live": "running"}))
    report = Path(paths["report.md"]).read_text()
    assert "**1 planned checks recorded no verdict**" in report
    assert f"{CLUSTER}/{POOL} fabric: skipped" in report and "manual__live" in report
