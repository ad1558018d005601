"""reservation_transition end to end with dag.test() on the simulated fleet.

The catalog declares ``a3u-sim/h200-c`` (``state: planned``, reservation ``res-a3u-c``): the
transitions here move ``h200-b``'s work to it.
"""

from __future__ import annotations

import pytest

from gpufleet.airflow.assets import POOL_RETIRED
from gpufleet.backends import cloud_backend, cluster_backend
from gpufleet.backends.base import ResourceStatus
from gpufleet.backends.sim.state import SimState
from gpufleet.config.catalog import load_catalog
from gpufleet.domain.transition import FORWARD
from gpufleet.manifests.training import TrainingJobSpec, render_training_job
from gpufleet.services.launch.gate import check_gate
from gpufleet.store import Ledger
from tests.support.fleet import asset_events, run_dag, task_states
from tests.support.hitl import Answer, TimeOut

pytestmark = [pytest.mark.slow]

DAG = "reservation_transition"
CLUSTER, OLD, NEW = "a3u-sim", "h200-b", "h200-c"


@pytest.fixture
def fleet(airflow_db, fleet_state):
    return fleet_state


@pytest.fixture(scope="module")
def drain_failed(airflow_db, tmp_path_factory):
    """One transition whose drain failed on a training job still running (``on_timeout=fail``
    at a zero timeout), on a fresh fleet of its own (the sim's clock frozen, triggers on it, as
    ``fleet`` gives a test): its state folder (the sim fleet and the SQLite ledger, the lock
    still held at old_pool_cordoned) and the run. Each test that goes on from there takes a copy
    (``after_the_failed_drain``): the first run is the same for all of them."""
    from gpufleet.airflow.triggers import PollingTrigger
    from tests.support.fleet import SimTriggerClock, frozen_sim_clock

    mp = pytest.MonkeyPatch()
    try:
        state = tmp_path_factory.mktemp("drain-failed") / "gpufleet"
        mp.setenv("GPUFLEET_STATE_DIR", str(state))
        mp.setattr(PollingTrigger, "clock", SimTriggerClock())
        frozen_sim_clock()
        start_job(OLD, RUNNING_JOB)
        first, states = transition(drain_timeout_hours=0, on_timeout="fail")
        yield state, first, states
    finally:
        mp.undo()


@pytest.fixture
def after_the_failed_drain(drain_failed, fleet):
    """This test's fleet as the shared failed drain left it; the first run and its states."""
    template, first, states = drain_failed
    copy_state(template, fleet)
    return first, states


def copy_state(source, dest) -> None:
    """The gpufleet state folder ``source`` into ``dest``: its SQLite files (the sim fleet,
    the ledger; in WAL mode) through SQLite's backup, so what is still in a WAL comes along,
    and whatever else as files."""
    import shutil
    import sqlite3

    dest.mkdir(parents=True, exist_ok=True)
    for path in source.iterdir():
        if path.name.endswith(("-wal", "-shm", "-journal")):
            continue
        if path.suffix == ".db":
            src, dst = sqlite3.connect(path), sqlite3.connect(dest / path.name)
            try:
                src.backup(dst)
            finally:
                src.close()
                dst.close()
        elif path.is_dir():
            shutil.copytree(path, dest / path.name, dirs_exist_ok=True)
        else:
            shutil.copy2(path, dest / path.name)


def transition(on_idle=None, **conf):
    """One run; its retire's approval answered by ``on_idle`` (default: alice approves)."""
    dr = run_dag(
        DAG,
        {"cluster": CLUSTER, "old_pool": OLD, "new_pool": NEW, "soak_minutes": 0.01, **conf},
        on_idle=on_idle or Answer("Approve", "alice"),
    )
    return dr, task_states(dr)


JOB_S = 12.0
RUNNING_JOB = "running-job"  # still running when the shared failed drain times out


