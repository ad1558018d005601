"""The reservation transition's state machine: which step may follow which, where a
resumed run picks up, what a rollback must undo, and what each pool admits meanwhile.

Design: docs/design/workflows.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from enum import StrEnum

from gpufleet.errors import GpufleetError


class TransitionError(GpufleetError):
    """A move the state machine does not allow, or a ledger record that is not a path it
    allows (the message names the current step, the target and what is allowed)."""


class Step(StrEnum):
    PLANNED = "planned"
    PREFLIGHTED = "preflighted"
    NEW_POOL_CREATED = "new_pool_created"
    NEW_POOL_READY = "new_pool_ready"
    NEW_POOL_VALIDATED = "new_pool_validated"
    SCHEDULING_SWITCHED = "scheduling_switched"
    OLD_POOL_CORDONED = "old_pool_cordoned"
    OLD_POOL_DRAINED = "old_pool_drained"
    OLD_POOL_RETIRED = "old_pool_retired"
    DONE = "done"
    ROLLING_BACK = "rolling_back"
    ROLLED_BACK = "rolled_back"
    ABANDONED = "abandoned"
    FAILED = "failed"


FORWARD: tuple[Step, ...] = tuple(Step)[: tuple(Step).index(Step.DONE) + 1]
TERMINAL: frozenset[Step] = frozenset({Step.DONE, Step.ROLLED_BACK, Step.ABANDONED, Step.FAILED})
# Steps whose action destroys or disrupts, so never run twice once completed: cordoning stops
# new pods landing on the old pool's nodes (its queued work can no longer start there), draining
# evicts the running pods (jobs are interrupted or must be handled per the drain policy), and
# retiring deletes the pool (its nodes and anything on them are gone, with no way back).
# Creating the new pool and switching the queues are reversible (a rollback undoes them).
DESTRUCTIVE: frozenset[Step] = frozenset(
    {Step.OLD_POOL_CORDONED, Step.OLD_POOL_DRAINED, Step.OLD_POOL_RETIRED}
)

# What each forward step does, in order. The switch admits on the new pool before holding the
# old one (make before break), so some pool admits work at every instant.
FORWARD_ACTIONS: dict[Step, tuple[str, ...]] = {
    Step.PLANNED: (),
    Step.PREFLIGHTED: ("preflight_reservation",),
    Step.NEW_POOL_CREATED: ("create_new_pool",),
    Step.NEW_POOL_READY: ("wait_new_pool_ready",),
    Step.NEW_POOL_VALIDATED: ("validate_new_pool",),
    Step.SCHEDULING_SWITCHED: ("admit_new_queue", "hold_old_queue"),
    Step.OLD_POOL_CORDONED: ("cordon_old",),
    Step.OLD_POOL_DRAINED: ("drain_old",),
    Step.OLD_POOL_RETIRED: ("delete_old_pool",),
    Step.DONE: (),
}
# A rollback after the switch restores the old pool before it stops the new one (make before
# break again): uncordon and admit on the old pool, then hold, cordon, drain and delete the new.
_FULL_ROLLBACK = (
    "uncordon_old",
    "admit_old_queue",
    "hold_new_queue",
    "cordon_new",
    "drain_new",
    "delete_new_pool",
)


def _at(step: Step) -> int:
    return FORWARD.index(step)


def _step(value: Step | str, what: str) -> Step:
    try:
        return Step(value)
    except ValueError:
        known = ", ".join(Step)
        raise TransitionError(
            f"{what} {value!r} is not a transition step (known: {known})"
        ) from None


def _names(steps: Iterable[Step]) -> str:
    ordered = sorted(steps, key=list(Step).index)
    return ", ".join(ordered) if ordered else "nothing (it is final)"


def _past_no_return(in_flight: Step | None) -> bool:
    """True once the old pool's deletion has started: its action may have partly happened."""
    return (
        in_flight is not None
        and in_flight in FORWARD
        and _at(in_flight) >= _at(Step.OLD_POOL_RETIRED)
    )


