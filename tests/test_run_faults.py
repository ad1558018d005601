"""A run's simulated faults stay inside the run's scope and die with the run (issue 16,
finding 4): scope checks (service), leases and the sweep of ended runs (sim state)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.backends.sim.state import SimState, now
from gpufleet.config.catalog import load_catalog
from gpufleet.domain.faults import FaultError, RunLease
from gpufleet.errors import GpufleetError
from gpufleet.services.validation.run_faults import (
    clear_run_faults,
    inject_run_faults,
    nightly_fault_scope,
    sweep_ended_runs,
)

ROOT = Path(__file__).resolve().parents[1]
DRILL = "sim_fault_drill"  # the one DAG whose runs inject faults
ONBOARDING = "region_onboarding"  # another DAG's id (its runs sweep, never inject)


@pytest.fixture
def catalog():
    return load_catalog()


def texts(**kwargs) -> list[tuple[str, str, str]]:
    return [(f.cluster, f.pool, f.text) for f in SimState().faults(**kwargs)]


# --- scope: a run names only its own pools ------------------------------------------------------


def test_a_drill_refuses_a_fault_on_a_pool_it_does_not_validate_before_injecting_any(
    catalog, fleet_state
):
    scope = nightly_fault_scope(catalog, regions=["sim-europe-west4"])
    specs = ["a3u-euw4-sim/h200-eu=capacity-short:2", "a3u-sim/h200-a=fabric-down"]
    with pytest.raises(GpufleetError) as refused:
        inject_run_faults(catalog, specs, scope, RunLease(DRILL, "r1"))
    message = str(refused.value)
    assert "a3u-sim/h200-a is outside this run's scope" in message
    assert "the pools this run validates: a3u-euw4-sim/h200-eu" in message
    assert "gpufleet sim inject" in message  # what to do instead
    assert texts() == []  # not even the first, in-scope one


def test_the_nightly_scope_is_the_pools_the_run_validates(catalog, fleet_state):
    scope = nightly_fault_scope(catalog, pools=["a3u-sim/h200-b"])
    assert scope.pools == {"a3u-sim/h200-b"}
    with pytest.raises(GpufleetError, match=r"a3u-sim/h200-a is outside this run's scope"):
        inject_run_faults(catalog, ["a3u-sim/h200-a=fabric-down"], scope, RunLease(DRILL, "r1"))
    assert nightly_fault_scope(catalog, regions=["sim-us-east-1"]).pools == {"p5-sim/h100-a"}
    # a planned pool is validated by its transition, not by the nightly
    assert "a3u-sim/h200-c" not in nightly_fault_scope(catalog).pools
    inject_run_faults(catalog, ["a3u-sim/h200-b=lustre-slow"], scope, RunLease(DRILL, "r1"))
    assert texts() == [("a3u-sim", "h200-b", "lustre-slow")]


# --- lifetime: a lease the sim honours, whoever reads it ----------------------------------------


def test_a_run_fault_is_not_in_force_past_its_lease(fleet_state):
    SimState().inject("a3u-sim", "h200-a", "fabric-down", lease=RunLease(DRILL, "r1", 60))
    [fault] = SimState().faults()
    assert (fault.dag_id, fault.run_id, fault.scope) == (DRILL, "r1", f"run:{DRILL}/r1")
    assert fault.expires_at == pytest.approx(fault.since + 60)
    assert texts(at=fault.since + 59) == [("a3u-sim", "h200-a", "fabric-down")]
    assert texts(at=fault.since + 61) == []


def test_an_expired_fault_is_not_in_force_for_a_reader_in_another_process(catalog, fleet_state):
    # no Airflow to ask: the `gpufleet sim show` process reads the lease alone
    SimState().inject("a3u-sim", "h200-a", "fabric-down", lease=RunLease(DRILL, "r1", 1e-6))
    SimState().clock.advance(1)  # the lease ran out
    SimState().inject("a3u-sim", "h200-b", "lustre-slow")  # cli: until cleared
    env = {**os.environ, "GPUFLEET_STATE_DIR": str(fleet_state)}
    show = subprocess.run(
        [sys.executable, "-m", "gpufleet", "sim", "show", "--cluster", "a3u-sim"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert show.returncode == 0, show.stderr
    assert "a3u-sim/h200-b: lustre-slow (cli)" in show.stdout
    assert "fabric-down" not in show.stdout


def test_cli_faults_last_until_cleared(fleet_state):
    SimState().inject("a3u-sim", "h200-a", "fabric-down")
    ten_years = now() + 10 * 365 * 86400
    assert texts(at=ten_years) == [("a3u-sim", "h200-a", "fabric-down")]
    assert SimState().sweep(lambda dag_id, run_id: False, at=ten_years) == []
    assert texts() == [("a3u-sim", "h200-a", "fabric-down")]


def test_a_run_scope_without_a_lease_is_refused(fleet_state):
    with pytest.raises(FaultError, match="needs its run's lease"):
        SimState().inject("a3u-sim", "h200-a", "fabric-down", scope="run:manual__1")
    assert texts() == []
    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(FaultError, match="lease"):
            RunLease(DRILL, "r1", bad)


def test_the_same_run_injecting_again_starts_its_lease_again(fleet_state):
    state = SimState()
    assert state.inject("a3u-sim", "h200-a", "fabric-down", lease=RunLease(DRILL, "r1", 1e-6))
    state.clock.advance(1)
    # its lease ran out: the fault was not in force, so it is put in force again
    assert state.inject("a3u-sim", "h200-a", "fabric-down", lease=RunLease(DRILL, "r1", 60))
    assert not state.inject("a3u-sim", "h200-a", "fabric-down", lease=RunLease(DRILL, "r1", 90))
    [fault] = state.faults()
    assert fault.expires_at >= fault.since + 89  # the retried setup renewed it


# --- the sweep: faults of runs that are over ----------------------------------------------------


def test_the_sweep_removes_faults_of_ended_runs_and_keeps_live_runs_and_cli(fleet_state):
    state = SimState()
    state.inject("a3u-sim", "h200-a", "fabric-down", lease=RunLease(DRILL, "killed"))
    state.inject("a3u-sim", "h200-b", "lustre-slow", lease=RunLease(ONBOARDING, "live"))
    state.inject("p5-sim", "h100-a", "bad-node:p5-sim-h100-a-1")  # cli
    with state.tx() as conn:  # a run fault written before faults named their run
        conn.execute(
            "INSERT INTO faults (cluster, pool, fault, scope, created_at) "
            "VALUES ('a3u-sim', 'h200-a', 'drift:1', 'run:manual__old', 0)"
        )
    asked = []

    def alive(dag_id: str, run_id: str) -> bool:
        asked.append((dag_id, run_id))
        return run_id == "live"

    removed = sweep_ended_runs(alive)
    assert sorted(f.text for f in removed) == ["drift:1", "fabric-down"]
    assert sorted(asked) == sorted([(DRILL, "killed"), (ONBOARDING, "live")])
    assert sorted(texts()) == [
        ("a3u-sim", "h200-b", "lustre-slow"),
        ("p5-sim", "h100-a", "bad-node:p5-sim-h100-a-1"),
    ]


def test_the_sweep_removes_expired_faults_of_a_live_run(fleet_state):
    SimState().inject("a3u-sim", "h200-a", "fabric-down", lease=RunLease(DRILL, "r1", 1e-6))
    SimState().clock.advance(1)  # the lease ran out
    [removed] = sweep_ended_runs(lambda dag_id, run_id: True)
    assert removed.text == "fabric-down"
    with SimState().read() as conn:
        assert conn.execute("SELECT COUNT(*) FROM faults").fetchone()[0] == 0


def test_runs_of_two_dags_with_the_same_run_id_keep_their_own_faults(fleet_state):
    run_id = "scheduled__2026-01-02T02:00:00+00:00"  # two DAGs on one schedule share it
    SimState().inject("a3u-sim", "h200-a", "fabric-down", lease=RunLease(DRILL, run_id))
    SimState().inject("a3u-sim", "h200-a", "fabric-down", lease=RunLease(ONBOARDING, run_id))
    assert clear_run_faults(ONBOARDING, run_id) == 1
    [left] = SimState().faults()
    assert left.dag_id == DRILL
    assert sweep_ended_runs(lambda dag_id, r: dag_id == DRILL) == []


def test_a_state_file_from_before_leases_is_upgraded_in_place(tmp_path):
    path = tmp_path / "sim.db"
    with sqlite3.connect(path) as conn:
        conn.execute(
            "CREATE TABLE faults (id INTEGER PRIMARY KEY AUTOINCREMENT, cluster TEXT NOT NULL, "
            "pool TEXT NOT NULL, fault TEXT NOT NULL, scope TEXT NOT NULL DEFAULT 'cli', "
            "created_at REAL NOT NULL, UNIQUE (cluster, pool, fault, scope))"
        )
        conn.execute(
            "INSERT INTO faults (cluster, pool, fault, scope, created_at) "
            "VALUES ('a3u-sim', 'h200-a', 'fabric-down', 'cli', 1)"
        )
    state = SimState(path)
    assert [(f.text, f.scope, f.expires_at) for f in state.faults()] == [
        ("fabric-down", "cli", None)
    ]
    assert state.inject("a3u-sim", "h200-b", "lustre-slow", lease=RunLease(DRILL, "r1"))
