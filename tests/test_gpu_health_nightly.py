"""The GPU health check in the nightly (issue 20): the round before the fabric pairs, on the
simulated fleet through the real services, night after night with the node lifecycle.

A node whose check calls for an action is left out of the pairs and quarantined with NVIDIA's
action in its reason; the next night retests it at level 2, and a check that still fails sends
it where NVIDIA says: a reboot for a GPU reset or a reboot, the cloud's repair for hardware, a
person for what only a person settles. A healthy pool's check passes and costs what its pods
held, level by level; a check passes, as a fabric verdict does, when every node that failed it
was taken out of service.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpufleet.backends.sim.clock import DIAG_S, HEALTH_TOOLS_S
from gpufleet.backends.sim.state import SimState
from gpufleet.config.catalog import load_catalog
from gpufleet.domain.health.tiers import WEEKLY_LEVEL, diag_level
from gpufleet.domain.nodes import NodeState
from gpufleet.services.validation.fabric import FabricValidation
from gpufleet.store import Ledger
from tests.support.fleet import frozen_sim_clock, lifecycle_night, validate

CLUSTER, POOL = "a3u-sim", "h200-a"
NODES = [f"{CLUSTER}-{POOL}-{i}" for i in range(6)]
BAD = NODES[3]
GPUS = 8


def state(node: str) -> str | None:
    row = Ledger().node_state(CLUSTER, node)
    return row["state"] if row else None


def health_row(run_id: str | None = None) -> dict:
    row = Ledger().latest_validation(CLUSTER, POOL, "health")
    assert row is not None and (run_id is None or row["run_id"] == run_id)
    return row


def paired(run_id: str) -> set[str]:
    row = Ledger().latest_validation(CLUSTER, POOL, "fabric")
    assert row["run_id"] == run_id
    return {n for p in Ledger().pairs(row["id"]) for n in (p["node_a"], p["node_b"])}


def test_a_healthy_pools_check_passes_each_node_at_its_level_and_costs_what_it_held(fleet_state):
    night = datetime.fromtimestamp(frozen_sim_clock().time(), UTC).date()
    summary = validate(CLUSTER, POOL, run_id="night-1", storage=False)
    assert summary["passed"] and summary["quarantined"] == []
    row = health_row("night-1")
    assert row["passed"] and row["reasons"] == [] and row["nodes_tested"] == 6
    levels = {n: diag_level(n, night, retest=False) for n in NODES}
    nodes = row["details"]["nodes"]
    assert {n: c["level"] for n, c in nodes.items()} == levels
    assert {c["action"] for c in nodes.values()} == {"healthy"}
    nightly = [n for n, lv in levels.items() if lv < WEEKLY_LEVEL]
    weekly = [n for n, lv in levels.items() if lv >= WEEKLY_LEVEL]
    per_node = (HEALTH_TOOLS_S + DIAG_S[1]) * GPUS / 60
    assert row["details"]["cost_nodes"] == len(nightly)
    assert row["details"]["gpu_minutes"] == pytest.approx(per_node * len(nightly), abs=0.01)
    weekly_minutes = (HEALTH_TOOLS_S + DIAG_S[WEEKLY_LEVEL]) * GPUS / 60 * len(weekly)
    assert row["details"]["weekly_gpu_minutes"] == pytest.approx(weekly_minutes, abs=0.01)
    assert paired("night-1") == set(NODES)  # every healthy node still in a pair


def test_without_the_check_no_health_row_is_written(fleet_state):
    svc = FabricValidation(load_catalog().pool(CLUSTER, POOL), Ledger(), gpu_health=False)
    assert svc.begin("night-1").phase == "fabric"
    assert Ledger().latest_validation(CLUSTER, POOL, "health") is None


def test_an_xid_79_node_is_quarantined_rebooted_and_released(fleet_state):
    """Xid 79: NVIDIA says reboot. Night 1 quarantines it out of the pairs; night 2's level-2
    retest still sees it, so it is drained and rebooted (not repaired); the reboot clears this
    boot's Xid, and night 3's retest releases it."""
    SimState().inject(CLUSTER, POOL, f"xid:{BAD}:79")
    first = lifecycle_night(CLUSTER, POOL, 1)
    assert first["summary"]["passed"] and first["summary"]["quarantined"] == [BAD]
    assert BAD not in paired("night-1")
    assert any(
        r.startswith(f"{BAD} quarantined: GPU health: reboot:") for r in first["summary"]["reasons"]
    )
    row = health_row("night-1")  # it passes as a fabric verdict does: the bad node is out
    assert row["passed"] and row["reasons"][0].startswith(f"{BAD}: reboot: ")
    assert row["details"]["nodes"][BAD]["action"] == "reboot"
    assert "Xid 79" in row["reasons"][0] and "RESTART_BM" in row["reasons"][0]
    assert state(BAD) == NodeState.QUARANTINED
    assert Ledger().node_state(CLUSTER, BAD)["evidence"]["health"]["action"] == "reboot"

    second = lifecycle_night(CLUSTER, POOL, 2)
    assert health_row("night-2")["details"]["nodes"][BAD]["level"] >= 2  # a retest: level 2+
    assert second["remediation"].repairs_started == [BAD]
    row = Ledger().node_state(CLUSTER, BAD)
    assert row["state"] == NodeState.REPAIRING and row["evidence"]["kind"] == "reboot"
    assert row["reason"].startswith("reboot requested from the cloud")
    assert "Xid 79" in row["reason"]
    assert not [f for f in SimState().faults(cluster=CLUSTER) if f.fault.node == BAD]

    lifecycle_night(CLUSTER, POOL, 3)
    assert state(BAD) == NodeState.RELEASED
    assert health_row("night-3")["passed"]
    moves = [e["to_state"] for e in Ledger().node_history(CLUSTER, BAD)]
    assert moves == [
        "quarantined",
        "retesting",
        "draining",
        "drained",
        "repairing",
        "retesting",
        "released",
    ]


def test_a_row_remap_failure_is_repaired_by_the_cloud(fleet_state):
    SimState().inject(CLUSTER, POOL, f"row-remap-failed:{BAD}")
    lifecycle_night(CLUSTER, POOL, 1)
    assert Ledger().node_state(CLUSTER, BAD)["evidence"]["health"]["action"] == "repair"
    second = lifecycle_night(CLUSTER, POOL, 2)
    assert second["remediation"].repairs_started == [BAD]
    row = Ledger().node_state(CLUSTER, BAD)
    assert row["evidence"]["kind"] == "repair" and row["reason"].startswith("repair requested")
    lifecycle_night(CLUSTER, POOL, 3)  # a healthy host now
    assert state(BAD) == NodeState.RELEASED


def test_an_xid_nvidia_sends_to_support_goes_to_a_person_without_a_repair(fleet_state):
    SimState().inject(CLUSTER, POOL, f"xid:{BAD}:61")  # CONTACT_SUPPORT
    lifecycle_night(CLUSTER, POOL, 1)
    assert state(BAD) == NodeState.QUARANTINED
    second = lifecycle_night(CLUSTER, POOL, 2)
    assert state(BAD) == NodeState.NEEDS_HUMAN
    assert second["remediation"].repairs_started == []
    assert any(BAD in page and "Xid 61" in page for page in second["remediation"].pages)
    moves = [e["to_state"] for e in Ledger().node_history(CLUSTER, BAD)]
    assert moves[:3] == ["quarantined", "retesting", "needs_human"]


def test_a_pending_row_remap_is_reset_by_a_reboot(fleet_state):
    SimState().inject(CLUSTER, POOL, f"row-remap-pending:{BAD}")
    lifecycle_night(CLUSTER, POOL, 1)
    assert Ledger().node_state(CLUSTER, BAD)["evidence"]["health"]["action"] == "reset_gpu"
    lifecycle_night(CLUSTER, POOL, 2)
    assert Ledger().node_state(CLUSTER, BAD)["evidence"]["kind"] == "reboot"
    lifecycle_night(CLUSTER, POOL, 3)
    assert state(BAD) == NodeState.RELEASED


def test_too_many_failed_checks_quarantine_nothing_and_page(fleet_state):
    """Half the pool failing its check at once is the fleet's problem (a driver, an image), not
    the nodes': the quarantine cap holds, nothing is taken out, a person is paged."""
    for node in NODES[:3]:
        SimState().inject(CLUSTER, POOL, f"xid:{node}:79")
    summary = validate(CLUSTER, POOL, run_id="night-1", storage=False)
    assert not summary["passed"] and summary["page"] and summary["quarantined"] == []
    assert "on their GPU health check (3)" in summary["reasons"][0]
    assert all(state(n) is None for n in NODES)
    row = health_row("night-1")
    assert not row["passed"] and len(row["reasons"]) == 3
    assert all(r.endswith("(left in service: the quarantine cap)") for r in row["reasons"])


