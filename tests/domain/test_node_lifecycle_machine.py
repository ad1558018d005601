"""The node lifecycle's state machine and the pool limits (issue 12, builds 1 and 2): unit tests
of every function and refusal, and a hypothesis state machine that walks one node through
random events the way the nightly, the remediation steps and people would.

The model holds the truth the module is asked about: the node's state, whether a job runs on
it, the result of the retest it is in, how many repairs it had, and every move made (with who
made it and what was true then). Events are tried in any order, including arbitrary moves
(``any_move``) that the module must refuse when they break a rule; a move is applied only when
``check_move`` accepts it. The invariants then check the record: never released without a
passing retest unless by a person, never moved to repairing while a job runs, never out of
needs_human but by a person, never more repairs than allowed before needs_human.
"""

from __future__ import annotations

from collections import Counter
from fractions import Fraction
from math import floor

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from gpufleet.domain.nodes import (
    IN_SERVICE,
    OUT_OF_SERVICE,
    PERSON_TARGETS,
    NodeState,
    NodeTransitionError,
    after_retest,
    allowed,
    check_move,
    count_repairs,
    max_quarantined,
    may_start_repair,
    repair_budget,
)
from gpufleet.errors import GpufleetError
from tests.support.examples import examples

N = NodeState
FIGURES: Counter[str] = Counter()  # what the runs reached, printed at the end (pytest -s)


@pytest.fixture(scope="module", autouse=True)
def figures():
    yield
    print(f"\nnode lifecycle runs reached: {dict(sorted(FIGURES.items()))}")


def refusal(current, target, **kw) -> str:
    with pytest.raises(NodeTransitionError) as err:
        check_move(current, target, **kw)
    msg = str(err.value)
    assert "\n" not in msg
    return msg


# ---- the constants ----


def test_states_values_and_service():
    assert [s.value for s in N] == [
        "suspect",
        "quarantined",
        "retesting",
        "released",
        "draining",
        "drained",
        "repairing",
        "needs_human",
    ]
    assert frozenset(N) - {N.RELEASED} == OUT_OF_SERVICE
    assert IN_SERVICE == N.RELEASED
    assert {N.RELEASED, N.QUARANTINED} == PERSON_TARGETS
    assert issubclass(NodeTransitionError, GpufleetError)


# ---- allowed ----


def test_allowed_by_the_machine():
    assert allowed(N.SUSPECT) == {N.RETESTING}
    assert allowed(N.QUARANTINED) == {N.RETESTING}
    assert allowed(N.RETESTING) == {N.RELEASED, N.DRAINING, N.NEEDS_HUMAN}
    assert allowed(N.DRAINING) == {N.DRAINED}
    assert allowed(N.DRAINED) == {N.REPAIRING, N.DRAINING}  # pods came back: drain again
    assert allowed(N.REPAIRING) == {N.RETESTING}
    assert allowed(N.RELEASED) == {N.QUARANTINED, N.SUSPECT}
    assert allowed(N.NEEDS_HUMAN) == frozenset()
    assert allowed("drained") == {N.REPAIRING, N.DRAINING}  # ledger strings


def test_allowed_by_a_person_adds_release_and_quarantine_never_self():
    for state in N:
        assert allowed(state, by_person=True) == (allowed(state) | PERSON_TARGETS) - {state}
        assert state not in allowed(state, by_person=True)
    assert allowed(N.NEEDS_HUMAN, by_person=True) == {N.RELEASED, N.QUARANTINED}


# ---- check_move: the allowed paths ----


def test_the_issue_paths_are_accepted():
    check_move(N.QUARANTINED, N.RETESTING)
    check_move(N.SUSPECT, N.RETESTING)
    check_move(N.RETESTING, N.RELEASED, retest_passed=True)
    check_move(N.RETESTING, N.DRAINING, retest_passed=False)
    check_move(N.RETESTING, N.NEEDS_HUMAN, retest_passed=False)
    check_move(N.DRAINING, N.DRAINED)
    check_move(N.DRAINED, N.REPAIRING, job_running=False)
    check_move(N.DRAINED, N.DRAINING)  # pods came back on it
    check_move(N.REPAIRING, N.RETESTING)
    check_move(N.RELEASED, N.QUARANTINED)
    check_move(N.RELEASED, N.SUSPECT)
    check_move(N.RETESTING, N.DRAINING, retest_passed=False, failed_repairs=1, max_repairs=2)
    check_move(N.RETESTING, N.NEEDS_HUMAN, retest_passed=False, failed_repairs=2, max_repairs=2)


def test_a_person_may_release_or_quarantine_from_anywhere():
    for state in N:
        for target in PERSON_TARGETS - {state}:
            check_move(state, target, by_person=True, job_running=True)
    check_move(N.RETESTING, N.RELEASED, by_person=True, retest_passed=False)


