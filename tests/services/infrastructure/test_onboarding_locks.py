"""One run onboards a region at a time: the region's ledger lock (``gf_region_locks``, v10),
taken by compare-and-set, held by every step that changes the region, handed over when the
holder's run is no longer alive, released by the report task. The end-to-end run (the lock
released by a whole onboarding, the "Cloud console" link of a step that deferred surviving the
new process Airflow resumes it in) shares tests/test_onboarding_dag.py's first onboarding:
``test_a_deferred_steps_console_link_survives_and_the_run_releases_the_lock`` is there."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException, TaskDeferred
from sqlalchemy import inspect

from gpufleet.airflow.operators.onboarding import (
    OnboardingReportOperator,
    OnboardingStepOperator,
    RegionReleaseOperator,
)
from gpufleet.config.catalog import load_catalog
from gpufleet.domain.leases import LEASE_TTL
from gpufleet.services.infrastructure.onboarding import OnboardingRefused, RegionOnboarding
from gpufleet.store import Ledger, migrations
from gpufleet.store import schema as s
from tests.services.infrastructure.test_transition_locks import SdkTaskInstance
from tests.store.test_ledger import ledger_url  # noqa: F401  (fixture: SQLite and PostgreSQL)
from tests.support.ledger_helpers import heartbeat_region_lock, take_over_region_lock
from tests.support.race import race

REGION = "sim-europe-west4"
DAG = "region_onboarding"


def onboarding(url: str | None, run_id: str) -> RegionOnboarding:
    return RegionOnboarding(load_catalog().region(REGION), Ledger(url), run_id)


# --- the ledger lock, on SQLite and PostgreSQL ----------------------------------------------


def test_a_live_holder_keeps_the_region_and_the_second_run_is_refused_naming_it(ledger_url):  # noqa: F811
    onboarding(ledger_url, "run-1").lock(DAG, lambda d, r: True)
    with pytest.raises(OnboardingRefused, match="being onboarded by run run-1 of region_onb"):
        onboarding(ledger_url, "run-2").lock(DAG, lambda d, r: (d, r) == (DAG, "run-1"))
    onboarding(ledger_url, "run-1").lock(DAG, lambda d, r: True)  # its later steps hold it
    assert Ledger(ledger_url).region_lock(REGION)["run_id"] == "run-1"


def test_a_dead_holders_lock_goes_to_the_next_run_and_only_the_holder_releases(ledger_url):  # noqa: F811
    onboarding(ledger_url, "run-1").lock(DAG, lambda d, r: True)
    onboarding(ledger_url, "run-2").lock(DAG, lambda d, r: False)  # run-1 was killed
    assert Ledger(ledger_url).region_lock(REGION)["run_id"] == "run-2"
    assert onboarding(ledger_url, "run-1").unlock() is False  # never another run's lock
    assert onboarding(ledger_url, "run-2").unlock() is True
    assert Ledger(ledger_url).region_lock(REGION) is None
    onboarding(ledger_url, "run-3").lock(DAG, lambda d, r: True)  # free: taken at once


def test_of_eight_runs_taking_over_a_dead_holder_exactly_one_wins(ledger_url):  # noqa: F811
    onboarding(ledger_url, "dead-run").lock(DAG, lambda d, r: True)
    barrier = threading.Barrier(8)

    def judged_dead(dag_id: str, run_id: str) -> bool:
        barrier.wait(30)  # all eight read the holder before any takes it over
        return run_id != "dead-run"

    won, refused = race(
        lambda me: onboarding(ledger_url, me).lock(DAG, judged_dead),
        OnboardingRefused,
        prefix="run",
    )
    holder = Ledger(ledger_url).region_lock(REGION)["run_id"]
    assert won == [holder]
    assert len(refused) == 7 and all(f"by run {holder} " in r for r in refused)


def test_upgrade_to_v10_adds_the_region_lock(ledger_url):  # noqa: F811
    """A version-9 ledger (no ``gf_region_locks``) gains the table, and keeps its rows."""
    from tests.test_ledger_migrations import NOW, build, insert

    engine = build(ledger_url, 9)  # through Alembic, as the code before it left a v9 ledger
    with engine.begin() as conn:
        insert(conn, ledger_url, "gf_regions", region=REGION, state="ready", run_id="r0",
               updated_at=NOW)  # fmt: skip
    assert "gf_region_locks" not in inspect(engine).get_table_names()
    ledger = Ledger(ledger_url)
    assert migrations.ensure_schema(ledger.engine) == s.SCHEMA_VERSION
    assert "gf_region_locks" in inspect(ledger.engine).get_table_names()
    assert migrations.ensure_schema(ledger.engine) == s.SCHEMA_VERSION  # idempotent
    assert ledger.region_state(REGION)["state"] == "ready"
    onboarding(ledger_url, "r1").lock(DAG, lambda d, r: True)
    assert ledger.region_lock(REGION)["run_id"] == "r1"


# --- the operators: a refused run changes nothing --------------------------------------------


class _Dag:
    dag_id = DAG


def context(run_id: str, states: dict[str, str]) -> dict:
    return {"run_id": run_id, "dag": _Dag(), "ti": SdkTaskInstance(states)}


@pytest.mark.parametrize("step", ["preflight", "network", "cluster", "node_pools"])
def test_a_step_of_a_second_run_fails_naming_the_running_holder(airflow_db, fleet_state, step):
    onboarding(None, "run-1").lock(DAG, lambda d, r: True)
    op = OnboardingStepOperator(task_id=step, step=step, region=REGION)
    with pytest.raises(AirflowFailException, match="being onboarded by run run-1"):
        op.execute(context("run-2", {"run-1": "running"}))  # the SDK's enum: alive
    assert Ledger().onboarding_actions(REGION, "run-2") == []  # nothing was looked at or made
    assert Ledger().region_lock(REGION)["run_id"] == "run-1"


def test_a_refused_runs_release_and_report_leave_the_holder_alone(airflow_db, fleet_state):
    onboarding(None, "run-1").lock(DAG, lambda d, r: True)
    Ledger().set_region_state(REGION, "onboarding", run_id="run-1")
    ctx = context("run-2", {"run-1": "running"})
    ctx["ti"].get_task_states = lambda dag_id, run_ids: {"run-2": {"preflight": "failed"}}
    release = RegionReleaseOperator(task_id="release", region=REGION)
    with pytest.raises(AirflowFailException, match="run-1 holds it"):
        release.execute(ctx)
    assert Ledger().region_state(REGION)["state"] == "onboarding"  # not marked failed
    OnboardingReportOperator(task_id="report", region=REGION).execute(ctx)  # watcher fails it
    assert Ledger().region_lock(REGION)["run_id"] == "run-1"


def test_a_refused_runs_release_after_the_holder_finished_records_nothing(airflow_db, fleet_state):
    """The overlap campaign found it: run-2 was refused at its first step while run-1 onboarded
    the region; run-1 finished (ready) and released the lock; run-2's release then took the
    free lock and recorded the region failed over run-1's ready."""
    onboarding(None, "run-1").lock(DAG, lambda d, r: True)
    Ledger().set_region_state(REGION, "ready", run_id="run-1")
    Ledger().release_region_lock(REGION, "run-1")
    ctx = context("run-2", {"run-1": "success"})
    ctx["ti"].get_task_states = lambda dag_id, run_ids: {"run-2": {"preflight": "failed"}}
    release = RegionReleaseOperator(task_id="release", region=REGION)
    with pytest.raises(AirflowFailException, match="does not hold the region"):
        release.execute(ctx)
    assert Ledger().region_state(REGION)["state"] == "ready"
    assert Ledger().region_lock(REGION) is None


