"""sim_fault_drill end to end with dag.test() on the simulated fleet: the one DAG whose form
takes ``sim_faults``. Its setup injects them for its run alone (the Param path, the fault
parser and the injector), the nightly's own validation finds them, its teardown clears them
whatever happened; a production DAG given the same conf injects nothing."""

from __future__ import annotations

import pytest

from gpufleet.backends.sim.state import SimState
from gpufleet.domain.faults import run_scope
from gpufleet.store import Ledger
from tests.support.fleet import run_dag, task_states

pytestmark = [pytest.mark.slow]

DRILL = "sim_fault_drill"
NIGHTLY = "nightly_fabric_validation"


@pytest.fixture
def fleet(airflow_db, fleet_state):
    return fleet_state


def fabric_row(run_id: str, pool: str) -> dict:
    return next(
        r
        for r in Ledger().validations_for_run(run_id)
        if r["pool"] == pool and r["kind"] == "fabric"
    )


def test_the_drill_injects_its_fault_the_validation_finds_it_and_the_teardown_clears_it(fleet):
    dr = run_dag(
        DRILL,
        {
            "pools": ["a3u-sim/h200-b"],
            "mode": "fabric",
            "sim_faults": ["a3u-sim/h200-b=fabric-down"],
        },
    )
    states = task_states(dr)
    assert str(dr.state) == "failed"  # the fault was found, through the watcher
    assert states["inject_faults"] == "success"
    assert states["validate_fabric[0]"] == "failed" and states["report"] == "failed"
    assert states["clear_faults"] == "success"
    assert states["watcher"] == "failed"  # it fails the run: a task failed
    # in force while the pool was validated: every pair fell back to sockets
    row = fabric_row(dr.run_id, "h200-b")
    assert not row["passed"] and row["transport"] == "socket"
    assert all(p["transport"] == "socket" for p in Ledger().pairs(row["id"]))
    assert Ledger().pool_state("a3u-sim", "h200-b")["state"] == "degraded"
    assert SimState().faults() == []  # cleared with the run, although it failed


def test_the_drills_fault_is_its_own_runs_and_the_other_pools_are_untouched(fleet):
    """The fault is leased to the drill's run (the teardown clears that scope only): a lasting
    fault put in with ``gpufleet sim inject`` outlives the drill."""
    SimState().inject("p5-sim", "h100-a", "lustre-slow")  # a CLI fault, until cleared
    seen = []

    def snapshot(context):  # the fleet's faults as the validation saw them
        seen.extend((f.pool, f.fault.text, f.scope) for f in SimState().faults())

    from tests.support.fleet import get_dag

    dag = get_dag(DRILL)
    dag.task_dict["fabric_targets"].pre_execute = snapshot
    dr = dag.test(
        run_conf={
            "pools": ["a3u-sim/h200-a"],
            "mode": "fabric",
            "sim_faults": ["a3u-sim/h200-a=lustre-slow"],
        }
    )
    assert str(dr.state) == "success", task_states(dr)
    assert sorted(seen) == [
        ("h100-a", "lustre-slow", "cli"),
        ("h200-a", "lustre-slow", run_scope(DRILL, dr.run_id)),
    ]
    assert [(f.pool, f.fault.text) for f in SimState().faults()] == [("h100-a", "lustre-slow")]


def test_a_fault_outside_the_drills_pools_is_refused_before_any_is_injected(fleet):
    dr = run_dag(
        DRILL,
        {
            "pools": ["a3u-sim/h200-b"],
            "mode": "fabric",
            "sim_faults": ["a3u-sim/h200-b=lustre-slow", "a3u-sim/h200-a=fabric-down"],
        },
    )
    states = task_states(dr)
    assert str(dr.state) == "failed", states
    assert states["inject_faults"] == "failed" and states["fabric_targets"] == "upstream_failed"
    assert Ledger().validations_for_run(dr.run_id) == []  # nothing was validated
    assert SimState().faults() == []


def test_a_fault_the_grammar_does_not_know_is_refused_by_the_form(fleet):
    from airflow.sdk.exceptions import ParamValidationError

    with pytest.raises(ParamValidationError, match="sim_faults"):
        run_dag(DRILL, {"sim_faults": ["a3u-sim/h200-a=meteor"]})


def test_a_production_run_given_sim_faults_injects_nothing(fleet):
    """The nightly's form has no faults field: a conf that still carries one (an old script)
    changes nothing on the fleet."""
    dr = run_dag(
        NIGHTLY,
        {
            "pools": ["a3u-sim/h200-b"],
            "mode": "fabric",
            "sim_faults": ["a3u-sim/h200-b=fabric-down"],
        },
    )
    assert str(dr.state) == "success", task_states(dr)
    assert fabric_row(dr.run_id, "h200-b")["transport"] == "gib"
    assert SimState().faults() == []
