"""The nightly fanned out per cluster (issue 18): the plan, the one-run size rule, the planner's
plan task and the report over its cluster runs. The planner starting and waiting for the runs
on a real scheduler is ``tests/live/test_trigger_live.py``'s (a scheduler runs triggered runs;
``dag.test()`` does not)."""

from __future__ import annotations

import contextlib
from datetime import UTC

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpufleet.errors import GpufleetError
from gpufleet.services.validation.fanout import (
    MAX_RUN_ID,
    check_pools_per_run,
    check_run_size,
    child_run_id,
    plan_cluster_runs,
)

PLANNER = "nightly_fleet_validation"
CHILD = "nightly_fabric_validation"


@contextlib.contextmanager
def child_dag_paused(paused: bool):
    """The cluster DAG paused or not (a DAG is paused at creation here) for the block."""
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session

    def pause(value: bool | None) -> bool | None:
        with create_session() as session:
            model = session.query(DagModel).filter_by(dag_id=CHILD).one()
            before, model.is_paused = model.is_paused, value
            return before

    before = pause(paused)
    try:
        yield
    finally:
        pause(before)


def test_one_run_per_cluster_and_a_large_cluster_in_near_equal_parts():
    pools = [f"big/p{i}" for i in range(450)] + ["small/a", "small/b", "big/p0"]
    runs = plan_cluster_runs(pools, "scheduled__2026-12-03T02:00:00+00:00", 200)
    assert [(r.cluster, len(r.pools)) for r in runs] == [
        ("big", 150),
        ("big", 150),
        ("big", 150),
        ("small", 2),
    ]
    assert [r.run_id.rsplit("--", 1)[1] for r in runs] == [
        "big-1of3",
        "big-2of3",
        "big-3of3",
        "small",
    ]
    planned = [k for r in runs for k in r.pools]
    assert sorted(planned) == sorted(set(pools))  # every pool once, p0 named twice
    assert all(len(r.pools) <= 200 for r in runs)
    # the same plan twice: the same run ids (a retried task finds its runs)
    assert runs == plan_cluster_runs(pools, "scheduled__2026-12-03T02:00:00+00:00", 200)


def test_2000_pools_stay_far_below_airflows_map_limit():
    pools = [f"c{c}/p{i}" for c in range(20) for i in range(100)]
    runs = plan_cluster_runs(pools, "scheduled__x", 200)
    assert len(runs) == 20 and max(len(r.pools) for r in runs) == 100  # each map 100 wide


def test_a_cluster_runs_conf_is_the_nightlys_settings_and_its_pools_never_faults():
    """Faults are the sim drill's alone: a planned run's conf carries the nightly's settings
    and its pools, and nothing else handed to the planner (a ``sim_faults`` among them)."""
    runs = plan_cluster_runs(["a/x", "a/y", "b/z"], "manual__1", 1)
    assert [r.pools for r in runs] == [("a/x",), ("a/y",), ("b/z",)]
    settings = {"mode": "fabric", "max_repairs": 3, "other": 1, "sim_faults": ["a/y=drift:5"]}
    kwargs = runs[1].trigger_kwargs(settings)
    assert kwargs == {
        "trigger_run_id": "manual__1--a-2of2",
        "conf": {"mode": "fabric", "max_repairs": 3, "pools": ["a/y"]},
    }


@st.composite
def fleets(draw):
    """Pool keys (``cluster/pool``) of up to 4 clusters of 1 to 1,200 pools each, in any order,
    some named twice (a planner is handed each pool once, but must not count a repeat twice)."""
    sizes = draw(st.lists(st.integers(1, 1200), min_size=1, max_size=4))
    keys = [f"c{c}/p{i}" for c, n in enumerate(sizes) for i in range(n)]
    repeats = draw(st.lists(st.sampled_from(keys), max_size=5))
    return draw(st.permutations(keys + repeats))


