"""The remediation ladder, the blast-radius breakers and the behaviour profiles (issue 34;
docs/remediation.md). Pure: no I/O, no clients; the services feed it the ledger's evidence.

- **The ladder**, per node: GPU reset -> reboot -> the provider's repair -> ``needs_human``.
  A node starts at the rung NVIDIA's recommended action names (``HealthAction``: ``reset_gpu``,
  ``reboot``, ``repair``, ``needs_human``; no GPU health check behind it: ``repair``). Each rung
  is tried once: a node that fails again climbs above the highest rung it was given in its
  current incident or in the window (``window_days``), it never repeats one. Every reset and
  reboot reboots the machine (gpufleet resets a GPU by rebooting its drained node), and at most
  ``max_reboots`` happen in the window (GPUd's threshold: 2 in 7 days); past that the reboot
  rungs are skipped.
- **Breakers** at pool, cluster and fleet scope, each ``max(absolute, percent of nodes)``: when
  more nodes of a scope are out of service or were acted on in the breaker window than its
  limit, the breaker trips and no automated action runs in that scope until a person resets it.
- **Profiles** per pool (``observe``, ``quarantine``, ``remediate``) and a fleet-wide dry run:
  what a profile or the dry run holds back is recorded as "would have", nothing changes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from fractions import Fraction
from math import floor
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gpufleet.domain.inputs import Flag


class Rung(StrEnum):
    """The ladder's rungs, lowest first."""

    RESET_GPU = "reset_gpu"
    REBOOT = "reboot"
    REPAIR = "repair"
    NEEDS_HUMAN = "needs_human"


LADDER: tuple[Rung, ...] = tuple(Rung)
# rungs that reboot the machine today (a GPU reset is a reboot of the drained node)
REBOOTS: frozenset[Rung] = frozenset({Rung.RESET_GPU, Rung.REBOOT})
# NVIDIA's recommended action (``domain.health.HealthAction``) -> the rung a node starts at
_START = {
    "reset_gpu": Rung.RESET_GPU,
    "reboot": Rung.REBOOT,
    "repair": Rung.REPAIR,
    "needs_human": Rung.NEEDS_HUMAN,
}

Profile = Literal["observe", "quarantine", "remediate"]
PROFILES: tuple[str, ...] = ("observe", "quarantine", "remediate")
# what each profile lets the machine do to a node (a person's moves are never held back)
_PROFILE_ACTIONS: dict[str, frozenset[str]] = {
    "observe": frozenset(),
    "quarantine": frozenset({"quarantine", "suspect"}),
    "remediate": frozenset({"quarantine", "suspect", "drain", "reset_gpu", "reboot", "repair"}),
}
ACTIONS: tuple[str, ...] = ("quarantine", "suspect", "drain", "reset_gpu", "reboot", "repair")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Breaker(_Model):
    """One scope's limit: ``max(absolute, floor(percent% x nodes))`` nodes out of service or
    acted on in the breaker window."""

    absolute: int = Field(ge=0, le=100_000)
    percent: float = Field(ge=0, le=100, allow_inf_nan=False)

    def limit(self, nodes: int) -> int:
        if nodes < 0:
            raise ValueError(f"a scope has no fewer than 0 nodes (got {nodes})")
        # the percent as written (7.5 is 75/1000), so 10% of 30 is 3, not float's 2.99...
        share = Fraction(repr(float(self.percent))) / 100
        return max(self.absolute, floor(share * nodes))

    def words(self, nodes: int) -> str:
        return f"max({self.absolute}, {self.percent:g}% of {nodes}) = {self.limit(nodes)}"


class Breakers(_Model):
    pool: Breaker = Breaker(absolute=2, percent=20)
    cluster: Breaker = Breaker(absolute=4, percent=10)
    fleet: Breaker = Breaker(absolute=10, percent=5)


class RemediationPolicy(_Model):
    """The fleet's remediation settings (the catalog's top-level ``remediation``)."""

    dry_run: Flag = Field(
        default=False,
        description="true: no automated quarantine, drain, reboot or repair anywhere; each is "
        "recorded as 'would have' in the ledger",
    )
    max_reboots: int = Field(
        default=2, ge=0, le=100, description="reboots (GPU resets included) per node per window"
    )
    window_days: float = Field(default=7, gt=0, le=365, allow_inf_nan=False)
    breaker_window_hours: float = Field(default=24, gt=0, le=24 * 365, allow_inf_nan=False)
    breakers: Breakers = Breakers()

    @property
    def window(self) -> timedelta:
        return timedelta(days=self.window_days)

    @property
    def breaker_window(self) -> timedelta:
        return timedelta(hours=self.breaker_window_hours)


DEFAULT_POLICY = RemediationPolicy()