def test_a_busy_nodes_fault_is_read_from_its_exporter_and_its_job_left_running(fleet_state):
    """A node running a job is neither paired nor checked with pods, but its dcgm-exporter is
    read: an Xid 79 on it quarantines it (NoSchedule: the job runs on), for the passive read's
    reason; its retest waits until the job is gone."""
    from gpufleet.backends import cluster_backend
    from gpufleet.manifests.training import TrainingJobSpec, render_training_job

    ref = load_catalog().pool(CLUSTER, POOL)
    backend = cluster_backend(ref.cluster)
    spec = TrainingJobSpec(
        name="busy-job",
        namespace="ml",
        image="example/train:1",
        command=["torchrun", "t.py"],
        nodes=2,
        gpus_per_node=GPUS,
    )
    backend.apply(render_training_job(ref, spec))
    busy = sorted(n.name for n in backend.list_nodes(POOL) if n.workloads)
    SimState().inject(CLUSTER, POOL, f"xid:{busy[0]}:79")
    summary = validate(CLUSTER, POOL, run_id="night-1", storage=False)
    assert summary["quarantined"] == [busy[0]]
    row = health_row("night-1")
    check = row["details"]["nodes"][busy[0]]
    assert (check["level"], check["action"]) == (0, "reboot")
    assert "dcgm-exporter" in check["reasons"][0]
    assert row["details"]["nodes"][busy[1]]["action"] == "healthy"
    active = [c for c in row["details"]["nodes"].values() if 0 < c["level"] < WEEKLY_LEVEL]
    assert row["details"]["cost_nodes"] == len(active)  # the passive reads hold no GPU
    assert not paired("night-1") & set(busy)
    assert sorted(n.name for n in backend.list_nodes(POOL) if n.workloads) == busy  # job runs on
    validate(CLUSTER, POOL, run_id="night-2", storage=False)
    assert state(busy[0]) == NodeState.QUARANTINED  # not retested while its job runs