def start_job(pool: str, name: str, run_s: float = JOB_S) -> None:
    """A 2-node training job on ``pool``, running ``run_s`` seconds of the sim's (frozen) clock:
    long enough to still run when the transition drains the pool (about 6 s in: the happy path
    checks its drain started before the job's end, the failing drains fail on it), short enough
    that the drain's 0.5 s polls wait for it in a dozen or so steps."""
    from gpufleet.backends.sim.programs import RUN_SECONDS_ANNOTATION
    from gpufleet.domain.workloads import workload_pod_templates

    ref = load_catalog().pool(CLUSTER, pool)
    spec = TrainingJobSpec(
        name=name,
        namespace="ml-team",
        image="example/train:1",
        command=["t"],
        nodes=2,
        gpus_per_node=8,
    )
    job = render_training_job(ref, spec)
    for _, _, template in workload_pod_templates(job):
        template["metadata"].setdefault("annotations", {})[RUN_SECONDS_ANNOTATION] = str(run_s)
    cluster_backend(ref.cluster).apply(job)


def job_phase(name: str) -> str:
    backend = cluster_backend(load_catalog().cluster(CLUSTER))
    return backend.workload_status("JobSet", name, "ml-team").phase


def nodes(pool: str):
    return cluster_backend(load_catalog().cluster(CLUSTER)).list_nodes(pool)


def last_transition() -> dict:
    return Ledger().transitions(CLUSTER, limit=1)[0]


def test_happy_path_moves_the_work_and_retires_the_old_pool(fleet):
    job_ends = SimState().clock.time() + JOB_S  # the sim's clock, as the drain reads it
    start_job(OLD, "long-job")
    dr, states = transition()
    assert str(dr.state) == "success", states
    assert job_phase("long-job") == "Succeeded"  # it finished before the old pool went
    t = last_transition()
    assert (t["state"], t["step"]) == ("done", "done")
    steps = {r["step"]: r for r in Ledger().transition_steps(t["id"])}
    assert [s.value for s in FORWARD[1:]] == [s for s in steps]  # every step, in order
    assert all(r["state"] == "done" and r["at"] and r["finished_at"] for r in steps.values())
    drain = steps["old_pool_drained"]["detail"]["drain"]
    assert drain["started_at"] < job_ends  # the job still ran then: the drain waited for it
    assert sorted(drain["drained"]) == sorted(f"{CLUSTER}-{OLD}-{i}" for i in range(4))
    assert (
        cloud_backend(load_catalog().cluster(CLUSTER)).get_node_pool(OLD).status
        == ResourceStatus.ABSENT
    )
    assert Ledger().pool_state(CLUSTER, OLD)["state"] == "retired"
    new_nodes = nodes(NEW)
    assert len(new_nodes) == 4 and all(n.free for n in new_nodes)  # validated: untainted
    assert asset_events(POOL_RETIRED.uri, dr.run_id) == [
        {"cluster": CLUSTER, "pool": OLD, "replaced_by": NEW, "run_id": dr.run_id}
    ]
    gate = check_gate(load_catalog(), Ledger, CLUSTER, [OLD, NEW], 2)
    assert gate.launch and gate.pool == NEW
    old_only = check_gate(load_catalog(), Ledger, CLUSTER, [OLD], 2)
    assert not old_only.launch and any("retired" in r for r in old_only.reasons)


def test_a_new_pool_that_fails_validation_is_rolled_back(fleet):
    SimState().inject(CLUSTER, NEW, "fabric-down")
    dr, states = transition()
    assert str(dr.state) == "failed"
    assert states["new_pool_validated"] == "failed" and states["switch_scheduling"] == (
        "upstream_failed"
    )
    t = last_transition()
    assert (t["state"], t["step"]) == ("rolled_back", "rolled_back")
    assert (
        cloud_backend(load_catalog().cluster(CLUSTER)).get_node_pool(NEW).status
        == ResourceStatus.ABSENT
    )
    old = nodes(OLD)
    assert len(old) == 4 and all(n.free for n in old)  # untouched and serving


def test_capacity_short_is_refused_before_anything_is_created(fleet):
    SimState().inject(CLUSTER, NEW, "capacity-short:2")
    dr, states = transition()
    assert str(dr.state) == "failed" and states["preflight"] == "failed"
    assert nodes(NEW) == []
    t = last_transition()
    assert t["state"] == "failed"  # the lock is released
    assert [r["step"] for r in Ledger().transition_steps(t["id"])] == ["preflighted"]