# ---- check_move: each refusal and its message ----


def test_release_without_a_passing_retest_is_refused():
    msg = refusal(N.RETESTING, N.RELEASED, node="gpu-7")
    assert msg.startswith("node gpu-7 cannot go from retesting to released: ")
    assert "only a passing retest releases a node (no passing retest was given), or a person" in msg
    assert msg.endswith(
        "from retesting it may go to released, draining, needs_human, "
        "or by a person to quarantined, released"
    )
    assert "(its retest failed)" in refusal(N.RETESTING, N.RELEASED, retest_passed=False)


def test_release_from_elsewhere_is_a_persons_call():
    for state in (N.SUSPECT, N.QUARANTINED, N.DRAINING, N.DRAINED, N.REPAIRING):
        msg = refusal(state, N.RELEASED, retest_passed=True)
        assert f"a node cannot go from {state} to released: only a person may " in msg
        assert "(gpufleet node release NODE --reason ...)" in msg
    msg = refusal(N.DRAINED, N.QUARANTINED)
    assert "only a person may (gpufleet node quarantine NODE --reason ...)" in msg
    assert msg.endswith(
        "from drained it may go to draining, repairing, or by a person to quarantined, released"
    )


def test_draining_or_needs_human_needs_a_failed_retest():
    assert "its retest passed: release it" in refusal(N.RETESTING, N.DRAINING, retest_passed=True)
    assert "no failed retest was given" in refusal(N.RETESTING, N.NEEDS_HUMAN)


def test_a_failed_retest_goes_where_the_repairs_say():
    msg = refusal(N.RETESTING, N.DRAINING, retest_passed=False, failed_repairs=3, max_repairs=3)
    assert "3 of at most 3 repairs failed, so a failed retest goes to needs_human" in msg
    msg = refusal(N.RETESTING, N.NEEDS_HUMAN, retest_passed=False, failed_repairs=0, max_repairs=2)
    assert "0 of at most 2 repairs failed, so a failed retest goes to draining" in msg


def test_no_repair_and_no_drained_while_a_job_runs():
    msg = refusal(N.DRAINED, N.REPAIRING, job_running=True, node="gpu-2")
    assert msg.startswith("node gpu-2 cannot go from drained to repairing: a job runs on it")
    assert "wait for the job or evict it (drain), then repair" in msg
    assert "a job still runs on it" in refusal(N.DRAINING, N.DRAINED, job_running=True)


def test_only_a_person_leaves_needs_human():
    for target in N:
        if target == N.NEEDS_HUMAN:
            continue
        msg = refusal(N.NEEDS_HUMAN, target, retest_passed=True)
        assert "only a person may move a node out of needs_human" in msg
        assert msg.endswith("from needs_human only a person may move it, to quarantined, released")
    msg = refusal(N.NEEDS_HUMAN, N.RETESTING, by_person=True)
    assert "only a person may move a node out of needs_human" in msg


def test_self_moves_unknown_states_and_other_moves_are_refused():
    for state in N:
        assert "a state does not follow itself" in refusal(state, state, by_person=True)
    msg = refusal(N.SUSPECT, N.REPAIRING)
    assert "cannot go from suspect to repairing: not a move of the node lifecycle" in msg
    assert "not a move" in refusal(N.RELEASED, N.DRAINING, by_person=True)
    with pytest.raises(NodeTransitionError, match="'broken' is not a node state"):
        check_move("broken", N.RELEASED)
    with pytest.raises(NodeTransitionError, match="target state 'gone' is not a node state"):
        check_move(N.RELEASED, "gone")


# ---- after_retest / count_repairs ----


def test_after_retest():
    assert after_retest(True, 5, 2) == N.RELEASED
    assert after_retest(False, 0, 2) == N.DRAINING
    assert after_retest(False, 1, 2) == N.DRAINING
    assert after_retest(False, 2, 2) == N.NEEDS_HUMAN
    assert after_retest(False, 0, 0) == N.NEEDS_HUMAN  # no repairs allowed: straight to a person
    with pytest.raises(ValueError, match="must be >= 0"):
        after_retest(False, -1, 2)


def test_count_repairs_counts_the_current_episode():
    one = [N.RELEASED, N.QUARANTINED, N.RETESTING, N.DRAINING, N.DRAINED, N.REPAIRING]
    assert count_repairs([]) == 0
    assert count_repairs(one) == 1
    assert count_repairs([*one, N.RETESTING, N.DRAINING, N.DRAINED, N.REPAIRING]) == 2
    assert count_repairs([*one, N.RETESTING, N.RELEASED]) == 0
    assert count_repairs([*one, N.RETESTING, N.NEEDS_HUMAN]) == 1
    assert count_repairs([*one, N.RETESTING, N.NEEDS_HUMAN, N.QUARANTINED]) == 0
    assert count_repairs(["quarantined", "retesting", "draining", "drained", "repairing"]) == 1


