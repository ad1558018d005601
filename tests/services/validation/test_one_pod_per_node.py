"""One pod per node for the night's checks (issue 35): each node's GPU health check and one
pair's storage pool check run as steps in pass 1's pair pods, before the pair's NCCL test, so a
pool's night is one round (one wait), and each row still costs what its own work held. On the
simulated fleet through the real services.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpufleet.backends import cluster_backend
from gpufleet.backends.sim.state import SimState
from gpufleet.config.catalog import load_catalog
from gpufleet.domain.health.tiers import weekly_day
from gpufleet.domain.workloads import workload_selector
from gpufleet.services.common.collect import gpu_seconds
from gpufleet.services.validation.fabric import FabricValidation
from gpufleet.services.validation.full_test import (
    claim_full_test,
    pool_check_duty,
    pool_check_reason,
)
from gpufleet.services.validation.storage import StorageValidation
from gpufleet.store import Ledger
from tests.support.fleet import _wait, frozen_sim_clock, validate

pytestmark = pytest.mark.usefixtures("level1_every_night")

CLUSTER, POOL, OTHER = "a3u-sim", "h200-a", "h200-b"  # two pools on one filesystem
GPUS = 8


def alive(dag_id: str, run_id: str) -> bool:
    return True


def ref(pool: str = POOL):
    return load_catalog().pool(CLUSTER, pool)


def fabric(pool: str, pool_check: bool = True, host: str | None = None) -> FabricValidation:
    """``host``: another pool hosting the filesystem's full test tonight (the nightly's
    ``full_test_host``), as the operator asks for a pool that does not host it."""
    r, book = ref(pool), Ledger()
    duty = (lambda rid: pool_check_duty(book, r, "nightly", rid, alive)) if pool_check else None
    if pool_check and host is not None:
        duty = lambda rid: pool_check_reason(book, r, host)  # noqa: E731
    return FabricValidation(r, book, pool_check=duty)


def storage_task(pool: str) -> StorageValidation:
    r, book = ref(pool), Ledger()
    return StorageValidation(
        r,
        book,
        claim=lambda rid: claim_full_test(book, r, "nightly", rid, alive),
        pool_check_in_fabric=True,
    )


def occupy(nodes: int) -> None:
    """A training job on ``nodes`` of the pool's nodes: they are busy tonight."""
    from gpufleet.manifests.training import TrainingJobSpec, render_training_job

    r = ref()
    spec = TrainingJobSpec(
        name="busy-job",
        namespace="ml",
        image="example/train:1",
        command=["torchrun", "t.py"],
        nodes=nodes,
        gpus_per_node=GPUS,
    )
    cluster_backend(r.cluster).apply(render_training_job(r, spec))


def night(svc: FabricValidation, run_id: str) -> tuple[dict, int, float]:
    """Drive a validation as its operator does: (the summary, how many rounds it waited for,
    the GPU-seconds its rounds' pods held, read from the cluster before each round's read)."""
    state = svc.begin(run_id)
    rounds, held = 0, 0.0
    while state.workload is not None:
        wl = state.workload
        _wait(svc.backend, wl)
        rounds += 1
        pods = svc.backend.list_pods(wl.namespace, workload_selector(wl.kind, wl.name))
        held += gpu_seconds(pods, GPUS)
        state = svc.collect(state)
    return svc.finish(state).to_dict(), rounds, held


def row(pool: str, kind: str) -> dict:
    got = Ledger().latest_validation(CLUSTER, pool, kind)
    assert got is not None
    return got


def run_full_test_elsewhere(run_id: str) -> None:
    """The filesystem's full test, run tonight by the other pool's storage task."""
    sto = storage_task(OTHER)
    st = sto.begin(run_id)
    assert st.workload is not None and st.scope == "filesystem"
    _wait(sto.backend, st.workload)
    assert sto.finish(st).passed


def test_a_pools_night_is_one_round_and_each_row_costs_its_own_work(fleet_state):
    run_full_test_elsewhere("night-1")
    summary, rounds, held = night(fabric(POOL), "night-1")
    assert summary["passed"] and rounds == 1  # health, pairs and Lustre: one wait
    health, pairs, lustre = row(POOL, "health"), row(POOL, "fabric"), row(POOL, "storage")
    assert health["run_id"] == pairs["run_id"] == lustre["run_id"] == "night-1"
    assert health["passed"] and health["nodes_tested"] == 6
    assert {c["level"] for c in health["details"]["nodes"].values()} == {1}
    # the pool check: two clients of pass 1's first pair, its own clients' share of the tier
    assert lustre["passed"] and lustre["details"]["scope"] == "pool"
    assert lustre["details"]["clients"] == 2 and lustre["nodes_tested"] == 2
    assert "full throughput test ran" in lustre["reasons"][-1]
    assert set(lustre["details"]["stages"]["nodes"]) <= set(pairs["details"]["passed_nodes"])
    # each step's GPU time is its row's, the pairs' what is left: together what the pods held
    total = sum(r["details"]["gpu_minutes"] for r in (health, pairs, lustre))
    assert total == pytest.approx(held / 60, abs=0.05)
    assert "io" not in pairs["details"]["stages"]["gpu_minutes"]
    assert "diag_r1" not in pairs["details"]["stages"]["gpu_minutes"]
    assert set(lustre["details"]["stages"]["gpu_minutes"]) == {"io"}
    assert set(health["details"]["stages"]["gpu_minutes"]) == {"diag_r1"}


