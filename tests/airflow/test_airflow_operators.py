"""Each deferring operator's ``execute_complete`` on the events its trigger fires.

As the providers test theirs, but with the real operators, triggers and services over the
simulated fleet: ``execute`` defers, the real WorkloadTrigger runs to its first event, and the
operator resumes on it. Success is the trigger watching the real workload; the error event is
the same trigger pointed at a cluster the catalog does not know (the watch fails); the timeout
event is the same trigger given no time while the workload is still starting. Error and
timeout raise AirflowException (the task's retries take over); a failed verdict raises
AirflowFailException (retrying would not change it).
"""

from __future__ import annotations

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException, TaskDeferred
from airflow.sdk.execution_time.context import OutletEventAccessors

from gpufleet.airflow.assets import JOB_CONFIRMED, POOL_VALIDATED
from gpufleet.airflow.operators import FabricValidationOperator, StorageValidationOperator
from gpufleet.airflow.operators.launch import (
    ConfirmTransportOperator,
    LaunchGateOperator,
    SubmitTrainingJobOperator,
)
from gpufleet.backends import cluster_backend
from gpufleet.backends.sim.state import SimState
from gpufleet.config.catalog import load_catalog
from gpufleet.store import Ledger
from tests.support.fleet import validate

CLUSTER, POOL = "a3u-sim", "h200-a"


@pytest.fixture
def fleet(airflow_db, fleet_state):
    return fleet_state


def context(run_id: str) -> dict:
    return {"run_id": run_id, "outlet_events": OutletEventAccessors()}


def deferral(call) -> TaskDeferred:
    with pytest.raises(TaskDeferred) as info:
        call()
    return info.value


def _nothing() -> None:
    pass


def submitted_job(name: str, run_id: str, before_submit=_nothing) -> dict:
    """A job through the real gate and submit operators (the pool validated first)."""
    validate(CLUSTER, POOL)
    before_submit()
    request = {
        "cluster": CLUSTER,
        "pools": [POOL],
        "nodes": 2,
        "gpus_per_node": 8,
        "job_name": name,
        "namespace": "ml-team",
        "image": "example/train:1",
        "command": ["torchrun", "train.py"],
    }
    ctx = context(run_id)
    decision = LaunchGateOperator(task_id="gate", request=request).execute(ctx)
    return SubmitTrainingJobOperator(task_id="submit", request=request, decision=decision).execute(
        ctx
    )


# --- one factory per deferring operator: (operator, its context) ready to execute; --------
# ``before_submit`` runs just before the operator's workload is submitted


def fabric(run_id: str, before_submit=_nothing):
    op = FabricValidationOperator(
        task_id="validate_fabric", cluster=CLUSTER, node_pool=POOL, outlets=[POOL_VALIDATED]
    )
    before_submit()
    return op, context(run_id)


def storage(run_id: str, before_submit=_nothing):
    op = StorageValidationOperator(task_id="validate_storage", cluster=CLUSTER, node_pool=POOL)
    before_submit()
    return op, context(run_id)


def confirm(run_id: str, before_submit=_nothing):
    job = submitted_job("confirm-me", run_id, before_submit)
    op = ConfirmTransportOperator(task_id="confirm_transport", job=job, outlets=[JOB_CONFIRMED])
    return op, context(run_id)


OPERATORS = {"fabric": fabric, "storage": storage, "confirm": confirm}


# --- success --------------------------------------------------------------------------------


def test_fabric_on_done_records_a_passing_verdict_and_announces_it(fleet, triggerer):
    op, ctx = fabric("manual__fabric")
    summary = triggerer.run(op, ctx)
    assert summary["passed"] and summary["transport"] == "gib"
    row = Ledger().latest_validation(CLUSTER, POOL, "fabric")
    assert row["passed"] and row["run_id"] == "manual__fabric"
    extra = ctx["outlet_events"][POOL_VALIDATED].extra
    assert (extra["pool"], extra["transport"]) == (POOL, "gib")