def test_a_new_node_is_burnt_in_once_however_long_it_stays_new(fleet_state):
    """``burn_in: true``: a new node (tainted unvalidated) gets level 4 at its first check;
    while its pool keeps failing (Lustre slow here, so no node sheds the taint) the next nights
    check it at its usual level, not 1.75 h of level 4 on every GPU each night. A node added
    later still gets its burn-in."""
    from gpufleet.backends import cluster_backend
    from gpufleet.backends.base import Taint
    from gpufleet.domain.workloads import UNVALIDATED_KEY
    from gpufleet.services.validation.storage import StorageValidation
    from tests.support.fleet import _wait

    ref = load_catalog().pool(CLUSTER, POOL)
    ref = ref.model_copy(update={"pool": ref.pool.model_copy(update={"burn_in": True})})
    kube = cluster_backend(ref.cluster)
    for name in NODES[:-1]:  # the last node joins later
        kube.add_taint(name, Taint(UNVALIDATED_KEY, "true", "NoSchedule"))
    SimState().inject(CLUSTER, POOL, "lustre-slow:0.3")
    clock = frozen_sim_clock()

    def night(run_id: str) -> dict[str, int]:
        svc = FabricValidation(ref, Ledger())
        st = svc.begin(run_id)
        while st.workload:
            _wait(svc.backend, st.workload)
            st = svc.collect(st)
        svc.finish(st)
        sto = StorageValidation(ref, Ledger())
        storage = sto.begin(run_id)
        _wait(sto.backend, storage.workload)
        assert not sto.finish(storage).passed  # the pool fails: its new nodes stay new
        clock.advance(86_400)
        return {n: c["level"] for n, c in health_row(run_id)["details"]["nodes"].items()}

    first = night("night-1")
    assert all(first[n] == 4 for n in NODES[:-1]) and first[NODES[-1]] < 4
    kube.add_taint(NODES[-1], Taint(UNVALIDATED_KEY, "true", "NoSchedule"))
    second = night("night-2")
    assert second[NODES[-1]] == 4  # new since: its burn-in
    assert all(second[n] < 4 for n in NODES[:-1])  # burnt in last night: not again
    assert {n.name for n in kube.list_nodes(POOL) if n.unvalidated} == set(NODES)  # still new


def test_only_a_healthy_level_4_check_counts_as_a_burn_in(fleet_state):
    """A burn-in that found a fault (the node goes through its retest and repair) or could
    not run is owed again; level 3 is no burn-in; what the reader does not understand is no
    burn-in either."""
    from gpufleet.services.validation.health import burned_in

    ledger, now = Ledger(), datetime.now(UTC)
    nodes = {
        "ok": {"level": 4, "action": "healthy"},
        "faulty": {"level": 4, "action": "reboot"},
        "not-run": {"level": 4, "action": None},
        "weekly": {"level": 3, "action": "healthy"},
        "odd": {"level": True, "action": "healthy"},
        "junk": "healthy",
    }
    ledger.record_validation(
        run_id="n1", cluster=CLUSTER, pool=POOL, kind="health", passed=True, started_at=now,
        finished_at=now, details={"nodes": nodes},
    )  # fmt: skip
    ledger.record_validation(
        run_id="n2", cluster=CLUSTER, pool=POOL, kind="health", passed=True, started_at=now,
        finished_at=now, details={"nodes": "not a mapping"},
    )  # fmt: skip
    assert burned_in(ledger, CLUSTER, POOL) == {"ok"}
    assert burned_in(ledger, CLUSTER, "other-pool") == set()