def test_the_storage_task_leaves_the_pool_check_to_the_fabrics_pods(fleet_state):
    run_full_test_elsewhere("night-1")
    sto = storage_task(POOL)
    state = sto.begin("night-1")
    assert state.workload is None and "fabric validation's pods" in (state.skipped or "")
    summary = sto.finish(state)
    assert summary.skipped and summary.passed
    rows = Ledger().validation_history(CLUSTER, POOL, "storage")
    assert rows == []  # nothing recorded: the fabric's pods record the pool's check


def test_the_pool_whose_storage_task_runs_the_full_test_runs_no_pool_check(fleet_state):
    """The first pool to claim the filesystem's full test tonight: its fabric validation
    leaves fio to its storage task (the same run and pool hold the claim), which runs the full
    test; one storage row, the full test's."""
    summary, rounds, _ = night(fabric(POOL), "night-1")
    assert summary["passed"] and rounds == 1
    assert Ledger().validation_history(CLUSTER, POOL, "storage") == []
    sto = storage_task(POOL)
    st = sto.begin("night-1")
    assert st.scope == "filesystem" and st.workload is not None
    _wait(sto.backend, st.workload)
    assert sto.finish(st).passed
    history = Ledger().validation_history(CLUSTER, POOL, "storage")
    assert [r["details"]["scope"] for r in history] == ["filesystem"]
    # and a fabric retried after its storage task ran the full test runs no pool check
    assert pool_check_duty(Ledger(), ref(POOL), "nightly", "night-1", alive) is None


def test_a_pool_that_does_not_host_the_full_test_checks_its_own_clients_and_never_takes_it(
    fleet_state,
):
    """The nightly maps one storage task per filesystem, the host's (here h200-b's). Another
    pool's fabric validation that begins first finds no full test standing and no one holding
    it: it checks its own clients and leaves the full test free, which the host's storage task
    then runs. Were it to take the full test, no storage task of its pool would run it."""
    summary, rounds, _ = night(fabric(POOL, host=OTHER), "night-1")
    assert summary["passed"] and rounds == 1
    own = row(POOL, "storage")
    assert own["details"]["scope"] == "pool" and own["passed"]
    assert "full throughput test is a3u-sim/h200-b's tonight" in own["reasons"][-1]
    run_full_test_elsewhere("night-1")  # the host's storage task: the full test is its own
    full = row(OTHER, "storage")
    assert full["details"]["scope"] == "filesystem" and full["run_id"] == "night-1"
    # the next night (within the test's 20 hours) the same pool names the full test standing
    assert "full throughput test ran at" in pool_check_reason(Ledger(), ref(POOL), OTHER)


def test_slow_lustre_fails_the_pool_check_not_the_pairs(fleet_state):
    run_full_test_elsewhere("night-1")
    SimState().inject(CLUSTER, POOL, "lustre-slow:0.3")
    summary, rounds, _ = night(fabric(POOL), "night-1")
    assert summary["passed"] and summary["quarantined"] == [] and rounds == 1
    lustre = row(POOL, "storage")
    assert not lustre["passed"] and lustre["details"]["scope"] == "pool"


def test_a_node_failing_its_check_in_its_pair_leaves_its_partner_in_service(fleet_state):
    bad = f"{CLUSTER}-{POOL}-2"
    SimState().inject(CLUSTER, POOL, f"xid:{bad}:79")
    summary, rounds, _ = night(fabric(POOL, pool_check=False), "night-1")
    assert summary["quarantined"] == [bad] and rounds == 1
    assert row(POOL, "health")["details"]["nodes"][bad]["action"] == "reboot"
    pairs = row(POOL, "fabric")
    partner = next(
        p["node_b"] if p["node_a"] == bad else p["node_a"]
        for p in Ledger().pairs(pairs["id"])
        if bad in (p["node_a"], p["node_b"])
    )
    assert partner in pairs["details"]["passed_nodes"]