def can_roll_back(current: Step, in_flight: Step | None = None) -> bool:
    """Whether ``rolling_back`` may follow ``current``: any non-terminal step before the old
    pool's retirement (after it the old pool is gone: only forward), and ``rolling_back`` itself
    (the rollback is resumed). ``in_flight``: the step started but not completed, if any; a
    started retirement refuses the rollback too."""
    if current == Step.ROLLING_BACK:
        return True
    if current in TERMINAL or _past_no_return(in_flight):
        return False
    return _at(current) < _at(Step.OLD_POOL_RETIRED)


def can_abandon(current: Step) -> bool:
    """Whether ``abandoned`` may follow ``current`` (the pools are left as they are and the
    cluster's lock released): any non-terminal step but ``rolling_back``, which must finish."""
    return current not in TERMINAL and current != Step.ROLLING_BACK


def allowed(current: Step, in_flight: Step | None = None) -> frozenset[Step]:
    """The steps that may follow ``current`` (never ``current`` itself: resuming is no move)."""
    current = _step(current, "step")
    if current in TERMINAL:
        return frozenset()
    if current == Step.ROLLING_BACK:
        return frozenset({Step.ROLLED_BACK, Step.FAILED})
    moves = {FORWARD[_at(current) + 1]}
    if can_roll_back(current):  # FAILED: a step failed and could not be rolled back by itself
        moves |= {Step.FAILED}
        if can_roll_back(current, in_flight):
            moves |= {Step.ROLLING_BACK}
    if can_abandon(current):
        moves |= {Step.ABANDONED}
    return frozenset(moves)


def check_move(current: Step, target: Step, in_flight: Step | None = None) -> None:
    """Raise ``TransitionError`` unless ``target`` may follow ``current``."""
    current, target = _step(current, "current step"), _step(target, "target step")
    moves = allowed(current, in_flight)
    if target in moves:
        return
    why = ""
    if target == Step.ROLLING_BACK and _past_no_return(in_flight) and current not in TERMINAL:
        why = " (the old pool's deletion has started: only forward, finish the run)"
    elif target == current:
        why = " (a step does not follow itself: a resumed run redoes it without a move)"
    raise TransitionError(
        f"transition cannot go from {current} to {target}{why}; from {current} it may go to "
        f"{_names(moves)}"
    )


def next_forward(current: Step) -> Step | None:
    """The forward step after ``current``; None at ``done``, a terminal step or a rollback."""
    if current not in FORWARD or current == Step.DONE:
        return None
    return FORWARD[_at(current) + 1]


def last_forward(completed: Sequence[Step]) -> Step | None:
    """The last forward step among the steps recorded completed (None if there is none)."""
    forward = [s for s in completed if s in FORWARD]
    return forward[-1] if forward else None


def in_flight(started: Sequence[Step], completed: Sequence[Step]) -> Step | None:
    """The furthest forward step recorded started but never completed (a crash interrupted its
    action, which may have partly happened), or None. Pass it to ``allowed``, ``check_move``,
    ``can_roll_back`` and ``rollback_actions``."""
    done = set(completed)
    pending = [Step(s) for s in started if s in FORWARD and s not in done]
    return max(pending, key=_at) if pending else None


def resume_point(completed: Sequence[Step]) -> Step:
    """The step a resumed run works on next, from the steps recorded completed, in order: the
    one after the last (a step started but not completed is simply redone), ``planned`` when
    nothing was recorded, ``rolled_back`` during a rollback. Never a completed step. Raises
    ``TransitionError`` when the record is not a path the machine allows or has ended."""
    steps = [_step(s, "recorded step") for s in completed]
    if not steps:
        return Step.PLANNED
    if steps[0] != Step.PLANNED:
        raise TransitionError(
            f"the ledger's transition record starts at {steps[0]}, not {Step.PLANNED}: "
            "it is not a record this machine wrote; inspect it before resuming"
        )
    for before, after in zip(steps, steps[1:], strict=False):
        if after not in allowed(before):
            raise TransitionError(
                f"the ledger's transition record has {after} after {before}, which the machine "
                f"does not allow (from {before}: {_names(allowed(before))}); inspect it before "
                "resuming"
            )
    current = steps[-1]
    if current in TERMINAL:
        raise TransitionError(
            f"the transition ended {current}: there is nothing to resume; start a new one"
        )
    if current == Step.ROLLING_BACK:
        return Step.ROLLED_BACK
    step = next_forward(current)
    assert step is not None  # every non-terminal forward step has a successor
    return step


