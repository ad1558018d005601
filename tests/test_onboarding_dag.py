"""region_onboarding end to end with dag.test() on the simulated fleet.

``sim-europe-west4`` is the catalog's region still to be onboarded (its cluster is
``preexisting: false``): nothing exists until the DAG creates it.
"""

from __future__ import annotations

import pytest

from gpufleet.airflow.assets import REGION_READY
from gpufleet.backends import cloud_backend, cluster_backend
from gpufleet.backends.base import ResourceStatus
from gpufleet.backends.sim.state import SimState
from gpufleet.config.catalog import load_catalog
from tests.support.fleet import asset_events, get_dag, run_dag, task_states

pytestmark = [pytest.mark.slow]

DAG = "region_onboarding"
REGION = "sim-europe-west4"
CLUSTER = "a3u-euw4-sim"
POOL = "h200-eu"


@pytest.fixture
def fleet(airflow_db, fleet_state):
    return fleet_state


@pytest.fixture(scope="module")
def onboarded(airflow_db, tmp_path_factory):
    """One onboarding of the region on a fresh fleet (its own state folder, the sim's clock
    frozen, triggers on the sim's clock, as ``fleet`` gives a test), shared by the tests that
    read what that first run did; the happy path's rerun only adds runs of its own."""
    from gpufleet.airflow.triggers import PollingTrigger
    from tests.support.fleet import SimTriggerClock, frozen_sim_clock

    mp = pytest.MonkeyPatch()
    try:
        mp.setenv("GPUFLEET_STATE_DIR", str(tmp_path_factory.mktemp("onboarded") / "gpufleet"))
        mp.setattr(PollingTrigger, "clock", SimTriggerClock())
        frozen_sim_clock()
        yield onboard()
    finally:
        mp.undo()


def onboard(**conf):
    dr = run_dag(DAG, {"region": REGION, **conf})
    return dr, task_states(dr)


def sim(*args: str) -> None:
    """``gpufleet sim ...`` on the region's pool: onboarding's form takes no faults (only the
    sim drill's does), so a rehearsal puts them in with the CLI and clears them after."""
    from gpufleet.cli import main

    assert main(["sim", *args, "--pool", f"{CLUSTER}/{POOL}"]) == 0


def ledger():
    from gpufleet.store import Ledger

    return Ledger()


def actions(run_id: str) -> list[dict]:
    return ledger().onboarding_actions(REGION, run_id)


def cluster():
    return load_catalog().cluster(CLUSTER)


def cloud_rows() -> list[tuple[str, str]]:
    with SimState().read() as conn:
        return [
            (r["kind"], r["name"])
            for r in conn.execute("SELECT kind, name FROM cloud WHERE cluster=?", (CLUSTER,))
        ]


