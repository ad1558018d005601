"""Ledger records of approvals (``gf_approvals``, docs/remediation.md#approvals): a request for
a person's approval before a destructive step, the Airflow task that asks it, the answer (who,
when, what; or the timeout's safe default) and when the approved step was done. A mixin of
``Ledger`` (it needs ``self.engine`` and ``self.clock``).

A request is asked once: while one for the same (kind, key) is ``pending`` or ``approved``,
asking again returns it; an answered one is never answered again.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import insert, select, update

from gpufleet.domain.clock import Clock
from gpufleet.domain.remediation import APPROVAL_KINDS, OPEN_APPROVALS, answer_state
from gpufleet.errors import LedgerError
from gpufleet.store import schema as s


class ApprovalRecords:
    engine: Any
    clock: Clock

    def request_approval(  # noqa: PLR0913  the request's facts, keyword-only
        self,
        kind: str,
        key: str,
        subject: str,
        *,
        requested_by: str,
        detail: dict[str, Any] | None = None,
        recheck_since: datetime | None = None,
    ) -> tuple[dict[str, Any], bool]:
        """Ask for a person's approval of ``kind`` on ``key`` (what and why in ``subject`` and
        ``detail``); returns (the request, whether it was created now). Not asked again while
        one is pending or approved; with ``recheck_since``, not again either when one was
        answered (rejected, timed out) since then: a person said no, do not nag."""
        if kind not in APPROVAL_KINDS:
            raise LedgerError(f"approval kind {kind!r} is not one of {', '.join(APPROVAL_KINDS)}")
        a = s.approvals
        with self.engine.begin() as conn:
            seen = conn.execute(
                select(a)
                .where(a.c.kind == kind, a.c.key == key, a.c.state.in_(OPEN_APPROVALS))
                .order_by(a.c.id.desc())
            ).first()
            if seen is None and recheck_since is not None:
                seen = conn.execute(
                    select(a)
                    .where(a.c.kind == kind, a.c.key == key, a.c.answered_at >= recheck_since)
                    .order_by(a.c.id.desc())
                ).first()
            if seen is not None:
                return dict(seen._mapping), False
            new_id = conn.execute(
                insert(a).values(
                    kind=kind,
                    key=key,
                    subject=subject,
                    detail=detail or {},
                    state="pending",
                    requested_at=self.clock.now(),
                    requested_by=requested_by,
                )
            ).inserted_primary_key[0]
        return self._approval(new_id), True

    def _approval(self, approval_id: int) -> dict[str, Any]:
        row = self.approval(approval_id)
        if row is None:
            raise LedgerError(f"no approval request #{approval_id}")
        return row

    def approval(self, approval_id: int) -> dict[str, Any] | None:
        a = s.approvals
        with self.engine.connect() as conn:
            row = conn.execute(select(a).where(a.c.id == approval_id)).first()
        return dict(row._mapping) if row is not None else None

    def approvals(
        self,
        states: Iterable[str] | None = None,
        kind: str | None = None,
        key: str | None = None,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        """Requests, newest first, of ``states`` / ``kind`` / ``key`` (None: any)."""
        a = s.approvals
        query = select(a).order_by(a.c.id.desc())
        if states is not None:
            query = query.where(a.c.state.in_(list(states)))
        if kind is not None:
            query = query.where(a.c.kind == kind)
        if key is not None:
            query = query.where(a.c.key == key)
        if limit is not None:
            query = query.limit(limit)
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(query).all()]

    def open_approval(self, kind: str, key: str) -> dict[str, Any] | None:
        """The pending or approved (not yet done) request of ``kind`` on ``key``, if any."""
        rows = self.approvals(OPEN_APPROVALS, kind=kind, key=key, limit=1)
        return rows[0] if rows else None

    def approval_asked_by(  # noqa: PLR0913  where the request is asked
        self, approval_id: int, dag_id: str, run_id: str, task_id: str, map_index: int = -1
    ) -> dict[str, Any]:
        """The Airflow task instance that asks the pending request (where the UI and the REST
        API answer it); a later run's task asking it again takes over."""
        a = s.approvals
        with self.engine.begin() as conn:
            conn.execute(
                update(a)
                .where(a.c.id == approval_id, a.c.state == "pending")
                .values(dag_id=dag_id, run_id=run_id, task_id=task_id, map_index=map_index)
            )
        return self._approval(approval_id)

    def approval_asked_at(
        self, dag_id: str, run_id: str, task_id: str, map_index: int = -1
    ) -> dict[str, Any] | None:
        """The request the task instance asked (its latest), if any."""
        a = s.approvals
        query = (
            select(a)
            .where(
                a.c.dag_id == dag_id,
                a.c.run_id == run_id,
                a.c.task_id == task_id,
                a.c.map_index == map_index,
            )
            .order_by(a.c.id.desc())
            .limit(1)
        )
        with self.engine.connect() as conn:
            row = conn.execute(query).first()
        return dict(row._mapping) if row is not None else None

    def answer_approval(
        self,
        approval_id: int,
        chosen: Iterable[str],
        by: str | None,
        at: datetime | None = None,
    ) -> dict[str, Any]:
        """Record the answer to a pending request: ``by`` the person (None: nobody answered
        before the timeout and the safe default was taken), ``at`` when (default now), the
        option chosen. A request already answered keeps its first answer (returned as it is)."""
        chosen = list(chosen)
        state = answer_state(chosen, by)
        a = s.approvals
        with self.engine.begin() as conn:
            conn.execute(
                update(a)
                .where(a.c.id == approval_id, a.c.state == "pending")
                .values(
                    state=state,
                    answer=chosen[0] if chosen else None,
                    answered_by=by if by is not None else "timeout",
                    answered_at=at or self.clock.now(),
                )
            )
        return self._approval(approval_id)

    def approval_done(self, approval_id: int, outcome: str) -> dict[str, Any]:
        """The approved step was done (``outcome``: what it did). Once: a request already done
        keeps its first outcome."""
        a = s.approvals
        with self.engine.begin() as conn:
            conn.execute(
                update(a)
                .where(a.c.id == approval_id, a.c.state == "approved")
                .values(state="done", acted_at=self.clock.now(), outcome=outcome)
            )
        return self._approval(approval_id)

    def approval_closed(self, approval_id: int, outcome: str) -> dict[str, Any]:
        """A rejected or timed-out request was closed without acting (``outcome``: what was
        left as it was); recorded once."""
        a = s.approvals
        with self.engine.begin() as conn:
            conn.execute(
                update(a)
                .where(
                    a.c.id == approval_id,
                    a.c.state.in_(("rejected", "timed_out")),
                    a.c.outcome.is_(None),
                )
                .values(outcome=outcome)
            )
        return self._approval(approval_id)
