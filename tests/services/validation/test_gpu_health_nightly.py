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

from gpufleet.backends.sim.run_times import COLD_PULL_S, DIAG_S, HEALTH_TOOLS_S
from gpufleet.backends.sim.state import SimState
from gpufleet.config.catalog import load_catalog
from gpufleet.domain.health.tiers import WEEKLY_LEVEL, diag_level
from gpufleet.domain.nodes import NodeState
from gpufleet.services.validation.fabric import FabricValidation
from gpufleet.store import Ledger
from tests.support.fleet import frozen_sim_clock, lifecycle_night, validate

# the health check itself: every idle node checked each night (the rotation: its own tests)
pytestmark = pytest.mark.usefixtures("level1_every_night")

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
    """One pod per node: each node's check runs in its pair's pod before the pair's test, at
    the level the pool's night gives it (its weekly level 3 on the pool's weekly night), and
    costs the GPU time of its step: the pod's launch is the pair's (the fabric row's)."""
    night = datetime.fromtimestamp(frozen_sim_clock().time(), UTC).date()
    summary = validate(CLUSTER, POOL, run_id="night-1", storage=False)
    assert summary["passed"] and summary["quarantined"] == []
    row = health_row("night-1")
    assert row["passed"] and row["reasons"] == [] and row["nodes_tested"] == 6
    levels = {n: diag_level(n, night, retest=False, pool=f"{CLUSTER}/{POOL}") for n in NODES}
    assert len(set(levels.values())) == 1  # the pool's nodes share their weekly night
    nodes = row["details"]["nodes"]
    assert {n: c["level"] for n, c in nodes.items()} == levels
    assert {c["action"] for c in nodes.values()} == {"healthy"}
    (level,) = set(levels.values())
    step = (HEALTH_TOOLS_S + DIAG_S[level]) * GPUS / 60  # the tools, then dcgmi diag -r level
    if level < WEEKLY_LEVEL:
        assert row["details"]["cost_nodes"] == 6
        assert row["details"]["gpu_minutes"] == pytest.approx(step * 6, abs=0.01)
    else:
        assert row["details"]["weekly_gpu_minutes"] == pytest.approx(step * 6, abs=0.01)
    for node in NODES:  # each level's duration is its own stage, and only the step's
        assert nodes[node]["stages"] == {f"diag_r{level}": HEALTH_TOOLS_S + DIAG_S[level]}
    stages = row["details"]["stages"]["gpu_minutes"]  # where the night's tier went
    assert sum(stages.values()) == pytest.approx(row["details"]["gpu_minutes"], abs=0.01)
    assert paired("night-1") == set(NODES)  # every healthy node still in a pair
    # the pair pods' launch is the fabric row's: the DCGM image pulled beside nccl-tests' and
    # the log sidecar's (each once per node, cold)
    fabric = Ledger().latest_validation(CLUSTER, POOL, "fabric")["details"]["stages"]
    pulled = COLD_PULL_S["nccl"] + COLD_PULL_S["dcgm"] + COLD_PULL_S["small"]
    assert fabric["gpu_minutes"]["image_pull"] == pytest.approx(pulled * GPUS * 6 / 60, abs=0.01)
    assert f"diag_r{level}" not in fabric["gpu_minutes"]  # counted once: in the health row


def test_without_the_check_no_health_row_is_written(fleet_state):
    svc = FabricValidation(load_catalog().pool(CLUSTER, POOL), Ledger(), gpu_health=False)
    assert svc.begin("night-1").phase == "fabric"
    assert Ledger().latest_validation(CLUSTER, POOL, "health") is None