def link_xcoms(dagrun) -> dict[str, str]:
    """Each task's "Cloud console" link as Airflow stored it for the UI (after its last
    process), by task id."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.query(XComModel).filter(
            XComModel.dag_id == DAG,
            XComModel.run_id == dagrun.run_id,
            XComModel.key == "_link_ConsoleLink",
        )
        return {r.task_id: XComModel.deserialize_value(r) for r in rows}


def test_a_deferred_steps_console_link_survives_and_the_run_releases_the_lock(onboarded):
    """(The region lock's other tests: tests/services/infrastructure/test_onboarding_locks.py.)
    Reads the shared first onboarding only, so it runs before the happy path's rerun."""
    dr, states = onboarded
    assert str(dr.state) == "success", states
    links = link_xcoms(dr)
    urls = {a["step"]: a["console_url"] for a in reversed(actions(dr.run_id)) if a["console_url"]}
    # cluster, filesystems and node_pools defer on what they created (the sim creates in
    # steps) and finish in a second task process, where Airflow recomputes the links
    assert {"cluster", "filesystems", "node_pools"} <= urls.keys()
    assert {step: links[step] for step in urls} == urls
    assert ledger().region_lock(REGION) is None  # the report released it


def test_onboarding_creates_validates_and_marks_ready_then_changes_nothing(onboarded):
    dr, states = onboarded
    assert str(dr.state) == "success", states
    done = actions(dr.run_id)
    created = {(a["step"], a["kind"]) for a in done if a["action"] == "created"}
    assert {("network", "network"), ("cluster", "cluster"), ("node_pools", "node_pool")} <= created
    assert ("filesystems", "filesystem") in created
    assert any(a["step"] == "addons" and a["action"] == "created" for a in done)
    nodes = cluster_backend(cluster()).list_nodes(POOL)
    assert len(nodes) == 4 and all(n.ready and n.free and not n.unvalidated for n in nodes)
    assert ledger().region_state(REGION)["state"] == "ready"
    assert asset_events(REGION_READY.uri, dr.run_id) == [{"region": REGION, "run_id": dr.run_id}]
    # the nightly validation is scheduled on that event
    nightly = get_dag("nightly_fleet_validation")  # the planner
    assert nightly.timetable.asset_condition.uri == REGION_READY.uri
    before = sorted(cloud_rows())

    again, states = onboard()
    assert str(again.state) == "success", states
    assert states["announce_ready"] == "skipped"  # already ready: no second region-ready event
    rerun = actions(again.run_id)
    assert rerun and not [a for a in rerun if a["action"] in ("created", "updated")]
    assert sorted(cloud_rows()) == before
    assert len(cluster_backend(cluster()).list_nodes(POOL)) == 4
    assert asset_events(REGION_READY.uri, again.run_id) == []


def test_dry_run_prints_the_plan_and_creates_nothing(fleet):
    dr, states = onboard(dry_run=True)
    assert str(dr.state) == "success", states
    plan = actions(dr.run_id)
    assert plan and {a["action"] for a in plan} == {"would_create"}
    assert {a["kind"] for a in plan} >= {"network", "subnet", "cluster", "node_pool", "filesystem"}
    assert cloud_rows() == []
    assert cloud_backend(cluster()).get_cluster().status == ResourceStatus.ABSENT
    assert ledger().region_state(REGION) is None
    assert states["validate_fabric"] == "skipped" and states["announce_ready"] == "skipped"


def test_capacity_short_is_refused_at_preflight_with_the_figures(fleet):
    sim("inject", "--fault", "capacity-short:2")
    dr, states = onboard()
    assert str(dr.state) == "failed"
    assert states["preflight"] == "failed" and states["network"] == "upstream_failed"
    refused = [a for a in actions(dr.run_id) if a["action"] == "refused"]
    assert len(refused) == 1
    assert refused[0]["detail"]["reason"] == (
        f"capacity short: {CLUSTER}/{POOL} (4) need 4 machines; the reservation has 2 free "
        "(2 reserved, 0 in use)"
    )
    assert cloud_rows() == []  # nothing was created
    assert ledger().region_state(REGION)["state"] == "failed"


def test_api_errors_midway_fail_the_step_and_a_rerun_completes_without_duplicates(fleet):
    # the first 4 calls (3 preflight reads, the network) go through, then every call fails
    sim("inject", "--fault", "api-errors:1:after=4")
    dr, states = onboard()
    assert str(dr.state) == "failed"
    assert states["preflight"] == "success" and states["network"] == "success"
    assert states["cluster"] == "failed"
    assert ledger().region_state(REGION)["state"] == "failed"
    assert "cluster" in ledger().region_state(REGION)["reason"]
    network_rows = sorted(cloud_rows())
    assert ("network", "a3u-euw4-rdma") in network_rows and ("cluster", CLUSTER) not in network_rows

    sim("clear")
    again, states = onboard()
    assert str(again.state) == "success", states
    rerun = {(a["kind"], a["name"]): a["action"] for a in actions(again.run_id)}
    assert rerun[("network", "a3u-euw4-rdma")] == "found"  # not recreated
    assert rerun[("cluster", CLUSTER)] == "created"
    kinds = [k for k, _ in cloud_rows()]
    assert kinds.count("network") == 1 and kinds.count("cluster") == 1
    assert len(cluster_backend(cluster()).list_nodes(POOL)) == 4


def test_validate_false_leaves_the_taints_and_the_region_not_ready(fleet):
    dr, states = onboard(validate=False)
    assert str(dr.state) == "success", states
    assert states["validate_fabric"] == "skipped" and states["announce_ready"] == "skipped"
    nodes = cluster_backend(cluster()).list_nodes(POOL)
    assert len(nodes) == 4 and all(n.unvalidated and not n.free for n in nodes)
    assert ledger().region_state(REGION)["state"] == "onboarding"


def test_a_node_that_never_becomes_ready_stays_tainted_and_is_named(fleet):
    stuck = f"{CLUSTER}-{POOL}-2"
    sim("inject", "--fault", f"not-ready:{stuck}")
    dr, states = onboard(nodes_ready_timeout_minutes=0.05)
    assert str(dr.state) == "failed"
    assert states["nodes_ready"] == "success" and states["validate_fabric[0]"] == "success"
    assert states["release"] == "failed"
    region = ledger().region_state(REGION)
    assert region["state"] == "failed" and f"{stuck} (not Ready)" in region["reason"]
    nodes = {n.name: n for n in cluster_backend(cluster()).list_nodes(POOL)}
    assert nodes[stuck].unvalidated and not nodes[stuck].free  # it takes no job
    assert [n for n, info in nodes.items() if not info.unvalidated] == sorted(
        n for n in nodes if n != stuck
    )


def test_the_faults_of_a_killed_drill_are_swept_before_the_preflight(fleet):
    """A ``sim_fault_drill`` run killed with ``kill -9`` never ran its teardown: its fault on
    the region's pool must not refuse the onboarding (the sweep is onboarding's first task)."""
    from gpufleet.domain.faults import RunLease

    drill = RunLease("sim_fault_drill", "manual__2026-01-01T00:00:00+00:00")
    SimState().inject(CLUSTER, POOL, "capacity-short:2", lease=drill)
    dr, states = onboard(dry_run=True)
    assert states["sweep_faults"] == "success" and states["preflight"] == "success", states
    assert SimState().faults() == []
