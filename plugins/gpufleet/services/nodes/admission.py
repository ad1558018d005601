"""Re-admission sessions: claiming one, and judging its nodes from the pool validation it ran
(design: docs/events.md; the rules: ``domain.admission``).

A service: no Airflow imports. The session's validation is the pool's own fabric validation
(``services.validation.fabric``, with its GPU health round): the pending nodes are among the
nodes it tests (``NodeInfo.testable``: validation pods tolerate the pending taint), against
known-good partners when they fail. ``AdmissionSessions.judge`` reads its verdict: a node that
passed is released (its taint removed) unless a bad signal of it is newer than its joining;
a node the validation quarantined, or whose newer bad signal says so, stays out (the node
lifecycle has it); a node it did not judge joins the next session.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime
from typing import Any

from gpufleet.backends.base import ClusterBackend
from gpufleet.domain.admission import (
    DEFAULT_WINDOW_S,
    PENDING_KEYS,
    Judgement,
    Session,
    join,
    judge,
)
from gpufleet.domain.fleet import PoolRef
from gpufleet.domain.nodes import NodeState
from gpufleet.services.nodes.drain import backend_clock
from gpufleet.services.nodes.lifecycle import NodeLifecycle
from gpufleet.store import Ledger

log = logging.getLogger(__name__)

# a session validating this long after its window closed is taken over: longer than any
# validation round takes, a level-4 burn-in included (docs/health.md: up to 9,000 s)
STALE_S = 4 * 3600.0


class AdmissionSessions:
    """The re-admission sessions of one pool."""

    def __init__(self, ref: PoolRef, ledger: Ledger, backend: ClusterBackend):
        self.ref = ref
        self.ledger = ledger
        self.backend = backend

    def session(self, session_id: str) -> Session | None:
        row = self.ledger.session_row(session_id)
        if row is None:
            return None
        return next(
            (
                s
                for s in self.ledger.sessions(row["cluster"], row["pool"], states=(row["state"],))
                if s.id == session_id
            ),
            None,
        )

    def claim(self, session_id: str, run_id: str, stale_run: str | None = None) -> Session | None:
        """The session, claimed for ``run_id`` (None: another run has it, or it is done). A
        session another run has been validating for longer than :data:`STALE_S` after its
        window closed (that run died, or failed for good) is taken over."""
        if self.ledger.claim_session(session_id, run_id, stale_run=stale_run):
            return self.session(session_id)
        row = self.ledger.session_row(session_id)
        if row is None or row["state"] != "validating" or row["run_id"] == run_id:
            return None
        session = self.session(session_id)
        now = backend_clock(self.backend).now()
        if session is None or (now - session.closes_at).total_seconds() < STALE_S:
            return None
        if not self.ledger.claim_session(session_id, run_id, stale_run=row["run_id"]):
            return None
        log.warning(
            "%s: session %s taken over from run %s (validating past %.0f s)",
            self.ref.key,
            session_id,
            row["run_id"],
            STALE_S,
        )
        return self.session(session_id)

    def judge(
        self, session_id: str, run_id: str, summary: Any, row: dict[str, Any] | None
    ) -> Judgement:
        """Judge the claimed session from its pool validation (``summary``: the pool's
        ``FabricSummary``; ``row``: its validation row, None when none was recorded), act on
        each node and record the outcome."""
        session = self.session(session_id)
        if session is None:
            raise ValueError(f"no session {session_id!r} in the ledger")
        nodes = list(session.nodes)
        details = (row or {}).get("details") or {}
        passed = set(details.get("passed_nodes") or []) if (row or {}).get("passed") else set()
        reasons = "; ".join((row or {}).get("reasons") or []) or "failed its validation"
        failed = {n: reasons for n in getattr(summary, "quarantined", []) or [] if n in nodes}
        bad = self.ledger.newest_bad_signals(self.ref.cluster.name, nodes)
        verdict = judge(session, passed, failed, bad)
        for node in verdict.released:
            for key in PENDING_KEYS:  # the old name too, on a node tainted before the rename
                self.backend.remove_taint(node, key)
        lifecycle = NodeLifecycle(self.ref, self.ledger, self.backend)
        for node, why in verdict.quarantined.items():
            state = self.ledger.node_state(self.ref.cluster.name, node)
            if state is None or state["state"] == NodeState.RELEASED.value:
                lifecycle.quarantine(node, why, {"session": session.id}, run_id=run_id)
        now = backend_clock(self.backend).now()
        carried = self._carry(list(verdict.carried), now)
        self.ledger.finish_session(
            session.id,
            run_id,
            {
                "released": verdict.released,
                "quarantined": verdict.quarantined,
                "carried": verdict.carried,
                "next_session": carried,
            },
        )
        log.info(
            "%s: session %s: %d released, %d quarantined, %d carried to the next session",
            self.ref.key,
            session.id,
            len(verdict.released),
            len(verdict.quarantined),
            len(verdict.carried),
        )
        return verdict

    def _carry(self, nodes: list[str], now: datetime) -> str | None:
        """The nodes the session could not judge join the pool's next session."""
        session = None
        for node in nodes:
            session, _ = join_session(self.ledger, self.ref, node, now)
        return session.id if session is not None else None


def join_session(
    ledger: Ledger, ref: PoolRef, node: str, now: datetime, window_s: float = DEFAULT_WINDOW_S
) -> tuple[Session, bool]:
    """``node`` joins its pool's open session (``domain.admission.join``), kept in the ledger:
    (the session, whether this call opened it). A session claimed meanwhile is not joined: the
    node joins the next one."""
    cluster, pool = ref.cluster.name, ref.pool.name
    for _ in range(5):
        open_ = ledger.sessions(cluster, pool, states=("open",))
        session = join(open_, cluster, pool, node, now, window_s)
        opened = all(s.id != session.id for s in open_)
        while opened and ledger.session_row(session.id) is not None:  # same instant, taken
            session = replace(session, seq=session.seq + 1)
        if ledger.save_session(session):
            return session, opened
    raise RuntimeError(f"{ref.key}: {node} could not join a re-admission session")


def orphaned_sessions(
    ledger: Ledger, cluster: str, now: datetime, grace_s: float = 60.0
) -> list[Session]:
    """Sessions no live run looks after: open ones past their window by more than ``grace_s``
    (their opener died, or they were carried), and validating ones past it by :data:`STALE_S`
    (their run died): a response run takes them on."""
    out = []
    for s in ledger.sessions(cluster, states=("open", "validating")):
        late = (now - s.closes_at).total_seconds()
        if late > (grace_s if s.state.value == "open" else STALE_S):
            out.append(s)
    return out
