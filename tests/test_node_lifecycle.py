"""The node lifecycle on the simulated fleet, night after night, through the real services: a
quarantined node is retested, drained, repaired and released, or handed to a human.

Each "night" is the nightly's per-pool work: the fabric validation (which retests the nodes
out of service first) and the remediation pass (drain, repair within the budget, page).
"""

from __future__ import annotations

import pytest

from gpufleet.backends import cluster_backend
from gpufleet.backends.sim.state import SimState
from gpufleet.config.catalog import load_catalog
from gpufleet.domain.nodes import NodeState
from gpufleet.services.nodes.remediation import RemediationSettings
from gpufleet.store import Ledger
from tests.support.fleet import lifecycle_night

CLUSTER = "a3u-sim"


def night(pool: str, n: int, settings: RemediationSettings | None = None) -> dict:
    """One night for ``pool``: validate (retests first), then the remediation pass."""
    return lifecycle_night(CLUSTER, pool, n, settings)


def state(node: str) -> str | None:
    row = Ledger().node_state(CLUSTER, node)
    return row["state"] if row else None


def free(pool: str) -> list[str]:
    return sorted(
        n.name for n in cluster_backend(load_catalog().cluster(CLUSTER)).list_nodes(pool) if n.free
    )


def test_a_fault_cleared_by_hand_costs_one_night(fleet_state):
    bad = f"{CLUSTER}-h200-a-3"
    SimState().inject(CLUSTER, "h200-a", f"bad-node:{bad}")
    first = night("h200-a", 1)
    assert first["summary"]["quarantined"] == [bad]
    assert state(bad) == NodeState.QUARANTINED and bad not in free("h200-a")
    SimState().clear()
    night("h200-a", 2)
    assert state(bad) == NodeState.RELEASED
    assert len(free("h200-a")) == 6  # the pool's free nodes back to full
    moves = [(e["from_state"], e["to_state"]) for e in Ledger().node_history(CLUSTER, bad)]
    assert moves == [(None, "quarantined"), ("quarantined", "retesting"), ("retesting", "released")]
    assert Ledger().quarantined(CLUSTER, "h200-a") == []


def test_a_persistent_fault_is_drained_repaired_retested_and_released(fleet_state):
    bad = f"{CLUSTER}-h200-a-3"
    SimState().inject(CLUSTER, "h200-a", f"bad-node:{bad}:nic")
    night("h200-a", 1)
    assert state(bad) == NodeState.QUARANTINED
    second = night("h200-a", 2)  # the retest fails: drained, then repaired through the cloud
    assert second["remediation"].repairs_started == [bad]
    assert state(bad) == NodeState.REPAIRING
    night("h200-a", 3)  # the repaired node (a healthy host now) passes its retest
    assert state(bad) == NodeState.RELEASED
    moves = [e["to_state"] for e in Ledger().node_history(CLUSTER, bad)]
    assert moves == [
        "quarantined",
        "retesting",
        "draining",
        "drained",
        "repairing",
        "retesting",
        "released",
    ]
    assert all(e["at"] for e in Ledger().node_history(CLUSTER, bad))
    assert len(free("h200-a")) == 6


def test_a_fault_that_survives_repair_goes_to_a_person(fleet_state):
    bad = f"{CLUSTER}-h200-a-3"
    SimState().inject(CLUSTER, "h200-a", f"bad-node:{bad}:nic", scope="sticky")
    settings = RemediationSettings(max_repairs=1)
    pages = []
    for n in range(1, 6):
        pages += night("h200-a", n, settings)["remediation"].pages
    assert state(bad) == NodeState.NEEDS_HUMAN
    assert len(pages) == 1 and bad in pages[0]  # paged once
    for n in range(6, 8):  # the DAG never releases it
        night("h200-a", n, settings)
        assert state(bad) == NodeState.NEEDS_HUMAN and bad not in free("h200-a")