def rollback_actions(current: Step, in_flight: Step | None = None) -> tuple[str, ...]:
    """What a rollback from the forward step ``current`` must do, in order (each idempotent;
    a resumed rollback does them all again). ``in_flight``: the step started but not completed,
    whose action may have partly happened (a half-created pool is deleted too)."""
    current = _step(current, "step")
    if current not in FORWARD or not can_roll_back(current, in_flight):
        raise TransitionError(
            f"no rollback from {current}: a rollback starts from a forward step before "
            f"{Step.OLD_POOL_RETIRED} (pass the last forward step completed; after the old "
            "pool's deletion started only forward is safe)"
        )
    reached = _at(current)
    if in_flight is not None and in_flight in FORWARD:
        reached = max(reached, _at(in_flight))
    if reached >= _at(Step.SCHEDULING_SWITCHED):
        return _FULL_ROLLBACK
    if reached >= _at(Step.NEW_POOL_CREATED):
        return ("delete_new_pool",)
    return ()


def _as_forward(current: Step, last: Step | None, what: str) -> Step:
    if current in FORWARD:
        return current
    if last is None or last not in FORWARD:
        raise TransitionError(
            f"{what} at {current} depends on the last forward step completed: pass last_forward"
        )
    return last


def admission(current: Step, last_forward: Step | None = None) -> tuple[bool, bool]:
    """(old pool admits new work, new pool admits new work) at ``current``. The old pool admits
    until ``scheduling_switched`` and again once ``rolled_back``; the new one from
    ``scheduling_switched`` on, never once rolled back. ``rolling_back``, ``failed`` and
    ``abandoned``: as at ``last_forward`` (required for them)."""
    current = _step(current, "step")
    if current == Step.ROLLED_BACK:
        return (True, False)
    step = _as_forward(current, last_forward, "admission")
    switched = _at(step) >= _at(Step.SCHEDULING_SWITCHED)
    return (not switched, switched)


def gate_refusal(
    current: Step, role: str, new_pool: str, old_pool: str, last_forward: Step | None = None
) -> str | None:
    """Why the gate refuses a launch onto a pool in a transition at ``current`` (``role``: "old"
    or "new"), or None (the usual rules then apply). The new pool is refused until validated,
    the old one from the switch on; ``rolled_back``: old allowed, new refused; ``done``: new
    allowed, old refused. ``failed``/``abandoned``: as at ``last_forward``; without it both are
    refused (fail closed)."""
    current = _step(current, "step")
    if role not in ("old", "new"):
        raise TransitionError(f"gate role {role!r} is neither 'old' nor 'new'")
    pool = new_pool if role == "new" else old_pool
    ended = current in (Step.FAILED, Step.ABANDONED)
    if ended and last_forward is None:
        return (
            f"{pool} is in a transition ({old_pool} -> {new_pool}) that ended {current} at an "
            "unknown step: inspect its ledger record before launching there"
        )
    if current == Step.ROLLED_BACK or current == Step.ROLLING_BACK:
        if role == "old":
            return None
        verb = "was" if current == Step.ROLLED_BACK else "is being"
        return (
            f"{new_pool} {verb} rolled back by a transition from {old_pool}: not in service, "
            f"launch on {old_pool}"
        )
    step = _as_forward(current, last_forward, "the gate")
    how = f"that ended {current} at {step}" if ended else ""
    if role == "new":
        if _at(step) < _at(Step.NEW_POOL_VALIDATED):
            if ended:
                return (
                    f"{new_pool} was brought up by a transition from {old_pool} {how}: "
                    "not validated"
                )
            return (
                f"{new_pool} is being brought up by a transition from {old_pool}: not validated yet"
            )
        return None
    if _at(step) >= _at(Step.OLD_POOL_RETIRED):
        return f"{old_pool} was retired by a transition to {new_pool}: launch on {new_pool} instead"
    if _at(step) >= _at(Step.SCHEDULING_SWITCHED):
        lead = (
            f"was being retired by a transition {how}"
            if ended
            else "is being retired by a transition"
        )
        return f"{old_pool} {lead}: launch on {new_pool} instead"
    return None