# --- the ladder -----------------------------------------------------------------------------


def start_rung(action: str | None) -> Rung:
    """The rung NVIDIA's recommended action names; a failure with no GPU health action behind
    it (a fabric fault) starts at the provider's repair, as before the ladder."""
    return _START.get(str(action) if action is not None else "", Rung.REPAIR)


@dataclass(frozen=True)
class Tried:
    """One rung given to the node: when, and in which of its incidents (1, 2, ...)."""

    rung: Rung
    at: datetime
    incident: int


def rung_of(evidence: Mapping[str, Any] | None) -> Rung | None:
    """The rung a ``repairing`` move records (``rung``; before the ladder: ``kind``, reboot or
    repair)."""
    evidence = evidence or {}
    value = evidence.get("rung") or evidence.get("kind")
    try:
        return Rung(value) if value else None
    except ValueError:
        return None


def rungs_tried(events: Iterable[Mapping[str, Any]]) -> list[Tried]:
    """The rungs a node was given, from its lifecycle events in order (``gf_node_events``:
    ``from_state``, ``to_state``, ``evidence``, ``at``). An incident starts each time the node
    leaves service (a move from ``released``, or its first move)."""
    out: list[Tried] = []
    incident = 0
    for event in events:
        if event.get("from_state") in (None, "released") and event.get("to_state") != "released":
            incident += 1
        if event.get("to_state") == "repairing":
            rung = rung_of(event.get("evidence"))
            if rung is not None:
                out.append(Tried(rung, event["at"], max(incident, 1)))
    return out


@dataclass(frozen=True)
class LadderStep:
    """The rung to give a node now, why, and the figures behind it."""

    rung: Rung
    reason: str
    reboots_in_window: int
    tried: tuple[Tried, ...]

    @property
    def reboots(self) -> bool:
        return self.rung in REBOOTS


def next_rung(
    events: Sequence[Mapping[str, Any]],
    action: str | None,
    now: datetime,
    policy: RemediationPolicy = DEFAULT_POLICY,
    nvidia: str | None = None,
) -> LadderStep:
    """The rung for a node that failed (again): from NVIDIA's ``action``, climbing above every
    rung given in its current incident or in the window, skipping the reboot rungs once
    ``max_reboots`` reboots happened in the window. ``nvidia``: NVIDIA's words for the fault,
    kept in the reason of a ``needs_human``."""
    tried = rungs_tried(events)
    incident = _incidents(events)
    since = now - policy.window
    counted = [t for t in tried if t.at >= since or t.incident == incident]
    start = start_rung(action)
    rung = start
    if counted:
        top = max(LADDER.index(t.rung) for t in counted)
        rung = LADDER[max(LADDER.index(start), min(top + 1, len(LADDER) - 1))]
    reboots = sum(1 for t in tried if t.at >= since and t.rung in REBOOTS)
    skipped = False
    while rung in REBOOTS and reboots >= policy.max_reboots:
        rung, skipped = LADDER[LADDER.index(rung) + 1], True
    given = ", ".join(t.rung.value for t in counted)
    parts = [f"NVIDIA's action {action or 'none'} starts at {start}"]
    if counted:
        days = f"{policy.window_days:g}"
        parts.append(f"already given in this incident or the last {days} days: {given}")
    if skipped:
        parts.append(
            f"{reboots} reboot(s) in the last {policy.window_days:g} days, at most "
            f"{policy.max_reboots}"
        )
    reason = "; ".join(parts)
    if rung is Rung.NEEDS_HUMAN:
        said = f"NVIDIA: {nvidia}" if nvidia else "no rung of the ladder is left"
        reason = f"{said} ({reason})"
    return LadderStep(rung, reason, reboots, tuple(tried))


def _incidents(events: Iterable[Mapping[str, Any]]) -> int:
    return sum(
        1
        for e in events
        if e.get("from_state") in (None, "released") and e.get("to_state") != "released"
    )


# --- profiles and the dry run ------------------------------------------------------------------


def held_back(action: str, profile: str, dry_run: bool) -> str | None:
    """Why the machine may not take ``action`` on a node of a pool with ``profile`` (None: it
    may): the fleet's dry run, or the pool's profile. What is held back is recorded as 'would
    have'."""
    if action not in ACTIONS:
        raise ValueError(f"{action!r} is not a remediation action ({', '.join(ACTIONS)})")
    if profile not in _PROFILE_ACTIONS:
        raise ValueError(f"{profile!r} is not a behaviour profile ({', '.join(PROFILES)})")
    if dry_run:
        return "the fleet's remediation dry run is on"
    if action not in _PROFILE_ACTIONS[profile]:
        return f"the pool's behaviour profile is {profile}"
    return None