@settings(max_examples=200, deadline=None)
@given(
    pools=fleets(),
    pools_per_run=st.one_of(st.integers(1, 10), st.integers(1, 1024)),
)
@example(pools=[f"big/p{i}" for i in range(401)], pools_per_run=200)  # floor: 2 left out
@example(pools=[f"small/p{i}" for i in range(199)], pools_per_run=200)  # floor: no run at all
@example(pools=[f"big/p{i}" for i in range(401)], pools_per_run=400)  # floor: one run of 401
@example(pools=["a/p0", "a/p1", "a/p2"], pools_per_run=2)  # shrunk: floor size, a/p2 left out
@example(pools=["a/p0"], pools_per_run=2)  # shrunk: floor parts, no run (division by zero)
def test_every_pool_is_planned_exactly_once_in_runs_no_larger_than_pools_per_run(
    pools, pools_per_run
):
    """For any fleet and any ``pools_per_run``: each pool in exactly one run (none left out,
    none validated twice), no run over ``pools_per_run``, none empty, each run one cluster's,
    each run id its own (issue 32: a floor division in the split left 2 of 401 pools out)."""
    runs = plan_cluster_runs(pools, "scheduled__2026-12-03T02:00:00+00:00", pools_per_run)
    planned = [key for run in runs for key in run.pools]
    assert sorted(planned) == sorted(set(pools))
    assert all(0 < len(run.pools) <= pools_per_run for run in runs)
    assert all(key.split("/", 1)[0] == run.cluster for run in runs for key in run.pools)
    assert len({run.run_id for run in runs}) == len(runs)


def test_a_run_id_too_long_for_airflow_is_shortened_the_same_way_each_time():
    parent = "manual__" + "x" * 240
    first = child_run_id(parent, "a3u-sim", 2, 3)
    assert len(first) <= MAX_RUN_ID and first.endswith("--a3u-sim-2of3")
    assert first == child_run_id(parent, "a3u-sim", 2, 3)
    assert first != child_run_id(parent + "y", "a3u-sim", 2, 3)
    assert child_run_id("manual__1", "a3u-sim", 1, 1) == "manual__1--a3u-sim"


@pytest.mark.parametrize("value", ["0", "1.5", "many", "nan", "1025", "-3", None])
def test_pools_per_run_must_be_a_whole_number_below_the_map_limit(value):
    with pytest.raises(GpufleetError, match=r"pools_per_run must be a whole number from 1 to 1024"):
        check_pools_per_run(value, 1024)


def test_pools_per_run_accepts_a_whole_number_in_range():
    assert check_pools_per_run("200", 1024) == 200
    assert check_pools_per_run("1024", 1024) == 1024


def test_a_run_over_too_many_pools_is_refused_naming_the_planner():
    check_run_size(200, 200)
    with pytest.raises(GpufleetError) as err:
        check_run_size(201, 200)
    assert "201 pools" in str(err.value) and "(200)" in str(err.value)
    assert PLANNER in str(err.value)


# --- the DAGs, in this process ----------------------------------------------------------------


@pytest.fixture
def fleet(airflow_db, fleet_state):
    return fleet_state


@pytest.mark.slow
def test_one_run_past_pools_per_run_fails_before_anything_runs(fleet, monkeypatch):
    from gpufleet.store import Ledger
    from tests.support.fleet import run_dag, task_states

    monkeypatch.setenv("AIRFLOW__GPUFLEET__POOLS_PER_RUN", "2")
    dr = run_dag(CHILD, {"mode": "fabric"})  # three pools
    states = task_states(dr)
    assert str(dr.state) == "failed" and states["fabric_targets"] == "failed", states
    assert Ledger().validations_for_run(dr.run_id) == []