def test_a_stopped_run_holds_the_lock_then_resumes_or_rolls_back(after_the_failed_drain):
    first, states = after_the_failed_drain
    assert str(first.state) == "failed" and states["drain_old"] == "failed"
    t = last_transition()
    assert (t["state"], t["step"]) == ("running", "old_pool_cordoned")

    # a second transition on the cluster is refused, naming the first run
    other, states = transition(old_pool="h200-a")
    assert str(other.state) == "failed" and states["lock"] == "failed"

    # rollback after the switch: the old pool admits again, nothing is lost
    back, states = transition(action="rollback")
    assert str(back.state) == "success", states
    t = last_transition()
    assert (t["state"], t["step"]) == ("rolled_back", "rolled_back")
    assert job_phase(RUNNING_JOB) in ("Running", "Succeeded")  # never evicted
    assert all(not n.unschedulable for n in nodes(OLD))
    assert nodes(NEW) == []
    gate = check_gate(load_catalog(), Ledger, CLUSTER, [OLD], 2)
    assert not any("transition" in r for r in gate.reasons)


def test_a_failed_drain_resumes_without_a_second_pool_or_drain(after_the_failed_drain):
    first, states = after_the_failed_drain
    assert states["drain_old"] == "failed"
    again, states = transition()  # the job finishes meanwhile; the rerun resumes at the drain
    assert str(again.state) == "success", states
    t = last_transition()
    assert t["run_id"] == again.run_id and t["state"] == "done"
    assert states["validate_fabric"] == "skipped"  # validated in the first run: not again
    steps = {r["step"]: r for r in Ledger().transition_steps(t["id"])}
    assert steps["new_pool_created"]["finished_at"] < steps["old_pool_drained"]["at"]
    assert len(nodes(NEW)) == 4  # one pool, created once


def retire_approvals() -> list[dict]:
    return Ledger().approvals(kind="retire_pool", key=f"{CLUSTER}/{OLD}")


def test_the_retire_waits_for_a_persons_approval_and_records_who(fleet):
    approve = Answer("Approve", "alice")
    dr, states = transition(on_idle=approve)
    assert str(dr.state) == "success", states
    assert approve.answered == [("approve_retire", -1)]  # asked once, in awaiting_input
    (request,) = retire_approvals()
    assert (request["state"], request["answer"], request["answered_by"]) == (
        "done",
        "Approve",
        "alice",
    )
    steps = {r["step"]: r for r in Ledger().transition_steps(last_transition()["id"])}
    assert request["answered_at"] <= steps["old_pool_retired"]["at"]  # approved, then retired
    assert request["run_id"] == dr.run_id and request["task_id"] == "approve_retire"
    assert Ledger().pool_state(CLUSTER, OLD)["state"] == "retired"


def test_an_unanswered_retire_times_out_to_keeping_the_old_pool(fleet):
    timeout = TimeOut()
    dr, states = transition(on_idle=timeout)
    assert timeout.swept == 1  # the scheduler's sweep took the default, nobody answered
    assert str(dr.state) == "failed"
    assert states["approve_retire"] == "failed" and states["retire_old"] == "upstream_failed"
    (request,) = retire_approvals()
    assert (request["state"], request["answer"], request["answered_by"]) == (
        "timed_out",
        "Reject",
        "timeout",
    )
    # the old pool is kept: not deleted, not retired; the transition waits at its drain
    assert (
        cloud_backend(load_catalog().cluster(CLUSTER)).get_node_pool(OLD).status
        != ResourceStatus.ABSENT
    )
    assert (Ledger().pool_state(CLUSTER, OLD) or {}).get("state") != "retired"
    t = last_transition()
    assert (t["state"], t["step"]) == ("running", "old_pool_drained")
    assert len(nodes(OLD)) == 4 and len(nodes(NEW)) == 4  # capacity stays

    # a rerun asks again (a new request), and an approval lets the retire proceed
    again, states = transition(on_idle=Answer("Approve", "bob"))
    assert str(again.state) == "success", states
    newest, first = retire_approvals()
    assert first["state"] == "timed_out" and (newest["state"], newest["answered_by"]) == (
        "done",
        "bob",
    )
    assert Ledger().pool_state(CLUSTER, OLD)["state"] == "retired"
