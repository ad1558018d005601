"""A launch keeps off the nodes its pool's latest GPU health check failed and left in service
(issue 20 item 5): the gate does not count them, and the JobSet it submits keeps every pod off
them by name, so neither Kueue nor the scheduler places a rank there. Through the real services
on the simulated fleet."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpufleet.domain.gate import LEFT_IN_SERVICE
from gpufleet.domain.workloads import avoided_nodes, workload_pod_templates
from gpufleet.services.launch.submit import LaunchRefused
from gpufleet.store import Ledger
from tests.services.launch.test_placement_by_topology import CLUSTER, _launch
from tests.support.fleet import frozen_sim_clock, validate

POOL = "h200-a"
NODES = [f"{CLUSTER}-{POOL}-{i}" for i in range(6)]


@pytest.fixture(autouse=True)
def _frozen(fleet_state):
    frozen_sim_clock()


def health_left_in_service(left: dict[str, str], details: dict | None = None) -> None:
    """Tonight's health row: ``left`` failed, the quarantine cap held, so still in service."""
    now = datetime.now(UTC)
    nodes = {n: {"level": 1, "action": "healthy"} for n in NODES}
    nodes |= {n: {"level": 1, "action": a} for n, a in left.items()}
    Ledger().record_validation(
        run_id="night-health", cluster=CLUSTER, pool=POOL, kind="health", passed=False,
        started_at=now, finished_at=now,
        reasons=[f"{n}: {a}: Xid {LEFT_IN_SERVICE}" for n, a in left.items()],
        details=details or {"nodes": nodes, "left_in_service": sorted(left)},
    )  # fmt: skip


def test_no_rank_runs_on_a_node_the_health_check_failed_and_left_in_service():
    validate(CLUSTER, POOL)
    left = {NODES[0]: "reboot", NODES[1]: "repair"}  # the sim would place ranks there first
    health_left_in_service(left)
    jobset, row = _launch("avoids-unhealthy", 4)
    ((_, _, template),) = workload_pod_templates(jobset)
    assert avoided_nodes(template) == set(left)
    assert set(row["ranks"]) and not {r["node"] for r in row["ranks"].values()} & set(left)


def test_a_pool_never_checked_avoids_nothing():
    validate(CLUSTER, POOL)
    jobset, _ = _launch("never-checked", 4)
    ((_, _, template),) = workload_pod_templates(jobset)
    assert avoided_nodes(template) == set()


def test_a_health_row_unreadable_at_submit_refuses_and_submits_nothing():
    """The gate let the job through; a health row the reader refuses lands before the submit
    (tonight's check): the submit refuses naming it, and no JobSet is applied."""
    from gpufleet.services.launch.submit import TrainingLaunch
    from tests.services.launch.test_placement_by_topology import load_catalog

    validate(CLUSTER, POOL)
    params = {
        "cluster": CLUSTER, "pools": [POOL], "nodes": 4, "gpus_per_node": 8,
        "job_name": "unreadable", "namespace": "ml-team", "image": "example/train:1",
        "command": ["torchrun", "train.py"],
    }  # fmt: skip
    launch = TrainingLaunch(load_catalog(), Ledger)
    decision = launch.gate(params, run_id="run-u")
    assert decision.decision_id is not None
    health_left_in_service({}, details={"nodes": {NODES[0]: {"level": 1, "action": "melted"}}})
    with pytest.raises(LaunchRefused, match="latest GPU health row is unreadable.*melted"):
        launch.submit(launch.request(params), "run-u", decision.decision_id)
    assert launch.backend(CLUSTER).inner.get("JobSet", "unreadable", "ml-team") is None
