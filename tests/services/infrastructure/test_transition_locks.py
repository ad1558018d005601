"""The transition lock under overlap: a live holder keeps it (its run state read as the Task SDK
returns it, an enum), a dead holder's lock is taken over by exactly one of many resumers (a
compare-and-set, on SQLite and PostgreSQL), and a finished transition is never redone. A holder
this Airflow does not know (another deployment, a renamed DAG) keeps it while its lease is
fresh (the clock is injected: ``now``)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from airflow.sdk.api.datamodels._generated import DagRunState as SdkDagRunState
from airflow.sdk.exceptions import AirflowFailException, AirflowRuntimeError, ErrorType
from airflow.sdk.execution_time.comms import DagRunStateResult, ErrorResponse
from airflow.utils.state import DagRunState as CoreDagRunState

from gpufleet.airflow.operators.runs import run_alive
from gpufleet.airflow.operators.transition import TransitionLockOperator
from gpufleet.config.catalog import load_catalog
from gpufleet.domain.leases import LEASE_TTL
from gpufleet.domain.transition import FORWARD
from gpufleet.services.infrastructure.transition import ReservationTransition, TransitionRefused
from gpufleet.store import Ledger
from tests.services.infrastructure.test_transition_resume import FAST, NEW, OLD, do, queues, run
from tests.store.test_ledger import ledger_url  # noqa: F401  (fixture: SQLite and PostgreSQL)
from tests.support.ledger_helpers import start_transition
from tests.support.race import race

CLUSTER = "a3u-sim"


class _Dag:
    dag_id = "reservation_transition"


class SdkTaskInstance:
    """What a task's ``ti`` answers for other runs: the supervisor's ``DagRunStateResult``,
    decoded from the wire as the Task SDK decodes it (``state`` is the SDK's enum)."""

    def __init__(self, states: dict[str, str]):
        self.states = states

    def get_dagrun_state(self, dag_id: str, run_id: str):
        if run_id not in self.states:
            detail = {"status_code": 404, "message": "not found", "detail": None}
            raise AirflowRuntimeError(
                ErrorResponse(error=ErrorType.API_SERVER_ERROR, detail=detail)
            )
        wire = f'{{"state": "{self.states[run_id]}", "type": "DagRunStateResult"}}'
        return DagRunStateResult.model_validate_json(wire).state


def context(run_id: str, states: dict[str, str]) -> dict:
    return {"run_id": run_id, "dag": _Dag(), "ti": SdkTaskInstance(states)}


# --- run liveness (one check for every ledger lock) ----------------------------------------


def test_the_sdk_returns_an_enum_whose_str_is_not_its_value():
    state = SdkTaskInstance({"r": "running"}).get_dagrun_state("d", "r")
    assert isinstance(state, SdkDagRunState) and str(state) == "DagRunState.RUNNING"


@pytest.mark.parametrize(
    ("state", "alive"),
    [("queued", True), ("running", True), ("success", False), ("failed", False)],
)
def test_run_alive_reads_the_sdk_enum_by_value(state, alive):
    assert run_alive(context("me", {"holder": state}), "reservation_transition", "holder") is alive


@pytest.mark.parametrize("state", [CoreDagRunState.RUNNING, "running", "RUNNING"])
def test_run_alive_reads_core_enums_and_strings(state):
    class Ti:
        def get_dagrun_state(self, dag_id, run_id):
            return state

    assert run_alive({"run_id": "me", "dag": _Dag(), "ti": Ti()}, "d", "holder") is True


def test_a_run_the_api_server_does_not_know_is_not_alive_and_other_errors_raise():
    assert run_alive(context("me", {}), "reservation_transition", "deleted-run") is False

    class Down:
        def get_dagrun_state(self, dag_id, run_id):
            detail = {"status_code": 503, "message": "unavailable", "detail": None}
            raise AirflowRuntimeError(
                ErrorResponse(error=ErrorType.API_SERVER_ERROR, detail=detail)
            )

    with pytest.raises(AirflowRuntimeError):  # never "dead" on a doubt: the lock stays
        run_alive({"run_id": "me", "dag": _Dag(), "ti": Down()}, "d", "holder")


# --- finding 1: a live holder keeps the lock, seen through the operator --------------------


def lock_task() -> TransitionLockOperator:
    return TransitionLockOperator(task_id="lock", cluster=CLUSTER, old_pool=OLD, new_pool=NEW)


def test_a_running_holder_keeps_the_lock_against_a_second_run(airflow_db, fleet_state):
    run("run-1")  # holds the lock (its tasks are between steps)
    with pytest.raises(AirflowFailException, match="being run by run-1; wait for it to end"):
        lock_task().execute(context("run-2", {"run-1": "running"}))
    assert Ledger().running_transition(CLUSTER)["run_id"] == "run-1"


def test_a_failed_holders_lock_is_resumed_by_the_next_run(airflow_db, fleet_state):
    run("run-1")
    out = lock_task().execute(context("run-2", {"run-1": "failed"}))
    assert out["next"] == "preflighted"
    assert Ledger().running_transition(CLUSTER)["run_id"] == "run-2"


# --- finding 2: taking over a dead holder's lock is a compare-and-set ----------------------


def test_of_eight_resumers_of_a_dead_holder_exactly_one_takes_the_lock(ledger_url):  # noqa: F811
    ledger = Ledger(ledger_url)
    tid = start_transition(ledger, CLUSTER, OLD, NEW, "dead-run", step="planned")
    barrier = threading.Barrier(8)

    def judged_dead(dag_id: str, holder: str) -> bool:
        # every resumer has read the row and judged its holder before any takes it over
        barrier.wait(30)
        return holder not in ("dead-run",)

    def resume(me: str) -> None:
        svc = ReservationTransition(load_catalog(), CLUSTER, OLD, NEW, Ledger(ledger_url), me, FAST)
        svc.open("run", judged_dead)

    won, refused = race(resume, TransitionRefused, prefix="resumer")
    assert len(won) == 1, won
    holder = ledger.transition(tid)["run_id"]
    assert won == [holder]
    assert len(refused) == 7 and all(f"being run by {holder}" in r for r in refused)


# --- finding 3: a finished transition is not redone -----------------------------------------


@pytest.mark.slow
def test_rerunning_a_finished_transition_is_refused_naming_its_run(fleet_state):
    first = run("run-1")
    for step in FORWARD[1:]:
        do(first, step)
    t = Ledger().transitions(CLUSTER, limit=1)[0]
    assert (t["state"], t["run_id"]) == ("done", "run-1")
    before = queues(first)

    with pytest.raises(TransitionRefused, match="was finished by run run-1"):
        run("run-2")  # the same conf, after done
    assert queues(first) == before  # the pool in service was not put back on Hold
    assert [r["id"] for r in Ledger().transitions(CLUSTER)] == [t["id"]]  # nothing opened
    assert Ledger().running_transition(CLUSTER) is None

    # the run that finished it (a retried last task) finds its own transition, done
    again = run("run-1")
    assert again.tid == t["id"] and again.current().value == "done"


@pytest.mark.slow
def test_a_transition_from_another_pool_onto_a_pool_in_service_is_refused(fleet_state):
    first = run("run-1")
    for step in FORWARD[1:]:
        do(first, step)
    svc = ReservationTransition(load_catalog(), CLUSTER, "h200-a", NEW, Ledger(), "run-3", FAST)
    with pytest.raises(TransitionRefused, match="h200-c is in service already"):
        svc.open("run", lambda d, r: False)
    assert Ledger().running_transition(CLUSTER) is None


# --- the lease: a holder this Airflow does not know (404) -----------------------------------

T0 = datetime(2026, 12, 1, 3, 0, tzinfo=UTC)
RENEWED = T0 + LEASE_TTL / 2  # when a holder renews its lease
SHORT = LEASE_TTL - timedelta(minutes=1)  # silent this long: the lease still holds
PAST = LEASE_TTL + timedelta(minutes=1)  # silent this long: the lease expired
UNKNOWN = lambda dag_id, run_id: None  # noqa: E731 - this Airflow answers 404 for every run


def opened(url: str | None, run_id: str, at: datetime, alive=UNKNOWN, dag="reservation_transition"):
    svc = ReservationTransition(load_catalog(), CLUSTER, OLD, NEW, Ledger(url), run_id, FAST)
    svc.open("run", alive, dag_id=dag, now=at)
    return svc


def test_an_unknown_holder_with_a_fresh_lease_keeps_the_lock_until_it_expires(ledger_url):  # noqa: F811
    opened(ledger_url, "other-deployment-run", T0)
    with pytest.raises(TransitionRefused, match="being run by other-deployment-run"):
        opened(ledger_url, "run-2", RENEWED)
    opened(ledger_url, "other-deployment-run", RENEWED)  # it renews
    with pytest.raises(TransitionRefused, match="being run by other-deployment-run"):
        opened(ledger_url, "run-2", RENEWED + SHORT)  # past T0's lease, not the renewal's
    assert Ledger(ledger_url).running_transition(CLUSTER)["run_id"] == "other-deployment-run"
    opened(ledger_url, "run-2", RENEWED + PAST)  # silent longer than the lease: expired
    row = Ledger(ledger_url).running_transition(CLUSTER)
    assert (row["run_id"], row["heartbeat_at"]) == ("run-2", RENEWED + PAST)


def test_a_holder_whose_expired_lock_was_taken_over_is_refused(ledger_url):  # noqa: F811
    opened(ledger_url, "slow-run", T0)
    opened(ledger_url, "run-2", T0 + PAST)
    with pytest.raises(TransitionRefused, match="being run by run-2"):
        opened(ledger_url, "slow-run", T0 + PAST + timedelta(minutes=1), alive=lambda d, r: True)
    assert Ledger(ledger_url).running_transition(CLUSTER)["run_id"] == "run-2"


def test_the_holders_dag_is_asked_so_a_renamed_dag_keeps_its_lock(ledger_url):  # noqa: F811
    """The holder's DAG is recorded: its run is looked up under that DAG, not the caller's."""
    opened(ledger_url, "run-1", T0, dag="reservation_transition_v1")
    asked: list[tuple[str, str]] = []

    def alive(dag_id: str, run_id: str):
        asked.append((dag_id, run_id))
        return True if dag_id == "reservation_transition_v1" else None

    with pytest.raises(TransitionRefused, match="being run by run-1"):
        opened(ledger_url, "run-2", T0 + timedelta(hours=3), alive=alive)
    assert asked == [("reservation_transition_v1", "run-1")]


def test_a_takeover_read_before_the_holder_renewed_loses(ledger_url):  # noqa: F811
    """The compare-and-set compares the heartbeat read too: a holder that renewed its lease
    between another run's read and its takeover keeps the lock."""
    ledger = Ledger(ledger_url)
    opened(ledger_url, "run-1", T0)
    seen = ledger.running_transition(CLUSTER)  # read once expired
    assert ledger.heartbeat_transition(seen["id"], "run-1", None, T0 + PAST)
    assert not ledger.take_over_transition(seen["id"], seen, "run-2", "d", T0)
    assert ledger.running_transition(CLUSTER)["run_id"] == "run-1"


def test_a_holder_renewing_after_its_transition_was_taken_over_is_refused(ledger_url):  # noqa: F811
    """slow-run goes silent past its lease, run-2 takes the transition over; slow-run's late
    renewal answers False and moves nothing: not run-2's heartbeat, not the holder's DAG."""
    ledger = Ledger(ledger_url)
    opened(ledger_url, "slow-run", T0, dag="reservation_transition_v0")
    opened(ledger_url, "run-2", T0 + PAST)  # expired: taken over
    taken = ledger.running_transition(CLUSTER)
    assert (taken["run_id"], taken["heartbeat_at"]) == ("run-2", T0 + PAST)
    late = T0 + PAST + SHORT
    assert not ledger.heartbeat_transition(
        taken["id"], "slow-run", "reservation_transition_v0", late
    )
    assert ledger.running_transition(CLUSTER) == taken
    assert ledger.heartbeat_transition(taken["id"], "run-2", "reservation_transition", late)
    assert ledger.running_transition(CLUSTER)["heartbeat_at"] == late


def test_a_task_whose_transition_is_taken_over_before_it_renews_stops(ledger_url):  # noqa: F811
    """The race the renewal's holder check is for: run-1's task reads the running transition
    as its own, run-2 takes the expired lease over, then run-1 renews. The task is refused,
    saying it lost its lease and naming run-2, whose heartbeat stays where run-2 put it."""

    class RacedLedger(Ledger):
        def open_transition(self, *args, **kw):
            row, created = super().open_transition(*args, **kw)  # run-1 reads itself the holder
            assert self.take_over_transition(row["id"], row, "run-2", _Dag.dag_id, T0 + PAST)
            return row, created

    opened(ledger_url, "run-1", T0)
    svc = ReservationTransition(
        load_catalog(), CLUSTER, OLD, NEW, RacedLedger(ledger_url), "run-1", FAST
    )
    with pytest.raises(TransitionRefused, match=r"this run \(run-1\) lost its lease; .* by run-2;"):
        svc.open("run", UNKNOWN, dag_id=_Dag.dag_id, now=T0 + PAST + timedelta(minutes=1))
    row = Ledger(ledger_url).running_transition(CLUSTER)
    assert (row["run_id"], row["heartbeat_at"]) == ("run-2", T0 + PAST)


def test_of_eight_racers_for_an_expired_lease_exactly_one_wins(ledger_url):  # noqa: F811
    opened(ledger_url, "silent-run", T0)
    barrier = threading.Barrier(8)
    won: list[str] = []
    refused: list[str] = []

    def unknown(dag_id: str, run_id: str):
        barrier.wait(30)  # all eight read the expired holder before any takes it over
        return None

    won, refused = race(
        lambda me: opened(ledger_url, me, T0 + PAST, alive=unknown),
        TransitionRefused,
        prefix="racer",
    )
    holder = Ledger(ledger_url).running_transition(CLUSTER)["run_id"]
    assert won == [holder]
    assert len(refused) == 7 and all(f"being run by {holder}" in r for r in refused)


def test_a_second_run_is_refused_when_airflow_does_not_know_the_live_holder(
    airflow_db, fleet_state
):
    """Through the operator: the holder is a run of another deployment (404 here) whose
    tasks touched the lock a moment ago. It keeps the lock."""
    from gpufleet.airflow.operators.transition import TransitionLockOperator

    lock = TransitionLockOperator(task_id="lock", cluster=CLUSTER, old_pool=OLD, new_pool=NEW)
    lock.execute(context("other-deployment-run", {}))  # takes the lock, heartbeat now
    with pytest.raises(AirflowFailException, match="being run by other-deployment-run"):
        lock.execute(context("run-2", {}))  # this Airflow answers 404 for the holder
    assert Ledger().running_transition(CLUSTER)["run_id"] == "other-deployment-run"


def test_a_transition_takeover_compares_the_holder_too(ledger_url):  # noqa: F811
    """Two takeovers stamped with the same instant: the holder read decides (one winner)."""
    ledger = Ledger(ledger_url)
    opened(ledger_url, "run-1", T0)
    seen = ledger.running_transition(CLUSTER)
    assert ledger.take_over_transition(seen["id"], seen, "run-2", "d", T0)  # same heartbeat
    assert not ledger.take_over_transition(seen["id"], seen, "run-3", "d", T0)
    assert ledger.running_transition(CLUSTER)["run_id"] == "run-2"


def test_the_lock_task_sweeps_the_sim_faults_of_killed_runs(airflow_db, fleet_state):
    """A nightly killed with ``kill -9`` never ran its teardown: its faults must not reach the
    transition's validation of the new pool (the lock task is the transition's first)."""
    from gpufleet.backends.sim.state import SimState
    from gpufleet.domain.faults import RunLease

    SimState().inject(
        CLUSTER, NEW, "fabric-down", lease=RunLease("nightly_fabric_validation", "killed")
    )
    SimState().inject(CLUSTER, OLD, "lustre-slow")  # a CLI fault lasts until cleared
    lock_task().execute(context("run-1", {"run-1": "running"}))
    assert [(f.pool, f.fault.text) for f in SimState().faults()] == [(OLD, "lustre-slow")]


def test_the_launch_gate_sweeps_the_sim_faults_of_killed_runs(airflow_db, fleet_state):
    """The same for a launch: its gate task runs first, before anything is submitted."""
    from gpufleet.airflow.operators.launch import LaunchGateOperator
    from gpufleet.backends.sim.state import SimState
    from gpufleet.domain.faults import RunLease

    SimState().inject(
        CLUSTER, "h200-a", "fabric-down", lease=RunLease("nightly_fabric_validation", "killed")
    )
    request = {
        "cluster": CLUSTER,
        "pools": ["h200-a"],
        "nodes": 2,
        "gpus_per_node": 8,
        "job_name": "j1",
        "namespace": "ml-team",
        "image": "example/train:1",
        "command": ["t"],
    }
    gate = LaunchGateOperator(task_id="gate", request=request)
    with pytest.raises(AirflowFailException):  # refused (nothing validated): swept all the same
        gate.execute({**context("run-1", {"run-1": "running"}), "dag": None})
    assert SimState().faults() == []


# --- the transition's lock is a LeaseLock: the running row, one compare-and-set for all locks --


def test_the_transition_lease_is_the_running_rows_lock_only(ledger_url):  # noqa: F811
    """``transition_lease`` renews and takes over only while the transition runs: a finished
    transition's row is nobody's lock (its holder cannot renew it, nobody can take it)."""
    from gpufleet.store.locks import LeaseLock

    ledger = Ledger(ledger_url)
    opened(ledger_url, "run-1", T0)
    seen = ledger.running_transition(CLUSTER)
    lease = ledger.transition_lease(seen["id"], _Dag.dag_id)
    assert isinstance(lease, LeaseLock) and lease.row() == seen
    ledger.finish_transition(seen["id"], "done")
    assert lease.row() is None
    assert lease.heartbeat("run-1", T0 + SHORT) is False
    assert lease.take_over(seen, _Dag.dag_id, "run-2", T0 + PAST) is False
    row = ledger.transition(seen["id"])
    assert (row["state"], row["run_id"], row["heartbeat_at"]) == ("done", "run-1", T0)


def test_a_renewal_names_the_holders_dag_on_a_row_recorded_without_one(ledger_url):  # noqa: F811
    """A transition recorded before v10 names no DAG; its holder's renewal fills it in."""
    ledger = Ledger(ledger_url)
    opened(ledger_url, "run-1", T0)
    tid = ledger.running_transition(CLUSTER)["id"]
    ledger.update_transition(tid, dag_id=None)
    assert ledger.transition_lease(tid, "reservation_transition").heartbeat("run-1", T0 + SHORT)
    row = ledger.transition(tid)
    assert (row["dag_id"], row["heartbeat_at"]) == ("reservation_transition", T0 + SHORT)


def test_a_task_whose_transition_finished_before_it_renews_stops_naming_no_run(ledger_url):  # noqa: F811
    """run-1's task reads the running transition as its own, the transition is finished (by
    another of its tasks) before the task renews: the renewal fails and the refusal says the
    lease was lost without naming run-1 as the holder of a lock nobody holds."""

    class RacedLedger(Ledger):
        def open_transition(self, *args, **kw):
            row, created = super().open_transition(*args, **kw)  # run-1 reads itself the holder
            self.finish_transition(row["id"], "done")
            return row, created

    opened(ledger_url, "run-1", T0)
    svc = ReservationTransition(
        load_catalog(), CLUSTER, OLD, NEW, RacedLedger(ledger_url), "run-1", FAST
    )
    with pytest.raises(
        TransitionRefused, match=r"this run \(run-1\) lost its lease; .* by another run;"
    ):
        svc.open("run", UNKNOWN, dag_id=_Dag.dag_id, now=T0 + SHORT)