# --- the report task releases the lock its run holds -------------------------------------


@pytest.mark.parametrize(
    "steps",
    [
        {"preflight": "success", "network": "success", "release": "success"},
        {"preflight": "success", "network": "failed", "release": "upstream_failed"},
    ],
    ids=["succeeded", "failed"],
)
def test_the_report_releases_the_region_its_run_holds(airflow_db, fleet_state, steps):
    """The report is the run's last task and the one that releases the region's lock, whether
    the run succeeded or failed (the DAG's watcher fails the run): a live run that ended
    would otherwise keep the region from every later run until someone clears the lock."""
    onboarding(None, "run-1").lock(DAG, lambda d, r: True)
    ctx = context("run-1", {"run-1": "running"})
    ctx["ti"].get_task_states = lambda dag_id, run_ids: {"run-1": steps}
    OnboardingReportOperator(task_id="report", region=REGION).execute(ctx)
    assert Ledger().region_lock(REGION) is None
    onboarding(None, "run-2").lock(DAG, lambda d, r: True)  # free: the next run takes it
    assert Ledger().region_lock(REGION)["run_id"] == "run-2"


# --- the lease: a holder this Airflow does not know (another deployment, a renamed DAG) ------

T0 = datetime(2026, 12, 1, 3, 0, tzinfo=UTC)
SHORT = LEASE_TTL - timedelta(minutes=1)  # silent this long: the lease still holds
PAST = LEASE_TTL + timedelta(minutes=1)  # silent this long: the lease expired
UNKNOWN = lambda dag_id, run_id: None  # noqa: E731 - this Airflow answers 404 for every run