@pytest.mark.slow
def test_the_planner_plans_one_run_per_cluster_with_its_settings(fleet, monkeypatch):
    """The plan task alone (starting the runs needs a scheduler): the runs and their confs,
    which carry no faults even when the planner's conf names some (only the sim drill takes
    them)."""
    from tests.support.fleet import run_dag, task_states, xcom_value

    conf = {"mode": "fabric", "max_repairs": 4, "sim_faults": ["a3u-sim/h200-b=fabric-down"]}
    dr = run_dag(PLANNER, conf, mark_success="validate_clusters|report")
    assert task_states(dr)["plan_clusters"] == "success"
    plan = xcom_value(dr, "plan_clusters")
    assert [(p["trigger_run_id"], p["conf"]["pools"]) for p in plan] == [
        (f"{dr.run_id}--a3u-sim", ["a3u-sim/h200-a", "a3u-sim/h200-b"]),
        (f"{dr.run_id}--p5-sim", ["p5-sim/h100-a"]),
    ]
    first = plan[0]["conf"]
    assert first["mode"] == "fabric" and first["max_repairs"] == 4
    assert not any("sim_faults" in p["conf"] for p in plan)
    assert first["max_quarantine_share"] == 0.2 and first["repair_drain"] == "wait"


@pytest.mark.slow
def test_the_planners_report_covers_every_cluster_run_and_fails_with_any(fleet):
    """Two cluster runs (run here one after the other, as the planner's runs would be); the
    report over both names the failing pool, and passes over the healthy run alone."""
    from gpufleet.backends.sim.state import SimState
    from gpufleet.config.catalog import load_catalog
    from gpufleet.services.views.nightly_report import nightly_report
    from gpufleet.store import Ledger
    from tests.support.fleet import run_dag

    healthy = run_dag(CHILD, {"pools": ["p5-sim/h100-a"], "mode": "fabric"})
    SimState().inject("a3u-sim", "h200-b", "fabric-down")  # as `gpufleet sim inject` does
    broken = run_dag(CHILD, {"pools": ["a3u-sim/h200-b"], "mode": "fabric"})
    assert (str(healthy.state), str(broken.state)) == ("success", "failed")
    ledger, catalog = Ledger(), load_catalog()
    both = nightly_report(ledger, catalog, "planner-1", runs=[healthy.run_id, broken.run_id])
    assert both.checks == 4  # each pool's GPU health check and its fabric
    assert len(both.failed) == 1 and both.failed[0].startswith("a3u-sim/h200-b fabric")
    assert "p5-sim/h100-a" in both.markdown and "a3u-sim/h200-b" in both.markdown
    alone = nightly_report(ledger, catalog, "planner-2", runs=[healthy.run_id])
    assert alone.checks == 2 and alone.failed == []


def test_the_triggerers_polls_per_second_stay_bounded_as_the_fleet_grows():
    from gpufleet.airflow.operators.common import (
        POLLS_PER_S,
        REAL_POLL_S,
        SIM_POLL_S,
        poll_interval,
    )
    from gpufleet.config.catalog import load_catalog
    from tests.support.fleet import ROOT

    real = load_catalog(ROOT / "include" / "fleet-examples").cluster("train-usc1")
    assert poll_interval(real, 10) == REAL_POLL_S  # a small fleet: the gentle default
    for pools in (600, 2000, 20000):
        interval = poll_interval(real, pools)
        assert interval >= REAL_POLL_S and pools / interval <= POLLS_PER_S
    assert poll_interval(real, 2000) == 100
    sim = real.model_copy(update={"provider": "sim"})
    assert poll_interval(sim, 3) == SIM_POLL_S and poll_interval(sim, 2000) == 100


