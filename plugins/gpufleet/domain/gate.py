"""The launch gate: launch only onto proven capacity. Pure domain code, fail-closed.

A job may launch only if every target pool

- is known to the catalog and its facts could be read,
- has a passing fabric validation of its expected transport younger than ``max_age``,
- is not degraded or suspect, and has no transition in flight,
- has its Lustre filesystem's latest storage validation passing (when it has one),

and the target pools together have enough schedulable (not quarantined, not cordoned) nodes.
Anything unknown refuses; every decision carries its reasons.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

DEFAULT_MAX_AGE = timedelta(hours=26)
BLOCKING_STATES = frozenset({"degraded", "suspect", "transitioning", "retired"})


@dataclass(frozen=True)
class ValidationFact:
    passed: bool | None
    finished_at: datetime | None
    transport: str | None = None


@dataclass(frozen=True)
class PoolFacts:
    """What the ledger, the catalog and the cluster say about one pool (None = unknown)."""

    key: str
    known: bool
    expected_transport: str | None = None
    state: str | None = None
    fabric: ValidationFact | None = None
    has_filesystem: bool | None = None
    storage: ValidationFact | None = None
    transition_in_flight: bool | None = None
    schedulable_nodes: int | None = None
    error: str | None = None  # why facts could not be read


@dataclass
class GateDecision:
    launch: bool
    reasons: list[str] = field(default_factory=list)
    schedulable_nodes: int = 0

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


def pool_problems(f: PoolFacts, now: datetime, max_age: timedelta) -> list[str]:
    """Why this pool cannot take a job (empty when it can)."""
    if not f.known:
        return [f"{f.key}: unknown pool (not in the fleet catalog)"]
    if f.error:
        return [f"{f.key}: facts unreadable: {f.error}"]
    out: list[str] = []
    if f.state is None:
        out.append(f"{f.key}: no lifecycle state recorded")
    elif f.state in BLOCKING_STATES:
        out.append(f"{f.key}: pool is {f.state}")
    fab = f.fabric
    if fab is None or fab.finished_at is None or fab.passed is None:
        out.append(f"{f.key}: no fabric validation on record")
    else:
        if not fab.passed:
            out.append(f"{f.key}: the latest fabric validation failed")
        if f.expected_transport is None or fab.transport != f.expected_transport:
            out.append(
                f"{f.key}: validated transport {fab.transport or 'unknown'} is not the "
                f"expected {f.expected_transport or 'unknown'}"
            )
        if fab.finished_at > now + timedelta(minutes=5):
            out.append(f"{f.key}: fabric validation is dated in the future (clock skew?)")
        elif now - fab.finished_at > max_age:
            out.append(
                f"{f.key}: fabric validation is stale ({_age(now, fab.finished_at)} old, "
                f"limit {_age(now, now - max_age)})"
            )
    if f.has_filesystem is None:
        out.append(f"{f.key}: unknown whether the pool mounts a filesystem")
    elif f.has_filesystem:
        st = f.storage
        if st is None or st.passed is None or st.finished_at is None:
            out.append(f"{f.key}: no Lustre validation on record")
        elif not st.passed:
            out.append(f"{f.key}: the latest Lustre validation failed")
        elif now - st.finished_at > max_age:
            out.append(f"{f.key}: Lustre validation is stale ({_age(now, st.finished_at)} old)")
    if f.transition_in_flight is None:
        out.append(f"{f.key}: unknown whether a transition is in flight")
    elif f.transition_in_flight:
        out.append(f"{f.key}: a reservation transition is in flight")
    if f.schedulable_nodes is None:
        out.append(f"{f.key}: schedulable node count unknown")
    return out


def decide(
    pools: list[PoolFacts] | None, nodes: int, now: datetime, max_age: timedelta = DEFAULT_MAX_AGE
) -> GateDecision:
    """Launch or refuse, with reasons. Fail-closed: missing or stale facts refuse."""
    if not pools:
        return GateDecision(False, ["no target pool given"])
    if nodes < 1:
        return GateDecision(False, [f"a job needs at least one node (asked for {nodes})"])
    if now.tzinfo is None:
        return GateDecision(False, ["the gate's clock has no timezone"])
    reasons: list[str] = []
    for f in pools:
        reasons += pool_problems(f, now, max_age)
    free = sum(f.schedulable_nodes or 0 for f in pools)
    if not reasons and free < nodes:
        reasons.append(f"the job needs {nodes} nodes; the target pools have {free} schedulable")
    if reasons:
        return GateDecision(False, reasons, free)
    oks = [
        f"{f.key}: validated {f.fabric.transport} {_age(now, f.fabric.finished_at)} ago, "
        f"{f.schedulable_nodes} schedulable nodes"
        for f in pools
    ]
    return GateDecision(True, [*oks, f"{nodes} of {free} schedulable nodes requested"], free)