def test_fabric_on_done_with_a_failing_pool_fails_for_good(fleet, triggerer):
    SimState().inject(CLUSTER, POOL, "fabric-down")
    op, ctx = fabric("manual__down")
    with pytest.raises(AirflowFailException, match="failed fabric validation"):
        triggerer.run(op, ctx)
    assert Ledger().latest_validation(CLUSTER, POOL, "fabric")["passed"] is False


def test_storage_on_done_records_a_passing_verdict(fleet, triggerer):
    op, ctx = storage("manual__storage")
    summary = triggerer.run(op, ctx)
    assert summary["passed"]
    assert Ledger().latest_validation(CLUSTER, POOL, "storage")["passed"]


def test_storage_on_done_with_slow_lustre_fails_for_good(fleet, triggerer):
    SimState().inject(CLUSTER, POOL, "lustre-slow:0.3")
    op, ctx = storage("manual__slow")
    with pytest.raises(AirflowFailException, match="storage validation failed"):
        triggerer.run(op, ctx)


def test_confirm_on_running_confirms_every_rank_and_announces_it(fleet, triggerer):
    op, ctx = confirm("manual__confirm")
    result = triggerer.run(op, ctx)
    assert result["state"] == "confirmed" and result["transport"] == "gib"
    assert len(result["ranks"]) == 2
    (launch,) = Ledger().launches()
    assert launch["state"] == "confirmed" and launch["id"] == op.job["launch_id"]
    assert ctx["outlet_events"][JOB_CONFIRMED].extra["job"] == "ml-team/confirm-me"


# --- error and timeout ----------------------------------------------------------------------


@pytest.mark.parametrize("make", OPERATORS.values(), ids=OPERATORS.keys())
def test_an_error_event_raises_for_a_retry(fleet, triggerer, make):
    op, ctx = make("manual__error")
    deferred = deferral(lambda: op.execute(ctx))
    event = triggerer.fire(deferred.trigger, cluster="no-such-cluster")
    assert event["status"] == "error"
    with pytest.raises(AirflowException, match="unknown cluster 'no-such-cluster'") as info:
        op.execute_complete(ctx, event=event)
    assert not isinstance(info.value, AirflowFailException)  # retryable
    launches = Ledger().launches()
    assert all(launch["state"] == "submitted" for launch in launches)  # nothing settled


@pytest.mark.parametrize("make", OPERATORS.values(), ids=OPERATORS.keys())
def test_a_timeout_event_raises_for_a_retry(fleet, triggerer, make):
    # the sim's clock stands still (tests/conftest.py freezes it): the workload never starts
    op, ctx = make("manual__timeout")
    deferred = deferral(lambda: op.execute(ctx))
    # the trigger's deadline passed before its first look
    event = triggerer.fire(deferred.trigger, timeout=0.0, started=deferred.trigger.started - 1)
    assert event["status"] == "timeout"
    with pytest.raises(AirflowException, match="still") as info:
        op.execute_complete(ctx, event=event)
    assert not isinstance(info.value, AirflowFailException)


# --- no deferral when the wait is already over --------------------------------------------


def test_confirm_of_a_job_already_running_confirms_without_deferring(fleet, monkeypatch):
    op, ctx = confirm("manual__running")
    backend = cluster_backend(load_catalog().cluster(CLUSTER))
    job = op.job
    for _ in range(300):  # the sim's clock moves the job to Running: no wall-clock wait
        if backend.workload_status(job["kind"], job["name"], job["namespace"]).phase == "Running":
            break
        SimState().clock.advance(0.1)
    else:
        raise AssertionError("the simulated job never started")
    result = op.execute(ctx)  # no TaskDeferred: the check before deferring saw it running
    assert result["state"] == "confirmed" and result["transport"] == "gib"
    (launch,) = Ledger().launches()
    assert launch["state"] == "confirmed"


def test_confirm_of_a_job_not_yet_running_defers(fleet):
    op, ctx = confirm("manual__pending")  # the frozen sim clock: its pods have not started
    deferred = deferral(lambda: op.execute(ctx))
    assert deferred.method_name == "execute_complete"
    assert deferred.trigger.serialize()[1]["until"] == "running"