# --- breakers ---------------------------------------------------------------------------------

SCOPES: tuple[str, ...] = ("pool", "cluster", "fleet")


@dataclass(frozen=True)
class ScopeCount:
    """One breaker's scope: its kind (pool, cluster, fleet), its key (``cluster/pool``,
    ``cluster`` or ``fleet``), its nodes and how many are out of service or were acted on in
    the breaker window (since the breaker's last reset)."""

    scope: str
    key: str
    nodes: int
    affected: int


@dataclass(frozen=True)
class Trip:
    """A breaker that tripped (new: to be recorded) or stays tripped (recorded earlier)."""

    scope: str
    key: str
    reason: str
    affected: int
    limit: int
    new: bool


@dataclass(frozen=True)
class BreakerVerdict:
    proceed: bool
    reason: str | None = None
    trip: Trip | None = None


def judge_breakers(
    counts: Sequence[ScopeCount],
    policy: RemediationPolicy = DEFAULT_POLICY,
    tripped: Mapping[tuple[str, str], str] | None = None,
) -> BreakerVerdict:
    """Whether an automated action may proceed: not while a breaker of one of its scopes is
    tripped (``tripped``: ``(scope, key) -> reason`` of trips no person reset yet), nor when a
    scope's ``affected`` nodes exceed its limit (a new trip). One reason names the breaker."""
    tripped = tripped or {}
    for count in counts:
        if count.scope not in SCOPES:
            raise ValueError(f"{count.scope!r} is not a breaker scope ({', '.join(SCOPES)})")
        why = tripped.get((count.scope, count.key))
        if why is not None:
            reason = (
                f"the {count.scope} breaker {count.key} is tripped ({why}): no automated action "
                "until a person resets it (gpufleet node breaker-reset)"
            )
            return BreakerVerdict(False, reason, Trip(count.scope, count.key, why, 0, 0, False))
    for count in counts:
        breaker: Breaker = getattr(policy.breakers, count.scope)
        limit = breaker.limit(count.nodes)
        if count.affected > limit:
            why = (
                f"{count.affected} of {count.nodes} nodes out of service or acted on in the "
                f"last {policy.breaker_window_hours:g}h, more than {breaker.words(count.nodes)}"
            )
            reason = f"the {count.scope} breaker {count.key} tripped: {why}"
            return BreakerVerdict(
                False, reason, Trip(count.scope, count.key, why, count.affected, limit, True)
            )
    return BreakerVerdict(True)


# --- approvals (docs/remediation.md#approvals) ------------------------------------------------

#: What waits for a person's approval: a transition's retire of the old pool, a sub-block's
#: report to the provider (it disrupts every VM on the rack), a repair that takes a pool below
#: its floor, a breaker reset asked for from Airflow.
RETIRE_POOL, REPORT_SUBBLOCK = "retire_pool", "report_subblock"
REPAIR_BELOW_FLOOR, BREAKER_RESET = "repair_below_floor", "breaker_reset"
APPROVAL_KINDS = (RETIRE_POOL, REPORT_SUBBLOCK, REPAIR_BELOW_FLOOR, BREAKER_RESET)
#: ``pending`` (asked, not answered), ``approved`` (not yet done), ``rejected``, ``timed_out``
#: (nobody answered: the safe default, nothing done), ``done`` (approved and done).
APPROVAL_STATES = ("pending", "approved", "rejected", "timed_out", "done")
OPEN_APPROVALS = ("pending", "approved")  # a request in these is not asked again
APPROVE, REJECT = "Approve", "Reject"  # the options of Airflow's ApprovalOperator
TIMEOUT_USER = "timeout"  # who "answered" when the response timeout took the default


def answer_state(chosen: Iterable[str], responded_by: str | None) -> str:
    """The request's state after an answer: ``approved`` only for a person's ``Approve``;
    ``timed_out`` when nobody answered (the default was taken, whatever it is); else
    ``rejected``."""
    if responded_by is None:
        return "timed_out"
    return "approved" if APPROVE in set(chosen) else "rejected"


def below_floor(pool_nodes: int, out_for_repair: int, minimum: int) -> str | None:
    """Why repairing one more node needs a person: the pool's nodes left outside the repair
    path (``pool_nodes`` minus those draining, drained, under repair or with a person:
    ``out_for_repair``) would drop below its floor ``minimum`` (``min_serving_nodes``); None when it
    would not (or the pool has no floor)."""
    if minimum <= 0:
        return None
    left = pool_nodes - out_for_repair - 1
    if left >= minimum:
        return None
    return (
        f"repairing it would leave {max(left, 0)} of {pool_nodes} nodes in service, below the "
        f"pool's floor of {minimum} (min_serving_nodes)"
    )
