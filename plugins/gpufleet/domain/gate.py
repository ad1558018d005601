"""The launch gate: launch only onto proven capacity. Pure domain code, fail-closed.

Design: docs/design/workflows.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import TypeVar

from gpufleet.domain.health.catalog import HealthAction

DEFAULT_MAX_AGE = timedelta(hours=26)
MAX_SKEW = timedelta(minutes=5)  # a fact dated further ahead than this refuses


E = TypeVar("E", bound=StrEnum)


class FactError(ValueError):
    """A fact read from the ledger is not one this code knows (the message names the value)."""


class PoolState(StrEnum):
    READY = "ready"
    VALIDATED = "validated"
    DRIFTING = "drifting"  # passes, but its figures move away from its own history (a warning)
    DEGRADED = "degraded"
    SUSPECT = "suspect"
    TRANSITIONING = "transitioning"
    RETIRED = "retired"


# the allow-list; DRIFTING launches with a warning unless the pool blocks on drift
LAUNCHABLE_STATES = frozenset({PoolState.READY, PoolState.VALIDATED, PoolState.DRIFTING})


class TransitionState(StrEnum):
    RUNNING = "running"
    DONE = "done"
    ROLLED_BACK = "rolled_back"
    FAILED = "failed"


FINISHED_TRANSITIONS = frozenset(
    {TransitionState.DONE, TransitionState.ROLLED_BACK, TransitionState.FAILED}
)


class Verdict(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    ERROR = "error"  # the validation could not finish


def read_enum(kind: type[E], value: object, what: str) -> E:
    """``value`` as a member of ``kind``, exactly (no case folding, no trimming)."""
    if isinstance(value, str):  # a lookup by value: the fleet page reads tens of thousands
        member = kind._value2member_map_.get(value)
        if member is not None:
            return member  # type: ignore[return-value]
    known = ", ".join(m.value for m in kind)
    raise FactError(f"{what} {value!r} is not one this gpufleet knows ({known})")


def read_flag(value: object, what: str) -> bool:
    """A stored boolean: True/False or the integers 0/1, nothing else."""
    if isinstance(value, bool):
        return value
    if type(value) is int and value in (0, 1):
        return bool(value)
    raise FactError(f"{what} {value!r} is neither true nor false")


def read_time(value: object, what: str) -> datetime:
    """A stored timestamp: an aware datetime (a naive one is taken as UTC, as SQLite stores)."""
    if not isinstance(value, datetime):
        raise FactError(f"{what} {value!r} is not a timestamp")
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def read_text(value: object, what: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise FactError(f"{what} {value!r} is not text")


@dataclass(frozen=True)
class ValidationFact:
    passed: bool | None
    finished_at: datetime
    transport: str | None = None
    verdict: Verdict | None = None  # only Verdict.PASS (with passed True) counts as a pass
    reason: str | None = None  # the first reason recorded (why an ``error`` could not finish)


def read_validation(row: dict | None, what: str) -> ValidationFact | None:
    """A ``gf_validations`` row as a strict fact (FactError for anything unknown)."""
    if row is None:
        return None
    passed = read_flag(row.get("passed"), f"{what} passed")
    verdict = read_enum(Verdict, row.get("verdict"), f"{what} verdict")
    if passed != (verdict is Verdict.PASS):
        raise FactError(f"{what} says passed={passed} but verdict {verdict.value!r}")
    reasons = row.get("reasons")
    reason = reasons[0] if isinstance(reasons, list) and reasons else None
    return ValidationFact(
        passed,
        read_time(row.get("finished_at"), f"{what} finished_at"),
        read_text(row.get("transport"), f"{what} transport"),
        verdict,
        reason if isinstance(reason, str) else None,
    )


# how a health row's reason (``services.validation.health.health_row``) ends for a node that failed
# its check and was left in service because the pool's quarantine cap held
LEFT_IN_SERVICE = "(left in service: the quarantine cap)"


@dataclass(frozen=True)
class HealthFact:
    """The pool's latest GPU health check (its ``health`` row): when it finished, its verdict,
    each node it found unhealthy with NVIDIA's action (node -> action; ``healthy``,
    ``could_not_run`` and not checked are left out), those it says it left in service (the
    quarantine cap held), and each node whose check could not run with why (node -> the
    check's reason)."""

    finished_at: datetime
    verdict: Verdict
    failed: Mapping[str, str] = field(default_factory=dict)
    left_in_service: frozenset[str] = frozenset()
    could_not_run: Mapping[str, str] = field(default_factory=dict)


def read_health(row: dict | None, what: str) -> HealthFact | None:
    """A ``health`` row as a strict fact: its verdict and time as any validation's, each node's
    ``details.nodes[node].action`` a ``HealthAction`` or None (not checked: rows written before
    the ``could_not_run`` verdict held None for a check that could not run); FactError else.
    A ``could_not_run`` node's why is the first of its ``reasons``."""
    fact = read_validation(row, what)
    if fact is None or row is None:
        return None
    details = row.get("details") or {}
    nodes = (details.get("nodes") or {}) if isinstance(details, dict) else None
    if not isinstance(nodes, dict):
        raise FactError(f"{what} details {details!r} hold no mapping of nodes")
    failed: dict[str, str] = {}
    unrun: dict[str, str] = {}
    for node, check in nodes.items():
        if not isinstance(node, str) or not isinstance(check, dict):
            raise FactError(f"{what} node {node!r}: {check!r} is not a node's check")
        if check.get("action") is None:  # not checked
            continue
        action = read_enum(HealthAction, check.get("action"), f"{what} action of {node}")
        if action is HealthAction.COULD_NOT_RUN:
            reasons = check.get("reasons")
            why = reasons[0] if isinstance(reasons, list) and reasons else None
            unrun[node] = why if isinstance(why, str) and why else "no reason was recorded"
        elif action is not HealthAction.HEALTHY:
            failed[node] = action.value
    listed = details.get("left_in_service")
    if isinstance(listed, list):
        left = {n for n in listed if isinstance(n, str)}
    else:  # a row written before details.left_in_service: its reasons say it
        raw = row.get("reasons")
        reasons = raw if isinstance(raw, list) else []
        left = {
            r.split(": ", 1)[0]
            for r in reasons
            if isinstance(r, str) and r.endswith(LEFT_IN_SERVICE)
        }
    assert fact.verdict is not None  # read_validation reads one or raises
    return HealthFact(
        fact.finished_at, fact.verdict, failed, frozenset(left & failed.keys()), unrun
    )


@dataclass(frozen=True)
class PoolFacts:
    """What the ledger, the catalog and the cluster say about one pool (None = unknown)."""

    key: str
    known: bool
    expected_transport: str | None = None
    state: PoolState | None = None
    state_reason: str | None = None  # why the pool is in its state (a drift's figures)
    block_on_drift: bool | None = None  # the catalog refuses the pool while it drifts
    fabric: ValidationFact | None = None
    has_filesystem: bool | None = None
    storage: ValidationFact | None = None
    transition_in_flight: bool | None = None  # True: a transition refuses this pool
    transition_reason: str | None = None  # why (domain.transition.gate_refusal)
    schedulable_nodes: int | None = None
    error: str | None = None  # why facts could not be read
    health: HealthFact | None = None  # the latest GPU health check (None: never run)
    free_nodes: frozenset[str] | None = None  # the schedulable nodes by name (None: a count)
    # nodes whose newest bad signal (the event path's) is newer than the pool's validation:
    # node -> the sentence naming it (``domain.signals.newer_bad_signals``)
    signalled: Mapping[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.key.split("/", 1)[-1]


@dataclass
class GateDecision:
    launch: bool
    reasons: list[str] = field(default_factory=list)
    schedulable_nodes: int = 0  # on the chosen pool (on refusal: the most any pool had)
    pool: str | None = None  # the chosen pool (a launch only)

    def text(self) -> str:
        head = "LAUNCH" if self.launch else "REFUSE"
        return "\n".join([head, *(f"- {r}" for r in self.reasons)])


def _age(now: datetime, then: datetime) -> str:
    seconds = (now - then).total_seconds()
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    hours = seconds / 3600
    return f"{hours:.1f} h" if hours < 48 else f"{hours / 24:.1f} days"


def _fresh_span(fact: ValidationFact, max_age: timedelta) -> tuple[datetime, datetime]:
    """When a validation counts as fresh: from ``finished_at - MAX_SKEW`` (before it, it is
    dated in the future) to ``finished_at + max_age`` (after it, it is stale)."""
    return fact.finished_at - MAX_SKEW, fact.finished_at + max_age


def _validation_problems(
    key: str, name: str, fact: ValidationFact, now: datetime, max_age: timedelta
) -> list[str]:
    out: list[str] = []
    if fact.verdict is Verdict.ERROR:
        out.append(f"{key}: the latest {name} validation could not finish: {fact.reason}")
    elif fact.passed is not True or fact.verdict is not Verdict.PASS:
        out.append(f"{key}: the latest {name} validation failed")
    future, stale = _fresh_span(fact, max_age)
    if now < future:
        out.append(f"{key}: {name} validation is dated in the future (clock skew?)")
    elif now > stale:
        out.append(
            f"{key}: {name} validation is stale ({_age(now, fact.finished_at)} old, "
            f"limit {_age(now, now - max_age)})"
        )
    return out


def pool_problems(f: PoolFacts, now: datetime, max_age: timedelta) -> list[str]:
    """Why this pool cannot take a job (empty when it can), whatever the job's size."""
    if not f.known:
        return [f"{f.key}: unknown pool (not in the fleet catalog)"]
    if f.error:
        return [f"{f.key}: facts unreadable: {f.error}"]
    out: list[str] = []
    if f.state is None:
        out.append(f"{f.key}: no lifecycle state recorded")
    elif not isinstance(f.state, PoolState):
        out.append(f"{f.key}: pool state {f.state!r} is not one this gpufleet knows")
    elif f.state not in LAUNCHABLE_STATES:
        why = f" ({f.state_reason})" if f.state_reason else ""  # what put it there
        out.append(f"{f.key}: pool is {f.state.value}{why}")
    elif f.state is PoolState.DRIFTING and f.block_on_drift is not False:
        why = "the catalog sets block_on_drift" if f.block_on_drift else "unknown block_on_drift"
        out.append(f"{f.key}: pool is drifting ({why}): {f.state_reason or 'no figures recorded'}")
    fab = f.fabric
    if fab is None or fab.finished_at is None or fab.passed is None:
        out.append(f"{f.key}: no fabric validation on record")
    else:
        out += _validation_problems(f.key, "fabric", fab, now, max_age)
        if f.expected_transport is None or fab.transport != f.expected_transport:
            out.append(
                f"{f.key}: validated transport {fab.transport or 'unknown'} is not the "
                f"expected {f.expected_transport or 'unknown'}"
            )
    if f.has_filesystem is None:
        out.append(f"{f.key}: unknown whether the pool mounts a filesystem")
    elif f.has_filesystem is not False:
        st = f.storage
        if st is None or st.passed is None or st.finished_at is None:
            out.append(f"{f.key}: no Lustre validation on record")
        else:
            out += _validation_problems(f.key, "Lustre", st, now, max_age)
    if f.transition_in_flight is None:
        out.append(f"{f.key}: unknown whether a transition is in flight")
    elif f.transition_in_flight is not False:
        out.append(f"{f.key}: {f.transition_reason or 'a reservation transition is in flight'}")
    if f.schedulable_nodes is None:
        out.append(f"{f.key}: schedulable node count unknown")
    return out


def problems_change_at(f: PoolFacts, now: datetime, max_age: timedelta) -> datetime | None:
    """Until when ``pool_problems(f, t, max_age)`` says what it says at ``now``, for every ``t``
    from ``now`` up to (not including) the answer: the first moment after ``now`` a validation
    turns stale or stops being dated in the future. ``now`` itself while a validation is stale
    (its problem names how old it is, so its text moves with the clock); None when the clock
    changes nothing. A reader that keeps verdicts between requests re-judges from then on."""
    if not f.known or f.error:
        return None  # refused before any validation is looked at
    until: datetime | None = None
    judged = (f.fabric, f.storage if f.has_filesystem not in (None, False) else None)
    for fact in judged:
        if fact is None or fact.finished_at is None:
            continue
        future, stale = _fresh_span(fact, max_age)
        if now > stale:
            return now
        for moment in (future, stale):
            if moment >= now and (until is None or moment < until):
                until = moment
    return until


def unhealthy_in_service(f: PoolFacts) -> dict[str, str]:
    """The nodes counted in ``schedulable_nodes`` whose latest GPU health check failed, each
    with NVIDIA's action, and those whose latest check could not run (``could_not_run``): the
    nodes no job may be placed on until a check runs. By name when the cluster's nodes were
    listed (``free_nodes``); from a count (a ledger snapshot), the failed nodes the check says
    it left in service and every node that could not run (never quarantined by the check: the
    count holds it unless another verdict took it out, which a count cannot tell: left out all
    the same, fail-closed). A quarantined node is not counted anyway; a check never run leaves
    out nothing, and its age or an ``error`` verdict refuses nothing by itself: health informs
    when it ran."""
    h = f.health
    if h is None:
        return {}
    unrun = set(h.could_not_run)
    counted = f.free_nodes if f.free_nodes is not None else h.left_in_service | unrun
    out = {n: a for n, a in h.failed.items() if n in counted}
    out.update({n: HealthAction.COULD_NOT_RUN.value for n in unrun if n in counted})
    return dict(sorted(out.items()))


def signalled_in_service(f: PoolFacts, unhealthy: Mapping[str, str]) -> dict[str, str]:
    """The nodes counted in ``schedulable_nodes`` (not already left out as ``unhealthy``)
    whose newest bad signal is newer than the pool's validation: by name when the nodes were
    listed; from a count, every one (fail-closed: a count cannot tell)."""
    counted = f.free_nodes
    return {
        n: why
        for n, why in sorted(f.signalled.items())
        if n not in unhealthy and (counted is None or n in counted)
    }


def _signalled_out(f: PoolFacts, signalled: Mapping[str, str]) -> list[str]:
    if not signalled:
        return []
    return [
        f"{f.key}: not counting {len(signalled)} node(s) with a bad signal newer than the "
        f"pool's validation: {'; '.join(signalled.values())}"
    ]


def _left_out(f: PoolFacts, unhealthy: Mapping[str, str]) -> list[str]:
    """Why the gate does not count ``unhealthy`` (:func:`unhealthy_in_service`): the failed
    nodes with NVIDIA's action, the nodes whose check could not run with why."""
    unrun = HealthAction.COULD_NOT_RUN.value
    whys = f.health.could_not_run if f.health is not None else {}
    failed = {n: a for n, a in unhealthy.items() if a != unrun}
    out = []
    if failed:
        listed = ", ".join(f"{n} (NVIDIA: {a})" for n, a in failed.items())
        out.append(
            f"{f.key}: not counting {len(failed)} node(s) that failed their latest GPU health "
            f"check and are still in service: {listed}"
        )
    if blocked := [n for n, a in unhealthy.items() if a == unrun]:
        listed = ", ".join(
            f"{n} (its latest GPU health check could not run: {whys.get(n, 'no reason')})"
            for n in blocked
        )
        out.append(
            f"{f.key}: not counting {len(blocked)} node(s) until a GPU health check runs on "
            f"them: {listed}"
        )
    return out


def decide(
    pools: list[PoolFacts] | None, nodes: int, now: datetime, max_age: timedelta = DEFAULT_MAX_AGE
) -> GateDecision:
    """Launch onto the first sound pool that can hold the whole job, or refuse; with reasons
    for every pool. Fail-closed: missing, unknown or stale facts refuse."""
    if not pools:
        return GateDecision(False, ["no target pool given"])
    if type(nodes) is not int or nodes < 1:
        return GateDecision(False, [f"a job needs at least one node (asked for {nodes})"])
    if now.tzinfo is None:
        return GateDecision(False, ["the gate's clock has no timezone"])
    seen: dict[str, PoolFacts] = {}
    for f in pools:  # a repeated pool counts once
        seen.setdefault(f.key, f)
    chosen: PoolFacts | None = None
    skipped: list[str] = []
    most = usable = 0
    for f in seen.values():
        if chosen is not None:
            skipped.append(f"{f.key}: not used: {chosen.key} comes first and can take the job")
            continue
        problems = pool_problems(f, now, max_age)
        unhealthy = unhealthy_in_service(f)
        signalled = signalled_in_service(f, unhealthy)
        free = f.schedulable_nodes if type(f.schedulable_nodes) is int else 0
        free = max(0, free - len(unhealthy) - len(signalled))
        most = max(most, free)
        if not problems and free < nodes:
            problems = [
                f"{f.key}: the job needs {nodes} nodes; the pool has {free} schedulable "
                "(a job runs within one pool)"
            ]
            problems += _left_out(f, unhealthy) + _signalled_out(f, signalled)
        if problems:
            skipped += problems
        else:
            chosen, usable = f, free
    if chosen is None:
        return GateDecision(False, skipped, most)
    fab = chosen.fabric
    assert fab is not None  # a pool without one is skipped above
    ok = (
        f"{chosen.key}: validated {fab.transport} {_age(now, fab.finished_at)} ago, "
        f"{usable} schedulable nodes; chosen for {nodes} nodes"
    )
    unhealthy = unhealthy_in_service(chosen)
    warnings = _left_out(chosen, unhealthy)
    warnings += _signalled_out(chosen, signalled_in_service(chosen, unhealthy))
    if chosen.state is PoolState.DRIFTING:
        warnings.append(
            f"{chosen.key}: warning: launching on a drifting pool: "
            f"{chosen.state_reason or 'no figures recorded'}"
        )
    return GateDecision(True, [ok, *warnings, *skipped], usable, chosen.name)