def test_an_unknown_holder_keeps_the_region_while_its_lease_is_fresh(ledger_url):  # noqa: F811
    onboarding(ledger_url, "other-deployment-run").lock("region_onboarding_v0", UNKNOWN, T0)
    with pytest.raises(OnboardingRefused, match="by run other-deployment-run of region_onb"):
        onboarding(ledger_url, "run-2").lock(DAG, UNKNOWN, T0 + SHORT)
    # its next step renews the lease
    onboarding(ledger_url, "other-deployment-run").lock(DAG, UNKNOWN, T0 + SHORT)
    with pytest.raises(OnboardingRefused, match=f"last heard from {(T0 + SHORT):%Y-%m-%d %H:%M}"):
        onboarding(ledger_url, "run-2").lock(DAG, UNKNOWN, T0 + SHORT * 2)
    onboarding(ledger_url, "run-2").lock(DAG, UNKNOWN, T0 + SHORT + PAST)  # expired
    row = Ledger(ledger_url).region_lock(REGION)
    assert (row["run_id"], row["dag_id"]) == ("run-2", DAG)
    assert row["heartbeat_at"] == T0 + SHORT + PAST


def test_the_region_holders_own_dag_is_asked(ledger_url):  # noqa: F811
    onboarding(ledger_url, "run-1").lock("region_onboarding_v0", UNKNOWN, T0)
    asked: list[tuple[str, str]] = []

    def alive(dag_id: str, run_id: str):
        asked.append((dag_id, run_id))
        return True

    with pytest.raises(OnboardingRefused, match="by run run-1 of region_onboarding_v0"):
        onboarding(ledger_url, "run-2").lock(DAG, alive, T0 + timedelta(hours=5))
    assert asked == [("region_onboarding_v0", "run-1")]


def test_a_region_takeover_read_before_the_holder_renewed_loses(ledger_url):  # noqa: F811
    ledger = Ledger(ledger_url)
    onboarding(ledger_url, "run-1").lock(DAG, UNKNOWN, T0)
    seen = ledger.region_lock(REGION)
    assert heartbeat_region_lock(ledger, REGION, "run-1", T0 + PAST)
    assert not take_over_region_lock(ledger, REGION, seen, DAG, "run-2", T0 + PAST * 2)
    assert ledger.region_lock(REGION)["run_id"] == "run-1"


def test_a_holder_renewing_after_its_region_was_taken_over_is_refused(ledger_url):  # noqa: F811
    """run-1 goes silent past its lease, run-2 takes the region over; run-1's late renewal
    answers False and leaves run-2's lease as it was (else run-1 stretches a lease it lost)."""
    ledger = Ledger(ledger_url)
    onboarding(ledger_url, "run-1").lock(DAG, UNKNOWN, T0)
    onboarding(ledger_url, "run-2").lock(DAG, UNKNOWN, T0 + PAST)  # expired: taken over
    taken = ledger.region_lock(REGION)
    assert (taken["run_id"], taken["heartbeat_at"]) == ("run-2", T0 + PAST)
    assert heartbeat_region_lock(ledger, REGION, "run-1", T0 + PAST + SHORT) is False
    assert ledger.region_lock(REGION) == taken


def test_a_step_whose_region_is_taken_over_before_it_renews_stops(ledger_url):  # noqa: F811
    """The race the renewal's holder check is for: run-1's step reads the lock as its own,
    run-2 takes the expired lease over, then run-1 renews. The step is refused, saying it lost
    its lease and naming run-2, and run-2's heartbeat is left where run-2 put it."""
    from gpufleet.store.locks import LeaseLock

    class TakenOverAfterTheRead(LeaseLock):
        def hold(self, dag_id, run_id, now=None, holder=None):
            row = super().hold(dag_id, run_id, now, holder)  # run-1 reads itself the holder
            assert LeaseLock(self.engine, self.table, self.key).take_over(
                row, DAG, "run-2", T0 + PAST
            )
            return row

    class RacedLedger(Ledger):
        def region_lease(self, region):
            return TakenOverAfterTheRead(self.engine, s.region_locks, {"region": region})

    onboarding(ledger_url, "run-1").lock(DAG, UNKNOWN, T0)
    late = RegionOnboarding(load_catalog().region(REGION), RacedLedger(ledger_url), "run-1")
    with pytest.raises(
        OnboardingRefused, match=r"this run \(run-1\) lost its lease; .* run run-2 "
    ):
        late.lock(DAG, UNKNOWN, T0 + PAST + timedelta(minutes=1))
    row = Ledger(ledger_url).region_lock(REGION)
    assert (row["run_id"], row["heartbeat_at"]) == ("run-2", T0 + PAST)