def test_an_xid_79_node_is_quarantined_rebooted_and_released(fleet_state):
    """Xid 79: NVIDIA says reboot. Night 1's check, in its pair's pod, quarantines it (its
    partner is not blamed); night 2's level-2 retest still sees it, so it is drained and
    rebooted (not repaired); the reboot clears this boot's Xid, and night 3's retest releases
    it."""
    SimState().inject(CLUSTER, POOL, f"xid:{BAD}:79")
    first = lifecycle_night(CLUSTER, POOL, 1)
    assert first["summary"]["passed"] and first["summary"]["quarantined"] == [BAD]
    assert BAD in paired("night-1")  # checked in its pair's pod: its partner stays in service
    assert [n for n in NODES if state(n) == NodeState.QUARANTINED] == [BAD]
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
    burn-in either. Issue 31: only a ``pass`` verdict whose DCGM run shows the level-4 tests
    ran (``burn_in``) counts: a degraded one, one whose level-4 tests were skipped, and a row
    from before issue 31 (it does not say) are owed again."""
    from gpufleet.services.validation.health import burned_in

    ledger, now = Ledger(), datetime.now(UTC)
    ok = {"level": 4, "action": "healthy", "verdict": "pass", "burn_in": True}
    nodes = {
        "ok": ok,
        "faulty": {**ok, "action": "reboot", "verdict": "fail", "burn_in": False},
        "not-run": {"level": 4, "action": None},
        "could-not-run": {**ok, "action": "could_not_run", "verdict": "could_not_run"},
        "degraded": {**ok, "verdict": "degraded"},
        "skipped": {**ok, "burn_in": False},
        "before-issue-31": {"level": 4, "action": "healthy"},
        "weekly": {**ok, "level": 3},
        "odd": {**ok, "level": True},
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


# --- issue 31: a check that could not run is neither a pass nor a failure ----------------------


def _health_rounds(run_id: str, ref=None) -> tuple[list[tuple[float, list[str]]], object]:
    """Run one night's validation through the services as the operator does, waiting on the
    sim's clock for each GPU health recheck; each health round's (submission time, nodes)."""
    from gpufleet.services.nodes.drain import backend_clock
    from tests.support.fleet import _until, _wait

    svc = FabricValidation(ref or load_catalog().pool(CLUSTER, POOL), Ledger())
    clock = backend_clock(svc.backend)
    st = svc.begin(run_id)
    rounds = [(clock.time(), list(st.workload.nodes))]
    while st.workload or st.health_recheck_at is not None:
        if st.workload is None:
            _until(svc.backend, st.health_recheck_at)
            st = svc.recheck(st)
        else:
            _wait(svc.backend, st.workload)
            st = svc.collect(st)
        if st.workload is not None and st.phase == "health":
            rounds.append((clock.time(), list(st.workload.nodes)))
    return rounds, svc.finish(st)


def test_a_node_dcgm_finds_in_use_is_checked_again_every_10_s_and_passes_once_free(fleet_state):
    """DCGM_ST_IN_USE: the node alone is checked again, 10 s or more after its latest try, and
    its check passes once DCGM is free (an injected fault holds the GPUs 120 s)."""
    from gpufleet.domain.faults import IN_USE_HOLD_S

    SimState().inject(CLUSTER, POOL, f"dcgm-in-use:{BAD}")
    rounds, summary = _health_rounds("night-1")
    assert rounds[-1][0] - rounds[0][0] >= IN_USE_HOLD_S  # tried until DCGM was free
    assert summary.passed and summary.quarantined == []
    assert len(rounds) >= 3 and all(nodes == [BAD] for _, nodes in rounds[1:])
    starts = [t for t, _ in rounds]
    assert all(b - a >= 10 for a, b in zip(starts, starts[1:], strict=False))
    check = health_row("night-1")["details"]["nodes"][BAD]
    assert (check["action"], check["verdict"]) == ("healthy", "pass")
    assert BAD in paired("night-1")


def test_a_node_dcgm_keeps_in_use_stays_could_not_run_after_300_s_untouched(
    fleet_state, monkeypatch
):
    """In use for good: checked again within 300 s of its first try, then could_not_run with
    DCGM's reason; never quarantined, never a failure; the gate leaves it out until a check
    runs, with why."""
    from gpufleet.domain.gate import read_health
    from gpufleet.domain.health.retry import GAVE_UP

    monkeypatch.setattr("gpufleet.backends.sim.faults.IN_USE_HOLD_S", 86_400.0)  # for good
    SimState().inject(CLUSTER, POOL, f"dcgm-in-use:{BAD}")
    rounds, summary = _health_rounds("night-1")
    starts = [t for t, _ in rounds]
    assert all(b - a >= 10 for a, b in zip(starts, starts[1:], strict=False))
    assert 290 < starts[-1] - starts[0] <= 300  # the last try within 300 s of the first
    assert summary.passed and summary.quarantined == [] and state(BAD) is None
    row = health_row("night-1")
    check = row["details"]["nodes"][BAD]
    assert (check["action"], check["verdict"]) == ("could_not_run", "could_not_run")
    assert check["reasons"] == [GAVE_UP] == ["DCGM said the GPUs were in use for 300 s"]
    assert check["codes"] == ["DCGM_ST_IN_USE"]
    assert row["passed"] and row["details"]["could_not_run"] == [BAD]
    assert f"{BAD}: could not run: {GAVE_UP}" in row["reasons"]
    fact = read_health(row, "health")
    assert fact.failed == {} and fact.could_not_run == {BAD: GAVE_UP}


@pytest.mark.parametrize("fault", ["dcgm-hang", "dcgm-skip-all", "dcgm-internal-error"])
def test_a_check_that_could_not_run_is_never_quarantined_drained_or_repaired(fleet_state, fault):
    """A DCGM that hangs past the level's limit, skips every test or fails on its own internal
    error: the node's check could not run, night after night; nothing is done to it (no
    quarantine, no retest, no drain, no repair), it is not checked again within the night
    (only DCGM_ST_IN_USE is), and a level-4 run of it is no burn-in."""
    SimState().inject(CLUSTER, POOL, f"{fault}:{BAD}")
    for night in (1, 2):
        result = lifecycle_night(CLUSTER, POOL, night)
        assert result["summary"]["quarantined"] == []
        assert result["remediation"].repairs_started == []
        check = health_row(f"night-{night}")["details"]["nodes"][BAD]
        assert check["verdict"] == "could_not_run" and check["burn_in"] is False
    assert state(BAD) is None and Ledger().node_history(CLUSTER, BAD) == []


def test_a_new_node_whose_check_could_not_run_is_not_released(fleet_state):
    """A new node (tainted unvalidated) whose pairs pass but whose GPU health check could not
    run stays new; a new node whose check passed is released beside it."""
    from gpufleet.backends import cluster_backend
    from gpufleet.backends.base import Taint
    from gpufleet.domain.workloads import UNVALIDATED_KEY

    kube = cluster_backend(load_catalog().pool(CLUSTER, POOL).cluster)
    for name in (NODES[0], BAD):
        kube.add_taint(name, Taint(UNVALIDATED_KEY, "true", "NoSchedule"))
    SimState().inject(CLUSTER, POOL, f"dcgm-hang:{BAD}")
    summary = validate(CLUSTER, POOL, run_id="night-1")
    assert summary["passed"] and BAD in paired("night-1")
    assert {n.name for n in kube.list_nodes(POOL) if n.unvalidated} == {BAD}
    assert health_row("night-1")["details"]["nodes"][BAD]["verdict"] == "could_not_run"


def test_the_operator_waits_between_rechecks_on_the_triggerers_clock(airflow_db, fleet_state):
    """Through the real operator and triggers: a recheck not due yet defers on a WaitTrigger
    (``execute_recheck``, the state carried), the wait passes on the triggers' clock (the sim's
    in tests), and the round goes on to its verdict."""
    import asyncio

    from airflow.sdk.exceptions import TaskDeferred
    from airflow.sdk.execution_time.context import OutletEventAccessors

    from gpufleet.airflow.operators import FabricValidationOperator

    SimState().inject(CLUSTER, POOL, f"dcgm-in-use:{BAD}")
    op = FabricValidationOperator(task_id="validate_fabric", cluster=CLUSTER, node_pool=POOL)
    ctx = {"run_id": "night-1", "outlet_events": OutletEventAccessors()}

    async def first(trigger):
        events = trigger.run()
        try:
            return (await anext(events)).payload
        finally:
            await events.aclose()

    methods = []
    call = lambda: op.execute(ctx)  # noqa: E731
    for _ in range(200):
        try:
            result = call()
            break
        except TaskDeferred as deferred:
            methods.append(deferred.method_name)
            event = asyncio.run(asyncio.wait_for(first(deferred.trigger), 60))
            method, kwargs = getattr(op, deferred.method_name), deferred.kwargs or {}
            call = lambda m=method, e=event, k=kwargs: m(ctx, event=e, **k)  # noqa: E731
    else:
        pytest.fail("the validation never finished")
    assert result["passed"]
    assert "execute_recheck" in methods  # waited for a recheck at least once
    check = health_row("night-1")["details"]["nodes"][BAD]
    assert check["verdict"] == "pass"  # DCGM was free again within the bound


def test_a_pod_never_placed_past_its_deadline_or_printing_no_check_could_not_run():
    """The check's pods as the API server reports them: never placed, failed past its deadline,
    or printing something that is no health check's output: each could_not_run, with why;
    none a failure (nothing is done to the node on its account)."""
    from gpufleet.backends.base import PodInfo
    from gpufleet.services.common.collect import Workload
    from gpufleet.services.validation.health import GpuHealthCheck

    class Cluster:
        def list_pods(self, namespace, selector):
            return [
                PodInfo("p1", NODES[1], "Failed", message="Job was active longer than deadline"),
                PodInfo("p2", NODES[2], "Succeeded"),
            ]

        def pod_logs(self, name, namespace, container):
            return "exec /bin/bash: exec format error\n"

        def delete(self, kind, name, namespace):
            pass

    check = GpuHealthCheck(load_catalog().pool(CLUSTER, POOL), Cluster(), namespace="v")
    wl = Workload(kind="JobSet", name="h", namespace="v", nodes=NODES[:3])
    got = check.collect(wl, {n: 1 for n in NODES[:3]})
    assert {n: (h.action, h.verdict) for n, h in got.items()} == {
        n: ("could_not_run", "could_not_run") for n in NODES[:3]
    }
    assert got[NODES[0]].reason == "its pod was never placed"
    assert got[NODES[1]].reason == "its pod is Failed (Job was active longer than deadline)"
    assert got[NODES[2]].reason.startswith("the output is not a health check's")
    assert not any(h.failed for h in got.values()) and all(h.could_not_run for h in got.values())


def test_the_round_caps_levels_at_the_models_highest_and_waits_its_deadline():
    """A B200's dcgmi diag -r 2 hangs (NVIDIA/DCGM#247): its retest runs level 1, and a model
    whose timeouts are longer than the defaults waits for the longer Job deadline."""
    from datetime import date

    from gpufleet.domain.health.tiers import DcgmLimits, default_limits
    from gpufleet.manifests.gpu_health import DEADLINE_SECONDS
    from gpufleet.services.validation.fabric_state import FabricState
    from gpufleet.services.validation.health import health_deadline, plan_levels

    night = date(2026, 12, 7)
    b200 = default_limits("B200")
    levels = plan_levels(["idle-0"], ["out-0"], night, limits=b200)
    assert set(levels.values()) == {1}
    assert plan_levels(["idle-0"], ["out-0"], night)["out-0"] >= 2  # no cap without limits
    slow = DcgmLimits("H200", timeouts_s={1: 120, 2: 5000, 3: 2700, 4: 9000})
    deadline = health_deadline({"out-0": 2}, slow)
    assert deadline > DEADLINE_SECONDS[2]
    state = FabricState(
        cluster="c",
        pool="p",
        run_id="r",
        started_at="2026-12-07T02:00:00+00:00",
        pool_nodes=2,
        idle=[],
        busy=[],
        quarantined_before=["out-0"],
        odd=[],
        phase="health",
        health_levels={"out-0": 2},
    )
    state.health_deadline_s = deadline
    assert state.min_timeout_s() == deadline + 600.0
