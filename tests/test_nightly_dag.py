"""nightly_fabric_validation end to end with dag.test() on the simulated fleet."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpufleet.airflow.ui.metrics import exposition
from gpufleet.backends import cluster_backend
from gpufleet.backends.sim.state import SimState
from gpufleet.config.catalog import load_catalog
from gpufleet.config.paths import state_dir
from gpufleet.domain.faults import RunLease
from gpufleet.domain.workloads import QUARANTINE_KEY, QUARANTINE_LABEL
from gpufleet.store import Ledger
from tests.support.fleet import asset_events, run_dag, task_states

pytestmark = [pytest.mark.slow]

DAG = "nightly_fabric_validation"
DRILL = "sim_fault_drill"


@pytest.fixture
def fleet(airflow_db, fleet_state):
    return fleet_state


def fabric_row(ledger: Ledger, run_id: str, pool: str) -> dict:
    return next(
        r for r in ledger.validations_for_run(run_id) if r["pool"] == pool and r["kind"] == "fabric"
    )


def test_healthy_fleet_passes_and_records_per_pair_figures(fleet, level1_every_night):
    """Every idle node checked at level 1 (the rotation would leave a pool with no node due on
    some nights, and its health row costing nothing: tests/services/validation/
    test_level1_rotation.py has the rotation). The storage task runs once per filesystem: on
    this night (an odd day number) lustre-a3u's second pool, h200-b, hosts its full test, and
    h200-a, whose fabric task may well run first, checks its own clients without taking it."""
    dr = run_dag(DAG, logical_date=datetime(2026, 12, 1, 2, tzinfo=UTC))
    states = task_states(dr)
    assert str(dr.state) == "success", states
    assert sorted(k for k in states if k.startswith("validate_storage[")) == [
        "validate_storage[0]",
        "validate_storage[1]",
    ]
    assert states["report"] == "success"
    ledger = Ledger()
    rows = ledger.validations_for_run(dr.run_id)
    assert {(r["pool"], r["kind"]) for r in rows} == {
        ("h200-a", "fabric"),
        ("h200-b", "fabric"),
        ("h100-a", "fabric"),
        ("h200-a", "storage"),
        ("h200-b", "storage"),
        ("h100-a", "storage"),
        ("h200-a", "health"),  # each pool's GPU health check, before its pairs
        ("h200-b", "health"),
        ("h100-a", "health"),
    }
    assert all(r["passed"] for r in rows)
    scopes = {r["pool"]: r["details"]["scope"] for r in rows if r["kind"] == "storage"}
    assert scopes == {"h200-a": "pool", "h200-b": "filesystem", "h100-a": "filesystem"}
    h100 = fabric_row(ledger, dr.run_id, "h100-a")
    assert h100["transport"] == "ofi-efa" and h100["nodes_tested"] == 5
    pairs = ledger.pairs(h100["id"])
    # 5 nodes: 2 pairs in pass 1, the odd node against a node that passed
    assert [(p["pass_no"], p["transport"]) for p in pairs] == [
        (1, "ofi-efa"),
        (1, "ofi-efa"),
        (2, "ofi-efa"),
    ]
    assert all(p["busbw_gbps"] > 0.9 * 480 and p["gdrdma"] for p in pairs)
    assert all(p["small_latency_us"] < 120 for p in pairs)
    for key in (("a3u-sim", "h200-a"), ("a3u-sim", "h200-b"), ("p5-sim", "h100-a")):
        assert ledger.pool_state(*key)["state"] == "validated"
    events = asset_events("x-gpufleet://fleet/pool-validated", dr.run_id)
    assert sorted((e["cluster"], e["pool"], e["transport"]) for e in events) == [
        ("a3u-sim", "h200-a", "gib"),
        ("a3u-sim", "h200-b", "gib"),
        ("p5-sim", "h100-a", "ofi-efa"),
    ]
    reports = state_dir() / "reports" / "latest"
    report = (reports / "report.md").read_text()
    assert "9 of 9 checks passed" in report
    assert "<svg" in (reports / "report.html").read_text()
    assert not (reports / "metrics.prom").exists()  # served live by /metrics instead
    assert 'gpufleet_fabric_busbw_gbps{cluster="p5-sim",pool="h100-a"}' in (
        exposition(load_catalog(), ledger).decode()
    )
    # what validation cost, from the pods' own container times: every row, per pool, in total
    for r in rows:
        assert r["details"]["gpu_minutes"] > 0 and r["details"]["gpu_minutes_per_node"] > 0
    assert h100["details"]["cost_nodes"] == 5
    assert "## Validation cost" in report and "GPU-minutes per node per night" in report


def test_fabric_down_falls_back_to_sockets_and_fails_loudly(fleet):
    SimState().inject("a3u-sim", "h200-b", "fabric-down")  # as `gpufleet sim inject` does
    dr = run_dag(DAG, {"pools": ["a3u-sim/h200-b"], "mode": "fabric"})
    states = task_states(dr)
    assert str(dr.state) == "failed"
    assert states["validate_fabric[0]"] == "failed" and states["report"] == "failed"
    ledger = Ledger()
    row = fabric_row(ledger, dr.run_id, "h200-b")
    assert not row["passed"] and row["transport"] == "socket"
    assert "every pair failed" in row["reasons"][0] and row["details"]["page"] is True
    assert all(p["transport"] == "socket" for p in ledger.pairs(row["id"]))
    assert ledger.pool_state("a3u-sim", "h200-b")["state"] == "degraded"
    assert ledger.quarantined() == []  # a fabric problem: nobody is blamed
    assert asset_events("x-gpufleet://fleet/pool-validated", dr.run_id) == []


def test_socket_fallback_fails_even_when_bandwidth_alone_would_pass(fleet):
    SimState().inject("a3u-sim", "h200-b", "fabric-down:busbw=345")
    dr = run_dag(DAG, {"pools": ["a3u-sim/h200-b"], "mode": "fabric"})
    assert str(dr.state) == "failed"
    ledger = Ledger()
    row = fabric_row(ledger, dr.run_id, "h200-b")
    pairs = ledger.pairs(row["id"])
    assert all(p["busbw_gbps"] >= 0.9 * 355 for p in pairs), "bandwidth alone would pass"
    for p in pairs:
        assert p["transport"] == "socket" and not p["passed"]
        assert any("silent fallback to TCP sockets" in r for r in p["reasons"])
        assert any("small-message latency" in r for r in p["reasons"])
        assert not any("bus bandwidth" in r for r in p["reasons"])
    assert ledger.pool_state("a3u-sim", "h200-b")["state"] == "degraded"


def test_bad_node_is_localized_and_quarantined_alone(fleet):
    bad = "a3u-sim-h200-a-2"
    SimState().inject("a3u-sim", "h200-a", f"bad-node:{bad}")
    dr = run_dag(DAG, {"pools": ["a3u-sim/h200-a"], "mode": "fabric"})
    assert str(dr.state) == "success", task_states(dr)  # the pool passes without that node
    ledger = Ledger()
    assert [q["node"] for q in ledger.quarantined("a3u-sim")] == [bad]
    row = fabric_row(ledger, dr.run_id, "h200-a")
    assert row["passed"] and row["details"]["quarantined"] == [bad]
    failed_pass2 = [p for p in ledger.pairs(row["id"]) if p["pass_no"] == 2 and not p["passed"]]
    assert {p["node_a"] for p in failed_pass2} == {bad}
    assert len({p["node_b"] for p in failed_pass2}) == 2  # two different known-good partners
    nodes = {
        n.name: n for n in cluster_backend(load_catalog().cluster("a3u-sim")).list_nodes("h200-a")
    }
    assert nodes[bad].quarantined and not nodes[bad].schedulable
    assert nodes[bad].labels[QUARANTINE_LABEL] == "true"
    assert any(t.key == QUARANTINE_KEY and t.effect == "NoSchedule" for t in nodes[bad].taints)
    assert all(n.schedulable for name, n in nodes.items() if name != bad)


def test_too_many_bad_nodes_quarantines_nothing_and_pages(fleet):
    for node in ("a3u-sim-h200-a-0", "a3u-sim-h200-a-3"):
        SimState().inject("a3u-sim", "h200-a", f"bad-node:{node}")
    dr = run_dag(DAG, {"pools": ["a3u-sim/h200-a"], "mode": "fabric", "max_quarantine_share": 0.2})
    assert str(dr.state) == "failed"
    ledger = Ledger()
    row = fabric_row(ledger, dr.run_id, "h200-a")
    assert "more than the 1 (20%, at least one) that may be quarantined" in row["reasons"][0]
    assert ledger.quarantined() == []
    assert ledger.pool_state("a3u-sim", "h200-a")["state"] == "degraded"


def test_lustre_slow_fails_storage_with_measured_and_expected(fleet):
    SimState().inject("p5-sim", "h100-a", "lustre-slow")
    dr = run_dag(DAG, {"pools": ["p5-sim/h100-a"], "mode": "storage"})
    states = task_states(dr)
    assert str(dr.state) == "failed" and states["validate_storage[0]"] == "failed"
    assert "validate_fabric" not in " ".join(k for k, v in states.items() if v == "failed")
    row = next(r for r in Ledger().validations_for_run(dr.run_id) if r["kind"] == "storage")
    assert not row["passed"] and row["expected_mb_s"] == 4800
    assert row["read_mb_s"] < 0.5 * 4800 and row["write_mb_s"] < 0.5 * 4800
    assert "is below 4,320 MB/s (90% of the 4,800 MB/s tier x capacity)" in row["reasons"][0]


def test_bad_params_are_refused_before_a_run(fleet):
    from airflow.sdk.exceptions import ParamValidationError

    for conf in (
        {"pools": ["not a pool"]},
        {"clusters": ["no-such-cluster"]},
        {"mode": "everything"},
        {"max_quarantine_share": 1.5},
    ):
        with pytest.raises(ParamValidationError):
            run_dag(DAG, conf)


def test_unknown_pool_fails_at_the_start_naming_the_known_ones(fleet):
    dr = run_dag(DAG, {"pools": ["a3u-sim/nope"]})
    states = task_states(dr)
    assert str(dr.state) == "failed" and states["fabric_targets"] == "failed"
    assert Ledger().validations_for_run(dr.run_id) == []  # nothing was validated


def test_nodes_running_training_jobs_are_not_disturbed(fleet):
    from gpufleet.manifests.training import TrainingJobSpec, render_training_job

    ref = load_catalog().pool("a3u-sim", "h200-a")
    backend = cluster_backend(ref.cluster)
    backend.apply(
        render_training_job(
            ref,
            TrainingJobSpec(
                name="busy-job",
                namespace="ml",
                image="example/train:1",
                command=["torchrun", "t.py"],
                nodes=2,
                gpus_per_node=8,
            ),
        )
    )
    busy = {n.name for n in backend.list_nodes("h200-a") if n.workloads}
    assert len(busy) == 2
    dr = run_dag(DAG, {"pools": ["a3u-sim/h200-a"], "mode": "fabric"})
    assert str(dr.state) == "success", task_states(dr)
    ledger = Ledger()
    row = fabric_row(ledger, dr.run_id, "h200-a")
    assert set(row["details"]["busy"]) == busy and row["nodes_tested"] == 4
    tested = {n for p in ledger.pairs(row["id"]) for n in (p["node_a"], p["node_b"])}
    assert not tested & busy
    assert {n.name for n in backend.list_nodes("h200-a") if n.workloads} == busy  # still running


def test_flaky_cluster_api_is_retried_and_the_run_passes(fleet):
    import random

    random.seed(11)
    SimState().inject("a3u-sim", "h200-b", "api-errors:0.1")
    dr = run_dag(DAG, {"pools": ["a3u-sim/h200-b"], "mode": "fabric"})
    # one call in ten fails with a 503; the backend retries, so no task fails or retries
    assert str(dr.state) == "success", task_states(dr)
    assert {
        ti.task_id: ti.try_number
        for ti in dr.get_task_instances()
        if ti.task_id == "validate_fabric"
    } == {"validate_fabric": 1}
    assert fabric_row(Ledger(), dr.run_id, "h200-b")["passed"]


def test_validation_that_cannot_finish_records_an_error_and_the_gate_refuses(fleet):
    """A node row hand-edited into invalid JSON (a failure gpufleet has no error type for):
    every attempt records an ``error`` verdict, the report says so, the gate refuses."""
    import sqlite3

    from gpufleet.backends.sim.state import db_path
    from gpufleet.services.launch.gate import check_gate

    catalog = load_catalog()
    cluster_backend(catalog.cluster("a3u-sim")).list_nodes("h200-b")  # the sim fleet exists
    node = "a3u-sim-h200-b-1"
    with sqlite3.connect(db_path()) as conn:
        (labels,) = conn.execute("SELECT labels FROM nodes WHERE name=?", (node,)).fetchone()
        conn.execute("UPDATE nodes SET labels='{broken' WHERE name=?", (node,))
    dr = run_dag(DAG, {"pools": ["a3u-sim/h200-b"], "mode": "fabric"})
    states = task_states(dr)
    assert str(dr.state) == "failed"
    assert states["validate_fabric[0]"] == "failed" and states["report"] == "failed"
    rows = [r for r in Ledger().validations_for_run(dr.run_id) if r["pool"] == "h200-b"]
    assert rows and all(r["verdict"] == "error" and r["kind"] == "fabric" for r in rows)
    assert all("JSONDecodeError" in r["reasons"][0] for r in rows)
    report = (state_dir() / "reports" / "latest" / "report.md").read_text()
    assert "| a3u-sim/h200-b | ERROR |" in report and "1 could not finish" in report
    with sqlite3.connect(db_path()) as conn:  # the nodes read fine again: only the verdict
        conn.execute("UPDATE nodes SET labels=? WHERE name=?", (labels, node))
    decision = check_gate(catalog, Ledger, "a3u-sim", ["h200-b"], 2)
    assert not decision.launch
    assert any("JSONDecodeError" in r for r in decision.reasons), decision.reasons


# --- a drill's run-scoped faults stay inside their run (issue 16, finding 4) --------------------


@pytest.mark.parametrize("killed", ["absent", "failed"])
def test_faults_of_a_killed_drill_do_not_reach_the_next_nightly(fleet, killed):
    # a sim_fault_drill run that was kill -9'd after its setup injected faults: its teardown
    # never ran, and Airflow either recorded it failed or no longer knows it
    if killed == "failed":
        run_id = run_dag(DRILL, {"pools": ["a3u-sim/nope"]}).run_id
    else:
        run_id = "manual__2026-01-01T00:00:00+00:00"
    SimState().inject("a3u-sim", "h200-a", "fabric-down", lease=RunLease(DRILL, run_id))
    dr = run_dag(DAG, {"pools": ["a3u-sim/h200-a"], "mode": "fabric"})
    states = task_states(dr)
    assert str(dr.state) == "success", states
    assert states["sweep_faults"] == "success"
    assert fabric_row(Ledger(), dr.run_id, "h200-a")["passed"] is True
    assert SimState().faults() == []  # swept: their run is over


# --- a nightly that validated nothing says so and fails (issue 31) -----------------------------


def test_a_nightly_that_skips_every_pool_fails_saying_it_validated_nothing(fleet):
    """Another run holds h200-a's fabric and storage locks (a run this Airflow does not know,
    heard from just now: alive by its lease). Every task skips the pool and the run recorded
    nothing: it fails, and its report says it validated nothing and who holds the locks."""
    from datetime import UTC, datetime

    ledger = Ledger()
    for kind in ("fabric", "storage"):
        lock = ledger.validation_lock("a3u-sim", "h200-a", kind)
        lock.hold("nightly_elsewhere", "night-x", datetime.now(UTC))
    dr = run_dag(DAG, {"pools": ["a3u-sim/h200-a"]})
    states = task_states(dr)
    assert str(dr.state) == "failed", states
    assert states["validate_fabric[0]"] == "skipped" and states["validate_storage[0]"] == "skipped"
    assert states["report"] == "failed"
    assert Ledger().validations_for_run(dr.run_id) == []
    report = (state_dir() / "reports" / "latest" / "report.md").read_text()
    assert "**VALIDATED NOTHING: 2 planned checks recorded no verdict**" in report
    assert "a3u-sim/h200-a fabric: skipped, its lock is held by run night-x" in report
    assert "its verdict stands" in report


def test_a_killed_dags_test_still_running_in_airflow_is_named_with_how_to_clear_it(fleet):
    """A ``dags test`` killed while it validated h200-a: its run stays ``running`` in Airflow
    (nothing marks it failed), so its lock is never seen dead, and three hours after its last
    heartbeat every nightly would skip the pool. The next nightly names that run as stuck, with
    how to mark it failed, and fails."""
    from datetime import UTC, datetime, timedelta

    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    killed = run_dag(DAG, {"pools": ["a3u-sim/nope"]}).run_id  # a real run of this Airflow
    with create_session() as session:
        session.query(DagRun).filter(DagRun.dag_id == DAG, DagRun.run_id == killed).update(
            {"state": "running"}
        )
    lock = Ledger().validation_lock("a3u-sim", "h200-a", "fabric")
    lock.hold(DAG, killed, datetime.now(UTC) - timedelta(hours=3))
    dr = run_dag(DAG, {"pools": ["a3u-sim/h200-a"], "mode": "fabric"})
    states = task_states(dr)
    assert str(dr.state) == "failed", states
    assert states["validate_fabric[0]"] == "skipped" and states["report"] == "failed"
    report = (state_dir() / "reports" / "latest" / "report.md").read_text()
    assert f"its lock is held by run {killed} of {DAG}" in report
    assert "Airflow still shows that run running" in report
    assert f"Runs > {killed} > Mark run as failed" in report
    assert f"PATCH /api/v2/dags/{DAG}/dagRuns/{killed}" in report


def test_only_a_pool_with_a_node_to_drain_or_repair_gets_a_remediation_task(fleet):
    """A healthy pool maps no ``remediate_nodes`` task; the night a node fails its retest, its
    pool alone gets one, which drains it and asks the cloud to repair it."""
    from gpufleet.domain.nodes import NodeState

    bad = "a3u-sim-h200-a-3"
    SimState().inject("a3u-sim", "h200-a", f"bad-node:{bad}:nic")  # stays until repaired
    scope = {"pools": ["a3u-sim/h200-a", "a3u-sim/h200-b"], "mode": "fabric"}
    first = task_states(run_dag(DAG, scope))
    assert first["remediation_targets"] == "success" and first["remediate_nodes"] == "skipped"
    assert Ledger().node_state("a3u-sim", bad)["state"] == NodeState.QUARANTINED
    second = task_states(run_dag(DAG, scope))  # its retest fails: drained, then repaired
    assert second["remediate_nodes[0]"] == "success", second
    assert not any(key.startswith("remediate_nodes[1]") for key in second), second
    assert Ledger().node_state("a3u-sim", bad)["state"] == NodeState.REPAIRING
