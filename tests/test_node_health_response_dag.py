"""node_health_response end to end with dag.test() on the simulated fleet: the batches are the
ones the cluster's watcher (NodeWatchTrigger) yields, handed to the run as its ``batches`` conf
(what a person replaying a watcher does; the scheduler hands the same payloads as asset
events). An Xid a GPU reported quarantines its node at once; a node the autoscaler added is
held validation-pending until its pool's re-admission session passes."""

from __future__ import annotations

import asyncio
import importlib
from pathlib import Path

import pytest

from gpufleet.airflow.event_triggers import NodeWatchTrigger
from gpufleet.backends import cluster_backend
from gpufleet.backends.sim import watch_log
from gpufleet.backends.sim.gpu_health import xid_line
from gpufleet.backends.sim.state import SimState
from gpufleet.config.catalog import load_catalog
from gpufleet.domain.admission import PENDING_KEY
from gpufleet.domain.workloads import QUARANTINE_KEY
from gpufleet.services.nodes.watch_batch import Batch
from gpufleet.store import Ledger
from tests.support.fleet import run_dag, task_states, xcom_value

pytestmark = [pytest.mark.slow]

DAG = "node_health_response"
CLUSTER, POOL = "a3u-sim", "h200-a"


@pytest.fixture
def fleet(airflow_db, fleet_state):
    return fleet_state


def sim():
    return cluster_backend(load_catalog().cluster(CLUSTER))


def watched() -> dict:
    """The next batch the cluster's watcher yields (a new trigger: it starts from the ledger's
    acknowledged cursor, as after a triggerer restart)."""

    async def first() -> dict:
        events = NodeWatchTrigger(cluster=CLUSTER).run()
        try:
            return (await anext(events)).payload
        finally:
            await events.aclose()

    return asyncio.run(asyncio.wait_for(first(), 60))


def taints(node: str) -> dict[str, str]:
    info = next(n for n in sim().list_nodes() if n.name == node)
    return {t.key: t.effect for t in info.taints}


def xid_event(node: str, code: int) -> None:
    """A GPU health agent reports the driver's Xid line as a Kubernetes Event about ``node``."""
    state = SimState()
    with state.tx() as conn:
        watch_log.record_event(
            conn,
            CLUSTER,
            node,
            reason="GpuXidError",
            message=xid_line(code, 2, pid=4242),
            source="gpu-health-monitor",
            at=state.clock.time(),
        )


def baseline() -> None:
    """The cluster's first list, handled: the fleet already in service is not new."""
    first = watched()
    assert Batch.from_dict(first).relist
    dr = run_dag(DAG, {"batches": [first]})
    assert str(dr.state) == "success", task_states(dr)
    assert xcom_value(dr, "respond") == []  # nobody admitted, nobody quarantined
    assert Ledger().watch_cursor(CLUSTER, "nodes") == first["nodes_version"]


def test_an_xid_event_quarantines_its_node_and_a_new_node_is_held_pending(fleet):
    baseline()
    bad = f"{CLUSTER}-{POOL}-1"
    xid_event(bad, 79)  # the GPU fell off the bus
    added = sim().inner.add_node(POOL)["new"]  # the autoscaler adds a node
    batch = watched()
    assert bad in {e["node"] for e in batch["events"].values()} and added in batch["nodes"]

    # the response alone (the session's task marked done): what the cluster looks like at once
    dr = run_dag(DAG, {"batches": [batch]}, mark_success="admission_session")
    assert str(dr.state) == "success", task_states(dr)
    assert taints(bad).get(QUARANTINE_KEY) == "NoSchedule"
    assert Ledger().node_state(CLUSTER, bad)["state"] == "quarantined"
    assert taints(added).get(PENDING_KEY) == "NoSchedule"
    (session,) = xcom_value(dr, "respond")
    assert (session["cluster"], session["node_pool"]) == (CLUSTER, POOL)
    assert added in Ledger().session_row(session["session"])["nodes"]
    # a healthy node in service is left alone
    assert QUARANTINE_KEY not in taints(f"{CLUSTER}-{POOL}-0")
    assert PENDING_KEY not in taints(f"{CLUSTER}-{POOL}-0")

    # the same batch again (a redelivery): nothing is recorded or done twice
    again = run_dag(DAG, {"batches": [batch]}, mark_success="admission_session")
    assert str(again.state) == "success" and xcom_value(again, "respond") == []
    (report,) = xcom_value(again, "respond", key="reports")
    assert report["signals"] == [] and report["quarantined"] == {}


