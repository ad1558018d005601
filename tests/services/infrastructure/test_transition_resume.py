"""A transition killed after any step resumes at the right one, through the real service, ledger
and simulated fleet: it never creates a second pool, never repeats a completed step (cordon,
drain, delete), and ends done. Each "run" is a ReservationTransition with its own run id, as a
DAG run's tasks would hold; a crash drops it between two steps, or in the middle of one."""

from __future__ import annotations

import pytest

from gpufleet.backends import cluster_backend
from gpufleet.backends.sim.state import SimState
from gpufleet.config.catalog import load_catalog
from gpufleet.domain.transition import FORWARD, Step
from gpufleet.services.infrastructure.transition import ReservationTransition, TransitionRefused
from gpufleet.services.nodes.drain import DrainSettings
from gpufleet.store import Ledger
from tests.support.fleet import frozen_sim_clock, validate

CLUSTER, OLD, NEW = "a3u-sim", "h200-b", "h200-c"
FAST = DrainSettings(soak_s=0, poll_s=0.05)


@pytest.fixture(autouse=True)
def _frozen_clock(fleet_state):
    """Time moves only when the test advances the sim's clock."""
    frozen_sim_clock()


def run(run_id: str, holder_alive=lambda dag, run: False) -> ReservationTransition:
    svc = ReservationTransition(load_catalog(), CLUSTER, OLD, NEW, Ledger(), run_id, FAST)
    svc.open("run", holder_alive)
    return svc


def do(svc: ReservationTransition, step: Step) -> None:
    """One step to completion, as its task would (validation first, as the DAG does)."""
    if step is Step.NEW_POOL_VALIDATED:
        validate(CLUSTER, NEW, run_id=svc.run_id)
    for _ in range(100):
        outcome = svc.advance(step)
        if outcome.done:
            assert outcome.failed is None, outcome.failed
            return
        SimState().clock.advance(max(outcome.next_check_s, 1.0))  # the wait its task defers
    raise AssertionError(f"{step} did not finish: {outcome.notes}")


def sim_nodes(pool: str) -> list[str]:
    with SimState().read() as conn:
        return [
            r[0]
            for r in conn.execute(
                "SELECT name FROM nodes WHERE cluster=? AND pool=?", (CLUSTER, pool)
            )
        ]


def queues(svc: ReservationTransition) -> dict[str, str]:
    """Each pool's Kueue ClusterQueue stopPolicy, as the simulated cluster stores it."""
    from gpufleet.backends.sim.cluster import SimClusterBackend

    sim = SimClusterBackend(svc.cluster)
    return {
        name: sim.get("ClusterQueue", name)["spec"]["stopPolicy"]
        for name in ("gpufleet-h200-b", "gpufleet-h200-c")
    }


@pytest.mark.parametrize("crash_after", FORWARD[1:-1], ids=lambda s: s.value)
def test_a_crash_after_each_step_resumes_at_the_next(fleet_state, crash_after):
    first = run("run-1")
    for step in FORWARD[1 : FORWARD.index(crash_after) + 1]:
        do(first, step)
    before = {r["step"]: r for r in Ledger().transition_steps(first.tid)}
    del first  # the run is killed here

    second = run("run-2")  # the same pools: it takes the lock over and resumes
    expected = FORWARD[FORWARD.index(crash_after) + 1]
    assert second.next_step() is expected
    for step in FORWARD[1 : FORWARD.index(crash_after) + 1]:  # completed: never done again
        assert second.advance(step).notes == [f"{step.value}: already done (resumed run)"]
    for step in FORWARD[FORWARD.index(expected) :]:
        do(second, step)
    after = {r["step"]: r for r in Ledger().transition_steps(second.tid)}
    for step, row in before.items():  # the first run's records stand as they were
        assert after[step]["finished_at"] == row["finished_at"]
        assert after[step]["detail"] == row["detail"]
    assert [s for s in after] == [s.value for s in FORWARD[1:]]
    assert Ledger().transition(second.tid)["state"] == "done"
    assert len(sim_nodes(NEW)) == 4 and sim_nodes(OLD) == []  # one new pool; the old gone


