"""A node's way out of service and back: the node lifecycle's state machine and the
per-pool limits on quarantines and repairs.

Design: docs/design/node-lifecycle.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from enum import StrEnum
from fractions import Fraction
from math import floor

from gpufleet.errors import GpufleetError


class NodeTransitionError(GpufleetError):
    """A move the node lifecycle does not allow. The message is one line: the node's current
    state, the target, why not, and what the node may do instead."""


class NodeState(StrEnum):
    SUSPECT = "suspect"
    QUARANTINED = "quarantined"
    RETESTING = "retesting"
    RELEASED = "released"
    DRAINING = "draining"
    DRAINED = "drained"
    REPAIRING = "repairing"
    NEEDS_HUMAN = "needs_human"


N = NodeState
IN_SERVICE = N.RELEASED  # a node with no open ledger row is in service: it starts here
OUT_OF_SERVICE: frozenset[NodeState] = frozenset(N) - {N.RELEASED}
# What a person may do by hand, from any other state (the CLI's release and quarantine).
PERSON_TARGETS: frozenset[NodeState] = frozenset({N.RELEASED, N.QUARANTINED})
_PERSON_COMMAND = {N.RELEASED: "gpufleet node release", N.QUARANTINED: "gpufleet node quarantine"}

# The machine's own moves (the nightly, the remediation steps, a launch's transport check).
_MACHINE: dict[NodeState, frozenset[NodeState]] = {
    N.SUSPECT: frozenset({N.RETESTING}),
    N.QUARANTINED: frozenset({N.RETESTING}),
    N.RETESTING: frozenset({N.RELEASED, N.DRAINING, N.NEEDS_HUMAN}),
    N.DRAINING: frozenset({N.DRAINED}),
    N.DRAINED: frozenset({N.REPAIRING, N.DRAINING}),  # or pods came back on it: drain again
    N.REPAIRING: frozenset({N.RETESTING}),  # the repaired (or replaced) node is back
    N.RELEASED: frozenset({N.QUARANTINED, N.SUSPECT}),  # a new fault
    N.NEEDS_HUMAN: frozenset(),  # only a person
}


# States a node may stay in with a new record (``stay``): a retest that could not judge it is
# retried next night; a node that needs a person records the page sent.
STAYS: frozenset[NodeState] = frozenset({N.RETESTING, N.NEEDS_HUMAN})


def _state(value: NodeState | str, what: str) -> NodeState:
    try:
        return NodeState(value)
    except ValueError:
        known = ", ".join(NodeState)
        raise NodeTransitionError(
            f"{what} {value!r} is not a node state (known: {known})"
        ) from None


def _names(states: Iterable[NodeState]) -> str:
    ordered = sorted(states, key=list(NodeState).index)
    return ", ".join(ordered) if ordered else "nothing"


def allowed(current: NodeState, *, by_person: bool = False) -> frozenset[NodeState]:
    """The states that may follow ``current``: the machine's moves, and with ``by_person`` also
    ``released`` and ``quarantined`` (never ``current`` itself). Some moves have conditions
    that ``check_move`` checks (a passing retest to release, no job running to repair)."""
    current = _state(current, "node state")
    moves = _MACHINE[current] | (PERSON_TARGETS if by_person else frozenset())
    return moves - {current}


def _what_is_allowed(current: NodeState) -> str:
    person = _names(PERSON_TARGETS - {current})
    machine = _MACHINE[current]
    if not machine:
        return f"from {current} only a person may move it, to {person}"
    return f"from {current} it may go to {_names(machine)}, or by a person to {person}"


def _refusal(  # noqa: C901  the state machine's refusal rules, one branch each
    current: NodeState,
    target: NodeState,
    *,
    by_person: bool,
    retest_passed: bool | None,
    job_running: bool,
    failed_repairs: int | None,
    max_repairs: int | None,
    replaced: bool = False,
    stay: bool = False,
) -> str | None:
    """Why ``current -> target`` is refused, or None when it is allowed."""
    if stay:
        if target != current:
            return f"staying is not moving: a node in {current} stays in {current}"
        if current not in STAYS:
            return f"a node stays with a new record only in {_names(STAYS)}"
        return None
    if target == current:
        return "a state does not follow itself"
    if replaced:
        if (current, target) != (N.REPAIRING, N.RELEASED):
            return "only a repairing node the cloud replaced is released as replaced"
        return None
    if target not in allowed(current, by_person=by_person):
        if current == N.NEEDS_HUMAN:
            return (
                "only a person may move a node out of needs_human "
                "(gpufleet node release|quarantine NODE --reason ...)"
            )
        if target in PERSON_TARGETS:
            return f"only a person may ({_PERSON_COMMAND[target]} NODE --reason ...)"
        return "not a move of the node lifecycle"
    if by_person and target in PERSON_TARGETS:
        return None  # a person's judgement, recorded with their name
    if current == N.RETESTING and target == N.RELEASED and retest_passed is not True:
        how = "its retest failed" if retest_passed is False else "no passing retest was given"
        return f"only a passing retest releases a node ({how}), or a person"
    if current == N.RETESTING and target in (N.DRAINING, N.NEEDS_HUMAN):
        if retest_passed is not False:
            return (
                "its retest passed: release it" if retest_passed else "no failed retest was given"
            )
        if failed_repairs is not None and max_repairs is not None:
            due = after_retest(False, failed_repairs, max_repairs)
            if target != due:
                return (
                    f"{failed_repairs} of at most {max_repairs} repairs failed, so a failed "
                    f"retest goes to {due}"
                )
    if target == N.REPAIRING and job_running:
        return "a job runs on it: wait for the job or evict it (drain), then repair"
    if target == N.DRAINED and job_running:
        return "a job still runs on it: a node is drained once no job runs on it"
    return None


def check_move(  # noqa: PLR0913  the facts a move is judged by, keyword-only
    current: NodeState,
    target: NodeState,
    *,
    by_person: bool = False,
    retest_passed: bool | None = None,
    job_running: bool = False,
    failed_repairs: int | None = None,
    max_repairs: int | None = None,
    node: str | None = None,
    replaced: bool = False,
    stay: bool = False,
) -> None:
    """Raise ``NodeTransitionError`` unless ``target`` may follow ``current``.

    ``by_person``: a person acts (may release or quarantine from any state; only a person
    leaves ``needs_human``). ``retest_passed``: the result of the retest the node is in
    (releasing needs True; draining or handing to a human needs False). ``job_running``: a job
    runs on the node (refuses ``drained`` and ``repairing``). ``failed_repairs`` and
    ``max_repairs``, when both given: a failed retest must go where ``after_retest`` says.
    ``replaced``: the cloud replaced the machine of a ``repairing`` node (released, gone).
    ``stay``: a new record in the same state (``STAYS`` only). ``node``: named in the
    message."""
    current, target = _state(current, "current state"), _state(target, "target state")
    why = _refusal(
        current,
        target,
        by_person=by_person,
        retest_passed=retest_passed,
        job_running=job_running,
        failed_repairs=failed_repairs,
        max_repairs=max_repairs,
        replaced=replaced,
        stay=stay,
    )
    if why is None:
        return
    who = f"node {node}" if node else "a node"
    raise NodeTransitionError(
        f"{who} cannot go from {current} to {target}: {why}; {_what_is_allowed(current)}"
    )


def after_retest(
    passed: bool, failed_repairs: int, max_repairs: int, *, needs_person: bool = False
) -> NodeState:
    """Where a retest's result sends the node: ``released`` when it passed; else ``needs_human``
    once ``failed_repairs`` (repairs tried since the node left service, each followed by a
    failed retest: ``count_repairs``) reached ``max_repairs``, or when what failed asks for a
    person (``needs_person``: a GPU health signal NVIDIA sends to support or to a person, which
    no drain, reboot or repair settles), else ``draining`` (to repair)."""
    if failed_repairs < 0 or max_repairs < 0:
        raise ValueError(
            f"failed_repairs ({failed_repairs}) and max_repairs ({max_repairs}) must be >= 0"
        )
    if passed:
        return N.RELEASED
    return N.NEEDS_HUMAN if needs_person or failed_repairs >= max_repairs else N.DRAINING


def count_repairs(history: Sequence[NodeState | str]) -> int:
    """Repairs tried in the node's current episode: moves into ``repairing`` since it was last
    ``released`` or left ``needs_human`` (a person decided; the count starts again). Pass the
    node's states in order; during a retest that follows a repair this counts that repair."""
    count, before = 0, None
    for value in history:
        state = _state(value, "recorded state")
        if state == N.RELEASED or (before == N.NEEDS_HUMAN and state != N.NEEDS_HUMAN):
            count = 0
        if state == N.REPAIRING:
            count += 1
        before = state
    return count