def test_a_new_node_is_released_only_when_its_session_passes(fleet):
    baseline()
    added = sim().inner.add_node(POOL)["new"]
    dr = run_dag(DAG, {"batches": [watched()]})
    states = task_states(dr)
    assert str(dr.state) == "success", states
    assert states["admission_session[0]"] == "success"
    (session,) = xcom_value(dr, "respond")
    row = Ledger().session_row(session["session"])
    assert row["state"] == "done" and row["run_id"] == dr.run_id
    assert added in row["outcome"]["released"]
    assert PENDING_KEY not in taints(added)  # released by the session, not before
    fabric = [
        r
        for r in Ledger().validations_for_run(dr.run_id)
        if (r["pool"], r["kind"]) == (POOL, "fabric")
    ]
    assert fabric and fabric[-1]["passed"]


def test_a_session_waits_for_its_window_to_close_and_is_claimed_by_one_run(fleet):
    """Nodes join a session until its window closes: its task defers until then (on the
    cluster's clock) and claims nothing before; a session another run claimed is skipped."""
    from airflow.sdk.exceptions import AirflowSkipException, TaskDeferred

    from gpufleet.airflow.operators.events import AdmissionSessionOperator
    from gpufleet.airflow.triggers import WaitTrigger

    baseline()
    sim().inner.add_node(POOL)
    dr = run_dag(DAG, {"batches": [watched()]}, mark_success="admission_session")
    (session,) = xcom_value(dr, "respond")
    row = Ledger().session_row(session["session"])
    SimState().clock.advance(row["window_s"] - 60)  # a minute before it closes
    op = AdmissionSessionOperator(task_id="admission_session", **session)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute({"run_id": "session-run"})
    assert isinstance(deferred.value.trigger, WaitTrigger)
    assert deferred.value.trigger.seconds == pytest.approx(60)
    assert deferred.value.method_name == "execute_claim"
    assert Ledger().session_row(session["session"])["state"] == "open"  # not claimed yet

    # another run claimed it meanwhile (two runs waited on the same session): this one skips
    assert Ledger().claim_session(session["session"], "other-run")
    with pytest.raises(AirflowSkipException, match="other-run"):
        op.execute_claim({"run_id": "session-run"})
    assert Ledger().session_row(session["session"])["run_id"] == "other-run"


def test_a_batch_for_a_cluster_the_catalog_does_not_have_is_refused(fleet):
    dr = run_dag(DAG, {"batches": [{"cluster": "nope", "nodes": {}, "events": {}}]})
    assert task_states(dr)["respond"] == "failed"
    assert Ledger().watch_cursor("nope", "nodes") is None


def test_any_clusters_watched_asset_schedules_the_dag(airflow_db):
    from gpufleet.config.catalog_index import catalog_index
    from tests.support.fleet import get_dag

    dag = get_dag(DAG)
    condition = dag.timetable.asset_condition
    assert type(condition).__name__ == "AssetAny"
    assert sorted(a.uri for a in condition.objects) == sorted(
        f"x-gpufleet://node-signals/{c}" for c in catalog_index()["clusters"]
    )
    assert dag.max_active_runs >= 16  # a quarantine never waits behind a validating session
    # the triggerer imports each watcher's trigger from sys.path (plugins/), never the bundle
    for asset in condition.objects:
        (watcher,) = asset.watchers
        module, _, name = watcher.trigger.serialize()[0].rpartition(".")
        imported = importlib.import_module(module)
        assert Path(imported.__file__).is_relative_to(Path(__file__).parents[1] / "plugins")
        assert getattr(imported, name) is type(watcher.trigger)