def test_a_crash_inside_the_drain_redoes_only_the_drain(fleet_state):
    first = run("run-1")
    for step in FORWARD[1 : FORWARD.index(Step.OLD_POOL_CORDONED) + 1]:
        do(first, step)
    first.settings = DrainSettings(soak_s=60, poll_s=0.05)  # stops after the first batch
    outcome = first.advance(Step.OLD_POOL_DRAINED)
    assert not outcome.done
    del first
    second = run("run-2")
    assert second.next_step() is Step.OLD_POOL_DRAINED
    state = {r["step"]: r for r in Ledger().transition_steps(second.tid)}
    drained_before = state["old_pool_drained"]["detail"]["drain"]["drained"]
    assert len(drained_before) == 1  # the batch the first run finished stays drained
    do(second, Step.OLD_POOL_DRAINED)
    assert all(n.unschedulable for n in cluster_backend(second.cluster).list_nodes(OLD))


def test_a_live_holder_keeps_the_lock(fleet_state):
    first = run("run-1")
    do(first, Step.PREFLIGHTED)
    with pytest.raises(TransitionRefused, match="is being run by run-1"):
        run("run-2", holder_alive=lambda d, r: r == "run-1")
    other = ReservationTransition(load_catalog(), CLUSTER, "h200-a", NEW, Ledger(), "run-3", FAST)
    with pytest.raises(
        TransitionRefused, match=r"h200-b -> h200-c, run run-1, at step preflighted"
    ):
        other.open("run", lambda d, r: False)


def test_rollback_after_the_switch_restores_the_old_pool(fleet_state):
    svc = run("run-1")
    for step in FORWARD[1 : FORWARD.index(Step.OLD_POOL_CORDONED) + 1]:
        do(svc, step)
    back = ReservationTransition(load_catalog(), CLUSTER, OLD, NEW, Ledger(), "run-2", FAST)
    back.open("rollback", lambda d, r: False)
    for _ in range(100):
        if (outcome := back.rollback()).done:
            break
        SimState().clock.advance(1.0)
    else:
        raise AssertionError(f"the rollback did not finish: {outcome.notes}")
    assert Ledger().transition(back.tid)["state"] == "rolled_back"
    old = cluster_backend(back.cluster).list_nodes(OLD)
    assert len(old) == 4 and all(n.free for n in old)
    assert sim_nodes(NEW) == []
    assert queues(back) == {"gpufleet-h200-b": "None", "gpufleet-h200-c": "Hold"}
    assert "serves as before" in outcome.notes[-1]


def test_the_gate_follows_the_transition_pool_by_pool(fleet_state):
    from gpufleet.services.launch.gate import check_gate

    validate(CLUSTER, OLD)
    validate(CLUSTER, "h200-a")

    def reasons(pool: str) -> list[str]:
        decision = check_gate(load_catalog(), Ledger, CLUSTER, [pool], 2)
        return [] if decision.launch else decision.reasons

    svc = run("run-1")
    for step in FORWARD[1 : FORWARD.index(Step.NEW_POOL_VALIDATED) + 1]:
        if step is Step.NEW_POOL_VALIDATED:
            assert any("not validated yet" in r for r in reasons(NEW))
            assert reasons(OLD) == []  # the old pool serves until the switch
        do(svc, step)
    assert reasons(NEW) == [] and reasons(OLD) == []  # validated: both take work
    do(svc, Step.SCHEDULING_SWITCHED)
    assert queues(svc) == {"gpufleet-h200-b": "Hold", "gpufleet-h200-c": "None"}
    assert any(f"launch on {NEW} instead" in r for r in reasons(OLD))
    assert reasons(NEW) == [] and reasons("h200-a") == []  # other pools: the usual rules