def test_of_eight_runs_racing_for_an_expired_region_lease_exactly_one_wins(ledger_url):  # noqa: F811
    onboarding(ledger_url, "silent-run").lock(DAG, UNKNOWN, T0)
    barrier = threading.Barrier(8)

    def unknown(dag_id: str, run_id: str):
        barrier.wait(30)  # all eight read the expired holder before any takes it over
        return None

    won, refused = race(
        lambda me: onboarding(ledger_url, me).lock(DAG, unknown, T0 + PAST),
        OnboardingRefused,
        prefix="racer",
    )
    holder = Ledger(ledger_url).region_lock(REGION)["run_id"]
    assert won == [holder]
    assert len(refused) == 7 and all(f"by run {holder} " in r for r in refused)


def test_a_step_is_refused_when_airflow_does_not_know_the_live_holder(airflow_db, fleet_state):
    """Through the operator: the holder is a run of another deployment (404 here) that
    touched the lock a moment ago: the step fails and looks at nothing."""
    onboarding(None, "other-deployment-run").lock(DAG, UNKNOWN)
    op = OnboardingStepOperator(task_id="network", step="network", region=REGION)
    with pytest.raises(AirflowFailException, match="by run other-deployment-run"):
        op.execute(context("run-2", {}))  # 404 for the holder
    assert Ledger().onboarding_actions(REGION, "run-2") == []
    assert Ledger().region_lock(REGION)["run_id"] == "other-deployment-run"


def test_a_waiting_step_renews_its_lease_each_turn_and_waits_on(airflow_db, fleet_state):
    """A step waiting on what it created re-enters at least every LEASE_RENEW (its trigger
    fires a timeout turn before the step's own timeout): it renews the lock and defers again."""
    import time

    from gpufleet.airflow.operators.onboarding import WAIT_UNTIL_KEY
    from gpufleet.domain.leases import LEASE_RENEW

    svc = onboarding(None, "run-1")
    svc.lock(DAG, UNKNOWN, T0)
    svc.network(), svc.cluster()  # the cluster exists (its node pools do not yet)
    op = OnboardingStepOperator(task_id="cluster", step="cluster", region=REGION)
    cluster = load_catalog().region(REGION).clusters[0].name
    waiting = [[cluster, "nodes", "pool-with-no-nodes-yet"]]  # CREATING: no node registered
    carry = {"waiting": waiting, "actions": [], "notes": [], WAIT_UNTIL_KEY: time.time() + 3600}
    event = {"status": "timeout", "message": "not ready after 300 s", "carry": carry}
    with pytest.raises(TaskDeferred) as deferred:
        op.execute_complete(context("run-1", {}), event=event)
    assert Ledger().region_lock(REGION)["heartbeat_at"] > T0  # renewed
    trigger = deferred.value.trigger
    assert trigger.timeout <= LEASE_RENEW.total_seconds()
    assert trigger.carry[WAIT_UNTIL_KEY] == carry[WAIT_UNTIL_KEY]  # the step's own deadline
    past = {**carry, WAIT_UNTIL_KEY: time.time() - 1}  # the step's timeout came: it fails
    with pytest.raises(AirflowException, match="onboarding step 'cluster'"):
        op.execute_complete(context("run-1", {}), event={**event, "carry": past})


def test_a_region_takeover_compares_the_holder_too(ledger_url):  # noqa: F811
    """Two takeovers stamped with the same instant: the holder read decides (one winner)."""
    ledger = Ledger(ledger_url)
    onboarding(ledger_url, "run-1").lock(DAG, UNKNOWN, T0)
    seen = ledger.region_lock(REGION)
    assert take_over_region_lock(ledger, REGION, seen, DAG, "run-2", T0)  # same heartbeat
    assert not take_over_region_lock(ledger, REGION, seen, DAG, "run-3", T0)
    assert ledger.region_lock(REGION)["run_id"] == "run-2"
