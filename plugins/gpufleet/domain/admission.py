"""Re-admission: every node that appears or comes back is held ``validation-pending`` until a
validation session of its pool passes (docs/events.md).

Pure: no I/O. A pool's nodes are batched into one session over a window (default 5 minutes,
as NVSentinel's ``batchPeriodSeconds: 300``): the first node opens it, the next ones join until
it closes; then one validation runs for all of them (a fabric pair against a known-good partner
and level-1 GPU health; burn-in when the catalog asks). A node is released only when it passed
that validation and no bad signal of it is newer than its joining; a node that failed goes to
the node lifecycle (quarantined); one the session could not judge waits for the next session.
Only a session, or a person's recorded release, removes the taint.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum

from gpufleet.domain.workloads import PENDING_KEYS, UNVALIDATED_KEY

# the one taint of a node awaiting validation: new nodes come up with it, returning ones get it
PENDING_KEY = UNVALIDATED_KEY
__all__ = ["PENDING_KEY", "PENDING_KEYS"]
DEFAULT_WINDOW_S = 300.0


class SessionState(StrEnum):
    OPEN = "open"  # nodes may join until the window closes
    VALIDATING = "validating"  # closed: its validation runs
    DONE = "done"  # judged: each node released, quarantined or carried to the next session


@dataclass(frozen=True)
class Session:
    """One pool's batch of nodes awaiting re-admission."""

    cluster: str
    pool: str
    opened_at: datetime
    window_s: float = DEFAULT_WINDOW_S
    # node -> when it joined (a bad signal after that keeps it out even if it passes)
    nodes: Mapping[str, datetime] = field(default_factory=dict)
    state: SessionState = SessionState.OPEN
    seq: int = 0  # another session of the pool opened at the same instant (a frozen clock)

    @property
    def id(self) -> str:
        at = f"{self.cluster}/{self.pool}@{self.opened_at.isoformat()}"
        return f"{at}#{self.seq}" if self.seq else at

    @property
    def closes_at(self) -> datetime:
        return self.opened_at + timedelta(seconds=self.window_s)

    def due(self, now: datetime) -> bool:
        """Closed for joining and not yet validated: its validation may start."""
        return self.state is SessionState.OPEN and now >= self.closes_at


def join(
    sessions: Iterable[Session],
    cluster: str,
    pool: str,
    node: str,
    now: datetime,
    window_s: float = DEFAULT_WINDOW_S,
) -> Session:
    """The session ``node`` belongs to after joining at ``now``: the pool's open session whose
    window has not closed (the node added, or left as it is when already in it), else a new
    one opened now. ``window_s`` must be positive and finite."""
    if not (window_s > 0 and window_s != float("inf")):
        raise ValueError(f"a session window must be a positive number of seconds, not {window_s}")
    for s in sessions:
        if (s.cluster, s.pool) != (cluster, pool) or s.state is not SessionState.OPEN:
            continue
        if node in s.nodes:
            return s
        if now < s.closes_at:
            return replace(s, nodes={**s.nodes, node: now})
    return Session(cluster, pool, now, window_s, {node: now})


@dataclass(frozen=True)
class Judgement:
    """A session's outcome per node: released (taint off), quarantined (failed: the lifecycle
    takes it) and carried (not judged: waits for the next session), each with its reason."""

    released: dict[str, str]
    quarantined: dict[str, str]
    carried: dict[str, str]


def judge(
    session: Session,
    passed: Iterable[str],
    failed: Mapping[str, str],
    bad_since: Mapping[str, tuple[datetime, str]],
) -> Judgement:
    """Each of the session's nodes: ``failed`` (node -> reason) are quarantined; those in
    ``passed`` are released unless a bad signal (``bad_since``: node -> (when, reason)) is newer
    than their joining, which quarantines them; the rest (not validated: no partner, could not
    run) are carried over. A node is never released without passing."""
    ok = set(passed)
    released: dict[str, str] = {}
    quarantined: dict[str, str] = {}
    carried: dict[str, str] = {}
    for node, joined in sorted(session.nodes.items()):
        bad = bad_since.get(node)
        if node in failed:
            quarantined[node] = failed[node]
        elif bad is not None and bad[0] >= joined:
            quarantined[node] = f"{bad[1]} (at {bad[0].isoformat()}, while validation pending)"
        elif node in ok:
            released[node] = f"passed re-admission session {session.id}"
        else:
            carried[node] = f"not judged by session {session.id}: joins the next one"
    return Judgement(released, quarantined, carried)