def test_one_bad_node_in_a_small_pool_leaves_the_others_in_service(fleet_state):
    bad = f"{CLUSTER}-h200-b-1"  # h200-b has 4 nodes: one bad node is 25% > 20%
    SimState().inject(CLUSTER, "h200-b", f"bad-node:{bad}:nic")
    summary = night("h200-b", 1)["summary"]
    assert summary["quarantined"] == [bad] and summary["passed"]
    assert free("h200-b") == sorted(f"{CLUSTER}-h200-b-{i}" for i in (0, 2, 3))


@pytest.fixture
def ten_node_pool(fleet_state, tmp_path, monkeypatch):
    """The shipped catalog with h200-a at 10 nodes (and its reservation at 10)."""
    import yaml

    from tests.support.fleet import ROOT

    data = yaml.safe_load((ROOT / "include" / "fleet" / "sim.yaml").read_text())
    region = data["regions"][0]
    region["reservations"][0]["count"] = 10
    region["clusters"][0]["node_pools"][0]["nodes"] = 10
    (tmp_path / "sim.yaml").write_text(yaml.safe_dump(data))
    monkeypatch.setenv("GPUFLEET_CATALOG_DIR", str(tmp_path))
    return tmp_path


def test_the_repair_budget_repairs_one_node_at_a_time(ten_node_pool):
    bad = [f"{CLUSTER}-h200-a-2", f"{CLUSTER}-h200-a-7"]
    for node in bad:
        SimState().inject(CLUSTER, "h200-a", f"bad-node:{node}:nic")
    night("h200-a", 1)
    assert [state(n) for n in bad] == ["quarantined", "quarantined"]
    second = night("h200-a", 2)
    assert len(second["remediation"].repairs_started) == 1  # budget: max(1, 10% of 10) = 1
    waiting = next(n for n in bad if n not in second["remediation"].repairs_started)
    assert state(waiting) == NodeState.DRAINED
    assert any("repair budget" in note for note in second["remediation"].notes)
    third = night("h200-a", 3)
    assert third["remediation"].repairs_started == [waiting]


@pytest.mark.slow
def test_the_nightly_dag_retests_and_releases(airflow_db, fleet_state):
    from tests.support.fleet import run_dag, task_states

    bad = f"{CLUSTER}-h200-a-3"
    scope = {"pools": [f"{CLUSTER}/h200-a"], "mode": "fabric"}
    # the nightly's validation, in the sim drill that injects the fault for its run alone
    first = run_dag(
        "sim_fault_drill", {**scope, "sim_faults": [f"{CLUSTER}/h200-a=bad-node:{bad}:nic"]}
    )
    states = task_states(first)
    # quarantined, not yet drained: the remediation step has nothing to do, none is mapped
    assert states["remediation_targets"] == "success" and states["remediate_nodes"] == "skipped"
    assert state(bad) == NodeState.QUARANTINED
    second = run_dag("nightly_fabric_validation", scope)  # the drill's fault went with it
    assert str(second.state) == "success", task_states(second)
    assert state(bad) == NodeState.RELEASED and len(free("h200-a")) == 6


def test_a_suspect_from_a_launch_is_retested_first_and_released(fleet_state):
    from gpufleet.services.nodes.lifecycle import NodeLifecycle

    node = f"{CLUSTER}-h200-a-1"
    ref = load_catalog().pool(CLUSTER, "h200-a")
    NodeLifecycle(ref, Ledger()).suspect(node, "ran a job on sockets", {"launch_id": 1}, "r0")
    assert state(node) == NodeState.SUSPECT
    summary = night("h200-a", 1)["summary"]
    assert summary["passed"]
    moves = [e["to_state"] for e in Ledger().node_history(CLUSTER, node)]
    assert moves == ["suspect", "retesting", "released"]
    retest = Ledger().node_history(CLUSTER, node)[-1]["evidence"]["pairs"]
    assert retest and all(node in (p["node_a"], p["node_b"]) for p in retest)