def test_a_fault_that_survives_repair_walks_to_needs_human():
    """The issue's third acceptance path, step by step, with max_repairs=2."""
    state, history, max_repairs = N.RELEASED, [N.RELEASED], 2

    def go(target, **kw):
        nonlocal state
        check_move(state, target, **kw)
        state = target
        history.append(target)

    go(N.QUARANTINED)
    for _ in range(max_repairs):
        go(N.RETESTING)
        due = after_retest(False, count_repairs(history), max_repairs)
        assert due == N.DRAINING
        go(due, retest_passed=False)
        go(N.DRAINED)
        go(N.REPAIRING)
    go(N.RETESTING)
    assert count_repairs(history) == 2
    assert after_retest(False, count_repairs(history), max_repairs) == N.NEEDS_HUMAN
    go(N.NEEDS_HUMAN, retest_passed=False, failed_repairs=2, max_repairs=2)
    with pytest.raises(NodeTransitionError, match="only a person may move a node out"):
        check_move(state, N.RELEASED, retest_passed=True)
    go(N.RELEASED, by_person=True)
    assert count_repairs(history) == 0


# ---- the pool limits ----


def test_max_quarantined_and_repair_budget_examples():
    assert max_quarantined(4, 0.2) == 1  # one bad node of 4 is quarantined, 3 stay in service
    assert max_quarantined(10, 0.2) == 2
    assert max_quarantined(100, 0.29) == 29  # the share as written, not 28.999...
    assert max_quarantined(0, 0.2) == 0
    assert max_quarantined(3, 0.0) == 1
    assert max_quarantined(7, 1.0) == 7
    assert repair_budget(10) == 1
    assert repair_budget(25) == 2
    assert repair_budget(9) == 1
    assert repair_budget(0) == 0
    assert repair_budget(40, 0.25) == 10
    for bad in ((-1, 0.2), (4, -0.1), (4, 1.5), (4, float("nan"))):
        with pytest.raises(ValueError):
            max_quarantined(*bad)
        with pytest.raises(ValueError):
            repair_budget(*bad)


def test_may_start_repair():
    assert may_start_repair(0, 10)
    assert not may_start_repair(1, 10)  # the issue: a budget of one repair in a 10-node pool
    assert may_start_repair(1, 20, 0.10)
    assert not may_start_repair(2, 20, 0.10)
    assert not may_start_repair(0, 0)


shares = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


@given(n=st.integers(min_value=1, max_value=5000), s=shares)
def test_max_quarantined_at_least_one_and_at_most_the_share(n, s):
    exact = Fraction(repr(s)) * n  # the share as written times the nodes
    got = max_quarantined(n, s)
    assert got >= 1
    assert got <= max(1, exact)
    assert got == max(1, floor(exact))
    assert got <= max(1, n * s + 1e-9)  # and within float rounding of n * s