def existing_cluster_runs(when, states: dict) -> tuple[str, dict[str, str]]:
    """The cluster runs a planner run at ``when`` plans, already there in ``states`` (cluster ->
    DagRunState), as a retry of its wait finds them; its run id and theirs by cluster."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from airflow.utils.types import DagRunType

    planner_id = DagRun.generate_run_id(
        run_type=DagRunType.MANUAL, logical_date=when, run_after=when
    )
    ids = {cluster: f"{planner_id}--{cluster}" for cluster in states}
    with create_session() as session:
        for cluster, state in states.items():
            session.add(
                DagRun(
                    dag_id=CHILD,
                    run_id=ids[cluster],
                    run_type=DagRunType.MANUAL,
                    state=state,
                    run_after=when,
                    conf={},
                )
            )
    return planner_id, ids


@contextlib.contextmanager
def run_succeeds_once_waited_on(planner_id: str, map_index: int, run_id: str):
    """A thread marks the cluster run ``run_id`` succeeded once the planner's wait
    (``validate_clusters[map_index]``) has deferred on it; yields the times it did (none: the
    wait never deferred)."""
    import threading
    from datetime import datetime

    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState

    ended_at: list[datetime] = []
    stop = threading.Event()

    def end_once_deferred() -> None:
        while not stop.wait(0.05):
            with create_session() as session:
                ti = (
                    session.query(TaskInstance)
                    .filter_by(dag_id=PLANNER, run_id=planner_id, task_id="validate_clusters")
                    .filter_by(map_index=map_index)
                    .one_or_none()
                )
                if ti is None or ti.next_method is None:  # not deferred (yet)
                    continue
                run = session.query(DagRun).filter_by(dag_id=CHILD, run_id=run_id).one()
                ended_at.append(datetime.now(UTC))
                run.state = DagRunState.SUCCESS
                return

    ender = threading.Thread(target=end_once_deferred, daemon=True)
    ender.start()
    try:
        yield ended_at
    finally:
        stop.set()
        ender.join(timeout=10)


@pytest.mark.slow
def test_a_cluster_run_that_exists_is_waited_for_never_started_again(fleet, monkeypatch):
    """``validate_clusters`` finding its cluster run already there (what a retry finds after its
    worker was lost, or a task cleared by hand): an ended run ends the wait at once with its
    state (failed: the wait fails, on every try); a queued one is waited for until it ends. No
    second run is started for either cluster."""
    from datetime import datetime

    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState

    from tests.support.fleet import run_dag, task_states

    monkeypatch.setenv("AIRFLOW__GPUFLEET__RUN_POLL_SECONDS", "1")
    run_dag(PLANNER, {"mode": "fabric"}, mark_success=".*")  # both DAGs in the metadata DB
    when = datetime(2026, 12, 3, 2, 0, tzinfo=UTC)
    planner_id, ids = existing_cluster_runs(
        when, {"a3u-sim": DagRunState.FAILED, "p5-sim": DagRunState.QUEUED}
    )
    with (
        child_dag_paused(False),
        run_succeeds_once_waited_on(planner_id, 1, ids["p5-sim"]) as ended_at,
    ):
        dr = run_dag(PLANNER, {"mode": "fabric"}, mark_success="report", logical_date=when)
    assert dr.run_id == planner_id
    states = task_states(dr)
    assert states["validate_clusters[0]"] == "failed", states  # the failed run's state
    assert states["validate_clusters[1]"] == "success", states
    with create_session() as session:
        runs = session.query(DagRun.run_id).filter(DagRun.dag_id == CHILD)
        started = sorted(r for (r,) in runs if r.startswith(planner_id))
        assert started == sorted(ids.values())  # none started again
        waited = (
            session.query(TaskInstance)
            .filter_by(dag_id=PLANNER, run_id=planner_id, task_id="validate_clusters")
            .filter_by(map_index=1)
            .one()
        )
        tries = (
            session.query(TaskInstance)
            .filter_by(dag_id=PLANNER, run_id=planner_id, task_id="validate_clusters")
            .filter_by(map_index=0)
            .one()
            .try_number
        )
    assert ended_at and waited.end_date > ended_at[0]  # it waited for the run to end
    assert tries == 3  # each retry found the failed run, and started none


@pytest.mark.slow
def test_a_queued_cluster_run_of_a_paused_dag_fails_the_wait_at_once(fleet, monkeypatch):
    """A retry finding its run queued while the cluster DAG is paused fails, as a first try
    does before it triggers (``fail_when_dag_is_paused``): the run would never start."""
    from datetime import datetime

    from airflow.utils.state import DagRunState

    from tests.support.fleet import run_dag, task_states

    monkeypatch.setenv("AIRFLOW__GPUFLEET__RUN_POLL_SECONDS", "1")
    conf = {"mode": "fabric", "clusters": ["p5-sim"]}
    run_dag(PLANNER, conf, mark_success=".*")
    when = datetime(2026, 12, 3, 3, 0, tzinfo=UTC)
    planner_id, ids = existing_cluster_runs(when, {"p5-sim": DagRunState.QUEUED})
    # had the wait deferred on the paused DAG's run, it would end it, so the run cannot hang
    with (
        child_dag_paused(True),
        run_succeeds_once_waited_on(planner_id, 0, ids["p5-sim"]) as ended_at,
    ):
        dr = run_dag(PLANNER, conf, mark_success="report", logical_date=when)
    assert task_states(dr)["validate_clusters[0]"] == "failed"
    assert ended_at == []  # it failed without waiting


def test_what_a_cluster_run_was_planned_to_check_follows_its_mode_and_filesystems():
    from gpufleet.config.catalog import load_catalog
    from gpufleet.services.validation.unvalidated import planned_checks

    catalog = load_catalog()
    keys = ["a3u-sim/h200-a", "a3u-sim/gone"]  # a pool since removed from the catalog
    assert planned_checks(catalog, keys, "both") == [
        ("a3u-sim", "h200-a", "fabric"),
        ("a3u-sim", "h200-a", "storage"),
        ("a3u-sim", "gone", "fabric"),
    ]
    assert planned_checks(catalog, keys, "fabric") == [
        ("a3u-sim", "h200-a", "fabric"),
        ("a3u-sim", "gone", "fabric"),
    ]
    assert planned_checks(catalog, keys, "storage") == [("a3u-sim", "h200-a", "storage")]


def test_the_planners_report_fails_when_its_cluster_runs_validated_nothing(fleet):
    """Every pool of both cluster runs skipped (other runs hold their locks): the planner's
    report fails saying the fleet validated nothing, naming each pool and its holder."""
    from datetime import UTC as utc
    from datetime import datetime
    from types import SimpleNamespace

    from airflow.sdk.exceptions import AirflowFailException

    from gpufleet.airflow.operators.nightly import ValidationReportOperator
    from gpufleet.store import Ledger

    ledger = Ledger()
    pools = {"a3u-sim": ["h200-a"], "p5-sim": ["h100-a"]}
    for cluster, names in pools.items():
        for pool in names:
            lock = ledger.validation_lock(cluster, pool, "fabric")
            lock.hold("nightly_elsewhere", "night-x", datetime.now(utc))
    runs = [
        {
            "trigger_run_id": f"planner-9--{cluster}",
            "conf": {"pools": [f"{cluster}/{p}" for p in names], "mode": "fabric"},
        }
        for cluster, names in pools.items()
    ]

    def unknown(dag_id, run_id):  # neither holder is known to this Airflow: alive by lease
        import httpx
        from airflow.sdk.api.client import ServerResponseError

        request = httpx.Request("GET", "http://api/execution/dag-runs/x/y/state")
        response = httpx.Response(404, json={"detail": "not found"}, request=request)
        raise ServerResponseError.from_response(response)

    ti = SimpleNamespace(get_task_states=lambda dag_id, run_ids: {}, get_dagrun_state=unknown)
    ctx = {"run_id": "planner-9", "ti": ti, "dag": SimpleNamespace(dag_id=PLANNER)}
    with pytest.raises(AirflowFailException) as err:
        ValidationReportOperator(task_id="report", runs=runs).execute(ctx)
    message = str(err.value)
    assert message.startswith("this run validated nothing: none of its 2 planned checks")
    assert "a3u-sim/h200-a fabric: skipped" in message and "p5-sim/h100-a fabric" in message
    assert message.count("run night-x of nightly_elsewhere") == 2