def test_an_odd_node_is_checked_in_its_localization_pair(fleet_state):
    """Five idle nodes: pass 1 pairs four; the fifth is paired with a known-good node in the
    next round, and its check runs in that round's pod (its partner, checked already, keeps
    its first check and runs the same step)."""
    occupy(1)
    summary, rounds, held = night(fabric(POOL, pool_check=False), "night-1")
    assert summary["passed"] and rounds == 2
    health = row(POOL, "health")
    idle = [n for n, c in health["details"]["nodes"].items() if c["level"] > 0]
    assert len(idle) == 5 and {health["details"]["nodes"][n]["action"] for n in idle} == {"healthy"}
    assert sum(r["details"]["gpu_minutes"] for r in (health, row(POOL, "fabric"))) == pytest.approx(
        held / 60, abs=0.05
    )


def test_on_the_pools_weekly_night_every_idle_node_runs_level_3_in_one_round(fleet_state):
    clock = frozen_sim_clock()
    today = datetime.fromtimestamp(clock.time(), UTC).date()
    ahead = (weekly_day("", f"{CLUSTER}/{POOL}") - today.weekday()) % 7
    clock.advance(timedelta(days=ahead).total_seconds())
    summary, rounds, _ = night(fabric(POOL, pool_check=False), "night-weekly")
    assert summary["passed"] and rounds == 1
    health = row(POOL, "health")
    assert {c["level"] for c in health["details"]["nodes"].values()} == {3}
    assert health["details"]["weekly_gpu_minutes"] > 0


def test_a_retested_node_has_its_health_round_before_the_pairs(fleet_state):
    """A node out of service is retested at level 2 against known-good partners: its check
    runs as a round of its own first (a level-2 check beside a partner's level 1 would hold
    the partner), as before."""
    bad = f"{CLUSTER}-{POOL}-2"
    SimState().inject(CLUSTER, POOL, f"xid:{bad}:79")
    validate(CLUSTER, POOL, run_id="night-1", storage=False)
    state = fabric(POOL, pool_check=False).begin("night-2")
    assert state.phase == "health" and not state.gang
    assert state.health_levels[bad] >= 2


def test_a_node_failing_its_check_and_its_pair_leaves_only_its_partner_to_localize(fleet_state):
    """The node's check failed in its pair's pod and so did the pair: the node is judged by
    its check (never paired again tonight), its partner is a suspect retested against a known
    good node, and released from suspicion when that passes."""
    bad = f"{CLUSTER}-{POOL}-2"
    SimState().inject(CLUSTER, POOL, f"xid:{bad}:79")
    SimState().inject(CLUSTER, POOL, f"bad-node:{bad}:nic")
    summary, rounds, _ = night(fabric(POOL, pool_check=False), "night-1")
    assert summary["quarantined"] == [bad] and rounds == 2
    pairs = Ledger().pairs(row(POOL, "fabric")["id"])
    first = next(p for p in pairs if p["pass_no"] == 1 and bad in (p["node_a"], p["node_b"]))
    assert not first["passed"]
    partner = first["node_b"] if first["node_a"] == bad else first["node_a"]
    retests = [p for p in pairs if p["pass_no"] == 2]
    assert retests and all(bad not in (p["node_a"], p["node_b"]) for p in retests)
    assert any(partner in (p["node_a"], p["node_b"]) and p["passed"] for p in retests)
    assert partner in row(POOL, "fabric")["details"]["passed_nodes"]


def test_a_node_never_paired_tonight_has_a_check_that_could_not_run(fleet_state):
    """Three idle nodes and a fabric down: pass 1's pair fails, so no node is known good and
    the odd one is never paired. Its check was to run in its pair's pod: it could not run
    (never taken for healthy), and says why."""
    occupy(3)
    SimState().inject(CLUSTER, POOL, "fabric-down")
    night(fabric(POOL, pool_check=False), "night-1")
    nodes = row(POOL, "health")["details"]["nodes"]
    active = {n: c for n, c in nodes.items() if c["level"] > 0 or c["action"] == "could_not_run"}
    assert len(active) == 3
    unpaired = [n for n, c in active.items() if c["action"] == "could_not_run"]
    assert len(unpaired) == 1
    assert "not paired tonight" in nodes[unpaired[0]]["reasons"][0]


def test_a_pool_check_recorded_after_the_full_test_does_not_hide_it(fleet_state):
    """The pool whose storage task ran the filesystem's full test records its own pool check
    later (its next run's fabric pods): the full test still stands for the filesystem, so no
    storage task runs it again within the night."""
    run_full_test_elsewhere("night-1")
    night(fabric(OTHER), "night-2")  # its pool check: now its newest storage row
    assert row(OTHER, "storage")["details"]["scope"] == "pool"
    for pool in (OTHER, POOL):
        state = storage_task(pool).begin("night-2")
        assert state.workload is None, pool  # the full test stands: nothing to run