def _share_of(pool_nodes: int, share: float, what: str) -> int:
    if pool_nodes < 0:
        raise ValueError(f"{what}: a pool has no fewer than 0 nodes (got {pool_nodes})")
    if not 0 <= share <= 1:
        raise ValueError(f"{what}: the share must be between 0 and 1 (got {share})")
    if pool_nodes == 0:
        return 0
    # The share as written (0.29 is 29/100), so 0.29 x 100 nodes is 29, not float's 28.99...
    return max(1, floor(Fraction(repr(float(share))) * pool_nodes))


def max_quarantined(pool_nodes: int, share: float) -> int:
    """How many of a pool's nodes may be quarantined at once: ``max(1, floor(share x nodes))``
    (0 for an empty pool). One bad node is always quarantined, even in a small pool, so the
    others stay in service; beyond this the pool is degraded and a person paged."""
    return _share_of(pool_nodes, share, "max_quarantined")


def repair_budget(pool_nodes: int, share: float = 0.10) -> int:
    """How many of a pool's nodes may be repairing at once: ``max(1, floor(share x nodes))``
    (0 for an empty pool), so a storm of faults does not become a storm of repairs."""
    return _share_of(pool_nodes, share, "repair_budget")


def may_start_repair(repairing_now: int, pool_nodes: int, share: float = 0.10) -> bool:
    """Whether one more node of the pool may start repairing (the rest wait their turn)."""
    return repairing_now < repair_budget(pool_nodes, share)
