"""The reservation transition's state machine (issue 10, build 1): unit tests of every function,
and a hypothesis state machine that runs transitions the way the ledger records them.

The model keeps a ledger (steps recorded "started" and "completed") and a small world (each
pool: exists, its Kueue queue admits, its nodes cordoned). Hypothesis picks any allowed move,
a resume through ``resume_point``, a crash after any number of a step's actions (before its
"completed" is recorded), failures, rollbacks and abandons, in any order. The world changes only
through the actions the module names (``FORWARD_ACTIONS``, ``rollback_actions``), so the
properties test the module's own plans: the old pool is never deleted before the new one
validated, some pool is schedulable after every single action, no destructive step completes
twice, and a rollback ends with the old pool serving.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from gpufleet.domain.transition import (
    DESTRUCTIVE,
    FORWARD,
    FORWARD_ACTIONS,
    TERMINAL,
    Step,
    TransitionError,
    admission,
    allowed,
    can_abandon,
    can_roll_back,
    check_move,
    gate_refusal,
    in_flight,
    last_forward,
    next_forward,
    resume_point,
    rollback_actions,
)
from gpufleet.errors import GpufleetError

S = Step
FIGURES: Counter[str] = Counter()  # what the runs reached, printed at the end (pytest -s)
OLD, NEW = "h200-a", "h200-b"
FULL_ROLLBACK = (
    "uncordon_old",
    "admit_old_queue",
    "hold_new_queue",
    "cordon_new",
    "drain_new",
    "delete_new_pool",
)


def path_to(step: Step) -> list[Step]:
    return list(FORWARD[: FORWARD.index(step) + 1])


@pytest.fixture(scope="module", autouse=True)
def figures():
    yield
    print(f"\ntransition runs reached: {dict(sorted(FIGURES.items()))}")


# ---- the constants ----


def test_forward_is_the_issue_order_and_values_are_snake_case():
    assert [s.value for s in FORWARD] == [
        "planned",
        "preflighted",
        "new_pool_created",
        "new_pool_ready",
        "new_pool_validated",
        "scheduling_switched",
        "old_pool_cordoned",
        "old_pool_drained",
        "old_pool_retired",
        "done",
    ]
    assert {s.value for s in Step} - {s.value for s in FORWARD} == {
        "rolling_back",
        "rolled_back",
        "abandoned",
        "failed",
    }
    assert {S.DONE, S.ROLLED_BACK, S.ABANDONED, S.FAILED} == TERMINAL
    assert {S.OLD_POOL_CORDONED, S.OLD_POOL_DRAINED, S.OLD_POOL_RETIRED} == DESTRUCTIVE
    assert issubclass(TransitionError, GpufleetError)


# ---- allowed / check_move ----


def test_allowed_moves_of_every_step():
    for step in FORWARD[:-2]:  # planned .. old_pool_drained
        nxt = FORWARD[FORWARD.index(step) + 1]
        assert allowed(step) == {nxt, S.ROLLING_BACK, S.FAILED, S.ABANDONED}, step
    assert allowed(S.OLD_POOL_RETIRED) == {S.DONE, S.ABANDONED}
    assert allowed(S.ROLLING_BACK) == {S.ROLLED_BACK, S.FAILED}
    for step in TERMINAL:
        assert allowed(step) == frozenset()
    for step in Step:
        assert step not in allowed(step)
    assert S.ROLLING_BACK in allowed(S.NEW_POOL_READY)  # validation failed -> roll back


def test_check_move_accepts_allowed_and_names_the_rest():
    check_move(S.PLANNED, S.PREFLIGHTED)
    check_move(S.NEW_POOL_READY, S.ROLLING_BACK)
    with pytest.raises(TransitionError) as err:
        check_move(S.NEW_POOL_READY, S.OLD_POOL_RETIRED)
    msg = str(err.value)
    assert "\n" not in msg
    assert "from new_pool_ready to old_pool_retired" in msg
    assert "new_pool_validated, rolling_back, abandoned, failed" in msg
    with pytest.raises(TransitionError, match="from done it may go to nothing"):
        check_move(S.DONE, S.ROLLING_BACK)
    with pytest.raises(TransitionError, match="does not follow itself"):
        check_move(S.OLD_POOL_DRAINED, S.OLD_POOL_DRAINED)
    with pytest.raises(TransitionError, match="old_pool_retired to rolling_back"):
        check_move(S.OLD_POOL_RETIRED, S.ROLLING_BACK)
    with pytest.raises(TransitionError, match="rolling_back to abandoned"):
        check_move(S.ROLLING_BACK, S.ABANDONED)
    with pytest.raises(TransitionError, match="'paused' is not a transition step"):
        check_move("paused", S.DONE)


def test_a_started_retirement_refuses_the_rollback_but_not_failing():
    assert not can_roll_back(S.OLD_POOL_DRAINED, in_flight=S.OLD_POOL_RETIRED)
    assert S.ROLLING_BACK not in allowed(S.OLD_POOL_DRAINED, S.OLD_POOL_RETIRED)
    assert S.FAILED in allowed(S.OLD_POOL_DRAINED, S.OLD_POOL_RETIRED)
    with pytest.raises(TransitionError, match="deletion has started: only forward"):
        check_move(S.OLD_POOL_DRAINED, S.ROLLING_BACK, in_flight=S.OLD_POOL_RETIRED)
    check_move(S.OLD_POOL_DRAINED, S.ROLLING_BACK, in_flight=S.OLD_POOL_DRAINED)


# ---- next_forward / last_forward / in_flight ----


def test_next_forward():
    assert next_forward(S.PLANNED) == S.PREFLIGHTED
    assert next_forward(S.OLD_POOL_RETIRED) == S.DONE
    for step in (S.DONE, S.ROLLING_BACK, S.ROLLED_BACK, S.ABANDONED, S.FAILED):
        assert next_forward(step) is None


def test_last_forward_and_in_flight_read_the_ledger():
    done = [*path_to(S.SCHEDULING_SWITCHED), S.ROLLING_BACK]
    assert last_forward(done) == S.SCHEDULING_SWITCHED
    assert last_forward([]) is None
    started = [*path_to(S.OLD_POOL_CORDONED), S.ROLLING_BACK]
    assert in_flight(started, done) == S.OLD_POOL_CORDONED
    assert in_flight(path_to(S.NEW_POOL_READY), path_to(S.NEW_POOL_READY)) is None


# ---- resume_point ----


def test_resume_point_is_the_step_after_the_last_completed():
    assert resume_point([]) == S.PLANNED
    for step in FORWARD[:-1]:
        assert resume_point(path_to(step)) == next_forward(step)
    assert resume_point([*path_to(S.OLD_POOL_CORDONED), S.ROLLING_BACK]) == S.ROLLED_BACK
    assert resume_point(["planned", "preflighted"]) == S.NEW_POOL_CREATED  # ledger strings


def test_resume_point_refuses_ended_or_impossible_records():
    for end in (S.DONE,):
        with pytest.raises(TransitionError, match="ended done: there is nothing to resume"):
            resume_point(path_to(end))
    with pytest.raises(TransitionError, match="ended rolled_back"):
        resume_point([S.PLANNED, S.ROLLING_BACK, S.ROLLED_BACK])
    with pytest.raises(TransitionError, match="has old_pool_retired after new_pool_ready"):
        resume_point([*path_to(S.NEW_POOL_READY), S.OLD_POOL_RETIRED])
    with pytest.raises(TransitionError, match="has old_pool_drained after old_pool_drained"):
        resume_point([*path_to(S.OLD_POOL_DRAINED), S.OLD_POOL_DRAINED])
    with pytest.raises(TransitionError, match="starts at preflighted, not planned"):
        resume_point([S.PREFLIGHTED])


# ---- can_roll_back / can_abandon / rollback_actions ----


def test_can_roll_back_and_abandon():
    for step in FORWARD[: FORWARD.index(S.OLD_POOL_RETIRED)]:
        assert can_roll_back(step) and can_abandon(step), step
    assert not can_roll_back(S.OLD_POOL_RETIRED) and can_abandon(S.OLD_POOL_RETIRED)
    assert can_roll_back(S.ROLLING_BACK) and not can_abandon(S.ROLLING_BACK)
    for step in TERMINAL:
        assert not can_roll_back(step) and not can_abandon(step)


def test_rollback_actions_by_step():
    assert rollback_actions(S.PLANNED) == ()
    assert rollback_actions(S.PREFLIGHTED) == ()
    for step in (S.NEW_POOL_CREATED, S.NEW_POOL_READY, S.NEW_POOL_VALIDATED):
        assert rollback_actions(step) == ("delete_new_pool",)
    for step in (S.SCHEDULING_SWITCHED, S.OLD_POOL_CORDONED, S.OLD_POOL_DRAINED):
        assert rollback_actions(step) == FULL_ROLLBACK
    # a half-done step counts: a half-created pool is deleted, a half-done switch undone
    assert rollback_actions(S.PREFLIGHTED, in_flight=S.NEW_POOL_CREATED) == ("delete_new_pool",)
    assert rollback_actions(S.NEW_POOL_VALIDATED, S.SCHEDULING_SWITCHED) == FULL_ROLLBACK
    with pytest.raises(TransitionError, match="no rollback from old_pool_retired"):
        rollback_actions(S.OLD_POOL_RETIRED)
    with pytest.raises(TransitionError, match="no rollback from old_pool_drained"):
        rollback_actions(S.OLD_POOL_DRAINED, in_flight=S.OLD_POOL_RETIRED)
    with pytest.raises(TransitionError, match="pass the last forward step"):
        rollback_actions(S.ROLLING_BACK)


# ---- admission ----


def test_admission_by_step():
    before = FORWARD[: FORWARD.index(S.SCHEDULING_SWITCHED)]
    for step in before:
        assert admission(step) == (True, False), step
    for step in FORWARD[len(before) :]:
        assert admission(step) == (False, True), step
    assert admission(S.ROLLED_BACK) == (True, False)
    assert admission(S.FAILED, S.NEW_POOL_READY) == (True, False)
    assert admission(S.ABANDONED, S.OLD_POOL_CORDONED) == (False, True)
    assert admission(S.ROLLING_BACK, last_forward=S.SCHEDULING_SWITCHED) == (False, True)
    with pytest.raises(TransitionError, match="admission at failed .* pass last_forward"):
        admission(S.FAILED)


# ---- gate_refusal ----


def test_gate_refuses_the_new_pool_until_validated():
    for step in FORWARD[: FORWARD.index(S.NEW_POOL_VALIDATED)]:
        assert gate_refusal(step, "new", NEW, OLD) == (
            "h200-b is being brought up by a transition from h200-a: not validated yet"
        )
        assert gate_refusal(step, "old", NEW, OLD) is None
    assert gate_refusal(S.NEW_POOL_VALIDATED, "new", NEW, OLD) is None
    assert gate_refusal(S.NEW_POOL_VALIDATED, "old", NEW, OLD) is None


def test_gate_refuses_the_old_pool_from_the_switch_naming_the_new():
    for step in (S.SCHEDULING_SWITCHED, S.OLD_POOL_CORDONED, S.OLD_POOL_DRAINED):
        assert gate_refusal(step, "old", NEW, OLD) == (
            "h200-a is being retired by a transition: launch on h200-b instead"
        )
        assert gate_refusal(step, "new", NEW, OLD) is None
    for step in (S.OLD_POOL_RETIRED, S.DONE):
        refusal = gate_refusal(step, "old", NEW, OLD)
        assert refusal == "h200-a was retired by a transition to h200-b: launch on h200-b instead"
        assert gate_refusal(step, "new", NEW, OLD) is None


def test_gate_after_rollback_failure_and_abandon():
    assert gate_refusal(S.ROLLED_BACK, "old", NEW, OLD) is None
    assert gate_refusal(S.ROLLED_BACK, "new", NEW, OLD) == (
        "h200-b was rolled back by a transition from h200-a: not in service, launch on h200-a"
    )
    assert "is being rolled back" in gate_refusal(S.ROLLING_BACK, "new", NEW, OLD)
    assert gate_refusal(S.ROLLING_BACK, "old", NEW, OLD) is None
    assert gate_refusal(S.FAILED, "new", NEW, OLD, last_forward=S.NEW_POOL_READY) == (
        "h200-b was brought up by a transition from h200-a that ended failed at new_pool_ready: "
        "not validated"
    )
    assert gate_refusal(S.FAILED, "old", NEW, OLD, last_forward=S.NEW_POOL_READY) is None
    assert gate_refusal(S.ABANDONED, "old", NEW, OLD, last_forward=S.OLD_POOL_CORDONED) == (
        "h200-a was being retired by a transition that ended abandoned at old_pool_cordoned: "
        "launch on h200-b instead"
    )
    assert gate_refusal(S.ABANDONED, "new", NEW, OLD, last_forward=S.OLD_POOL_CORDONED) is None
    for role in ("old", "new"):  # no last_forward: fail closed
        assert "ended failed at an unknown step" in gate_refusal(S.FAILED, role, NEW, OLD)
    with pytest.raises(TransitionError, match="gate role 'both'"):
        gate_refusal(S.PLANNED, "both", NEW, OLD)


# ---- the property: runs with crashes, resumes, failures, rollbacks and abandons ----


class TransitionRuns(RuleBasedStateMachine):
    """One transition per example, driven like the service would drive it through the ledger."""

    @initialize(exit_at=st.sampled_from(FORWARD) | st.sampled_from(FORWARD[5:9]))
    def fresh(self, exit_at):
        # where the run may start leaving the forward path (any allowed move), drawn up front
        # so that late exits (a rollback after the switch) are likelier than early ones
        self.exit_at = exit_at
        self.started: list[Step] = []
        self.completed: list[Step] = []
        self.pools = {
            "old": {"exists": True, "admits": True, "cordoned": False},
            "new": {"exists": False, "admits": False, "cordoned": False},
        }
        self.completions: Counter[Step] = Counter()

    # -- the world --

    def schedulable(self, role: str) -> bool:
        p = self.pools[role]
        return p["exists"] and p["admits"] and not p["cordoned"]

    def act(self, action: str) -> None:
        if action in ("preflight_reservation", "wait_new_pool_ready", "validate_new_pool"):
            return
        kind, who = action.split("_")[:2]  # create_new_pool, hold_old_queue, cordon_old, ...
        pool = self.pools[who]
        if kind == "create":
            pool.update(exists=True, admits=False, cordoned=False)  # tainted, queue held
        elif kind == "delete":
            if who == "old":
                assert S.NEW_POOL_VALIDATED in self.completed, "old pool deleted before validated"
                assert self.schedulable("new"), "old pool deleted while the new does not serve"
            pool.update(exists=False, admits=False)
        else:
            assert pool["exists"] or kind in ("hold", "cordon", "drain"), f"{action}: no pool"
            if kind == "admit":
                pool["admits"] = True
            elif kind == "hold":
                pool["admits"] = False
            elif kind == "cordon":
                pool["cordoned"] = True
            elif kind == "uncordon":
                pool["cordoned"] = False
        self.check_world()

    def check_world(self) -> None:
        old, new = self.pools["old"], self.pools["new"]
        assert self.schedulable("old") or self.schedulable("new"), f"nothing serves: {self.pools}"
        if not (new["exists"] and new["admits"]):  # the old pool is the only path
            assert old["exists"] and not old["cordoned"] and old["admits"], self.pools

    # -- the ledger --

    @property
    def current(self) -> Step | None:
        return self.completed[-1] if self.completed else None

    def actions_for(self, target: Step) -> tuple[str, ...]:
        if target in FORWARD:
            return FORWARD_ACTIONS[target]
        if target == S.ROLLED_BACK:
            return rollback_actions(
                last_forward(self.completed), in_flight(self.started, self.completed)
            )
        return ()

    def run_step(self, target: Step, crash_after: int | None) -> None:
        actions = self.actions_for(target)
        self.started.append(target)
        for i, action in enumerate(actions):
            if crash_after is not None and i >= crash_after:
                FIGURES["crash mid-step"] += 1
                return  # killed mid-step: "completed" is never recorded
            self.act(action)
        if crash_after == len(actions):
            FIGURES["crash before completed"] += 1
            return  # killed after the actions, before recording "completed"
        if target == S.OLD_POOL_RETIRED:
            assert S.NEW_POOL_VALIDATED in self.completed
        self.completed.append(target)
        self.completions[target] += 1
        if target in TERMINAL:
            FIGURES[f"{target} from {last_forward(self.completed)}"] += 1

    # a crash one time in two, after any number of a step's actions (0..2 covers every step)
    crashes = st.none() | st.integers(min_value=0, max_value=2)

    @precondition(lambda self: self.current not in TERMINAL)
    @rule(crash_after=crashes)
    def resume(self, crash_after):
        target = resume_point(self.completed)
        assert target not in self.completed, f"resume_point redoes {target}"
        if self.current is not None:
            check_move(self.current, target, in_flight(self.started, self.completed))
        self.run_step(target, crash_after)

    def may_leave(self) -> bool:
        current = self.current
        if current is None or current in TERMINAL:
            return False
        return current not in FORWARD or FORWARD.index(current) >= FORWARD.index(self.exit_at)

    @precondition(may_leave)
    @rule(data=st.data(), crash_after=crashes)
    def move(self, data, crash_after):
        flying = in_flight(self.started, self.completed)
        moves = sorted(allowed(self.current, flying))
        target = data.draw(st.sampled_from(moves), label="target")
        check_move(self.current, target, flying)
        self.run_step(target, crash_after)

    @precondition(lambda self: self.current in TERMINAL)
    @rule()
    def resume_after_the_end(self):
        with pytest.raises(TransitionError, match="nothing to resume"):
            resume_point(self.completed)

    @invariant()
    def pools_serve_and_nothing_destructive_repeats(self):
        if not hasattr(self, "pools"):
            return
        self.check_world()
        for step in DESTRUCTIVE:
            assert self.completions[step] <= 1, f"{step} completed twice"
        current = self.current
        if current is None:
            return
        flying = in_flight(self.started, self.completed)
        for step in set(Step) - allowed(current, flying):  # every other move is refused
            with pytest.raises(TransitionError):
                check_move(current, step, flying)
        old, new = admission(current, last_forward(self.completed))
        assert old or new, f"admission closes both pools at {current}"
        if current == S.ROLLED_BACK:
            assert old and not new and self.schedulable("old")
            assert not self.pools["new"]["exists"], "rolled back but the new pool is left"
        if current == S.DONE:
            assert not self.pools["old"]["exists"] and self.schedulable("new")
        if current in FORWARD and flying is None:  # no half-done step: the world is as said
            world = (
                self.pools["old"]["exists"] and self.pools["old"]["admits"],
                self.pools["new"]["exists"] and self.pools["new"]["admits"],
            )
            assert world == (old, new), (current, self.pools)


TransitionRuns.TestCase.settings = settings(
    max_examples=600,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_transition_runs = TransitionRuns.TestCase


def run_to(machine: TransitionRuns, step: Step) -> None:
    while machine.current != step:
        machine.resume(crash_after=None)
        machine.pools_serve_and_nothing_destructive_repeats()


def test_a_crash_while_deleting_the_old_pool_leaves_only_forward():
    m = TransitionRuns()
    m.fresh(exit_at=S.DONE)
    run_to(m, S.OLD_POOL_DRAINED)
    m.resume(crash_after=1)  # the old pool is deleted, "completed" never recorded
    assert not m.pools["old"]["exists"] and m.current == S.OLD_POOL_DRAINED
    flying = in_flight(m.started, m.completed)
    assert flying == S.OLD_POOL_RETIRED
    assert S.ROLLING_BACK not in allowed(m.current, flying)
    m.resume(crash_after=None)  # redone (idempotent), then done
    run_to(m, S.DONE)
    assert m.completions[S.OLD_POOL_RETIRED] == 1


def test_a_rollback_of_a_half_done_switch_restores_the_old_pool():
    m = TransitionRuns()
    m.fresh(exit_at=S.DONE)
    run_to(m, S.NEW_POOL_VALIDATED)
    m.resume(crash_after=1)  # the new queue admits; the old one not held yet
    m.run_step(S.ROLLING_BACK, crash_after=None)
    m.resume(crash_after=2)  # killed mid-rollback: old uncordoned and admitting
    m.pools_serve_and_nothing_destructive_repeats()
    assert resume_point(m.completed) == S.ROLLED_BACK
    m.resume(crash_after=None)
    m.pools_serve_and_nothing_destructive_repeats()
    assert m.current == S.ROLLED_BACK and not m.pools["new"]["exists"]
    assert m.schedulable("old") and admission(S.ROLLED_BACK) == (True, False)