@given(n=st.integers(min_value=1, max_value=5000), now=st.integers(min_value=0, max_value=600))
def test_repair_budget_at_ten_percent(n, now):
    budget = repair_budget(n)
    assert 1 <= budget <= max(1, n * Fraction(1, 10))
    assert budget == max(1, n // 10)
    assert may_start_repair(now, n) == (now < budget)


# ---- the state machine over random events ----


class NodeLife(RuleBasedStateMachine):
    """One node's life: the nightly, remediation, jobs and people act in any order."""

    @initialize(max_repairs=st.integers(min_value=0, max_value=3))
    def start(self, max_repairs):
        self.state = IN_SERVICE
        self.max_repairs = max_repairs
        self.job = False
        self.result: bool | None = None  # the result of the retest the node is in, once run
        self.repairs = 0  # repairs tried in this episode (the model's own count)
        self.history: list[NodeState] = [self.state]
        self.moves: list[dict] = []

    def move(self, target: NodeState, *, by_person: bool = False) -> bool:
        """Apply ``target`` only if the module accepts it, with the model's truth as evidence."""
        try:
            check_move(
                self.state,
                target,
                by_person=by_person,
                retest_passed=self.result,
                job_running=self.job,
                failed_repairs=self.repairs,
                max_repairs=self.max_repairs,
            )
        except NodeTransitionError:
            FIGURES["refused"] += 1
            return False
        assert target in allowed(self.state, by_person=by_person)
        self.moves.append(
            {
                "from": self.state,
                "to": target,
                "by_person": by_person,
                "retest_passed": self.result,
                "job": self.job,
                "repairs": self.repairs,
            }
        )
        if target == N.RELEASED or self.state == N.NEEDS_HUMAN:
            self.repairs = 0
        if target == N.REPAIRING:
            self.repairs += 1
        self.result = None  # a move ends the retest the node was in (or starts a new one)
        self.state = target
        self.history.append(target)
        FIGURES[target.value] += 1
        if target == N.NEEDS_HUMAN:
            FIGURES[f"needs_human after {self.repairs} repairs"] += 1
        return True

    # Rules are picked evenly among those enabled: the machine's own steps are enabled only
    # where they apply, so a run gets through drain and repair as often as people interrupt it.

    # -- jobs on the node --
    @precondition(lambda self: self.state != N.REPAIRING)
    @rule(running=st.booleans())
    def job_starts_or_stops(self, running):  # even on a drained node (a pod tolerating the taint)
        self.job = running

    # -- the nightly and the launch's transport check --
    @precondition(lambda self: self.state == N.RELEASED)
    @rule(suspect=st.booleans())
    def new_fault(self, suspect):
        assert self.move(N.SUSPECT if suspect else N.QUARANTINED)

    @precondition(lambda self: self.state in (N.SUSPECT, N.QUARANTINED))
    @rule()
    def retest_starts(self):
        assert self.move(N.RETESTING)

    @precondition(lambda self: self.state == N.RETESTING and self.result is None)
    @rule(passed=st.booleans())
    def retest_runs(self, passed):
        self.result = passed

    @precondition(lambda self: self.state == N.RETESTING and self.result is not None)
    @rule()
    def retest_judged(self):
        target = after_retest(self.result, self.repairs, self.max_repairs)
        assert self.move(target), (self.result, self.repairs, self.max_repairs)

    # -- remediation --
    @precondition(lambda self: self.state == N.DRAINING)
    @rule(evict=st.booleans())
    def drain_done(self, evict):
        if evict:
            self.job = False  # the drain evicted the job (or waited for it)
        assert self.move(N.DRAINED) != self.job

    @precondition(lambda self: self.state == N.DRAINED)
    @rule()
    def repair_started(self):
        assert self.move(N.REPAIRING) != self.job

    @precondition(lambda self: self.state == N.DRAINED and self.job)
    @rule()
    def pods_came_back(self):
        assert self.move(N.DRAINING)

    @precondition(lambda self: self.state == N.REPAIRING)
    @rule()
    def repair_finished(self):
        assert self.move(N.RETESTING)

    # -- people --
    def person_may_act(self) -> bool:
        """Where the node waits on a person (in service, needs_human), and every third move
        elsewhere: people interrupt the flow, but not so often that runs never reach repair."""
        return self.state in (N.RELEASED, N.NEEDS_HUMAN) or len(self.moves) % 3 == 0

    @precondition(lambda self: self.person_may_act())
    @rule(release=st.booleans())
    def person_acts(self, release):
        target, before = (N.RELEASED if release else N.QUARANTINED), self.state
        assert self.move(target, by_person=True) == (before != target)

    # -- anything at all: the module must refuse what breaks a rule --
    # (rule reserves the name "target"; a person acts in one in four, not to cut every run short)
    @rule(to=st.sampled_from(N), by_person=st.sampled_from([False, False, False, True]))
    def any_move(self, to, by_person):
        self.move(to, by_person=by_person)

    @invariant()
    def never_released_without_a_pass_unless_by_a_person(self):
        for m in self.moves:
            if m["to"] == N.RELEASED and not m["by_person"]:
                assert m["from"] == N.RETESTING and m["retest_passed"] is True, m

    @invariant()
    def never_repaired_while_a_job_runs(self):
        for m in self.moves:
            if m["to"] in (N.REPAIRING, N.DRAINED):
                assert not m["job"], m

    @invariant()
    def needs_human_is_left_only_by_a_person(self):
        for m in self.moves:
            if m["from"] == N.NEEDS_HUMAN:
                assert m["by_person"] and m["to"] in PERSON_TARGETS, m

    @invariant()
    def repairs_never_exceed_the_limit_before_needs_human(self):
        assert self.repairs <= self.max_repairs
        assert count_repairs(self.history) == self.repairs
        for m in self.moves:
            if m["to"] == N.NEEDS_HUMAN and not m["by_person"]:
                assert m["repairs"] >= self.max_repairs, m
            if m["to"] == N.DRAINING:
                assert m["repairs"] < self.max_repairs, m

    @invariant()
    def every_move_is_a_move_the_module_lists(self):
        for m in self.moves:
            assert m["to"] != m["from"]
            assert m["to"] in allowed(m["from"], by_person=m["by_person"])


# make test's count (it found every rule broken that 400 found: tests/support/examples.py);
# GPUFLEET_HYPOTHESIS_PROFILE=thorough runs 400
QUICK = 200


NodeLife.TestCase.settings = settings(
    max_examples=examples(thorough=400, quick=QUICK),
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_node_life = NodeLife.TestCase
