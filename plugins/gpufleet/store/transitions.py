"""Ledger records of reservation transitions: the transition (its coarse state, the state
machine's step, the drain settings), the lock (one running transition per cluster, a unique
index), and each step started and completed with its times and evidence. A mixin of
``Ledger`` (it needs ``self.engine``).

Coarse states (``gf_transitions.state``): ``running`` holds the cluster's lock; ``done``,
``rolled_back`` and ``failed`` (also for an abandoned one: ``step`` says ``abandoned``) release it.
The running row's ``dag_id``/``run_id`` name the holder and ``heartbeat_at`` is its lease: a
``store.locks.LeaseLock`` (``transition_lease``), whose renewal and compare-and-set the region
and validation locks share (``domain.leases`` says when a holder is dead).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import insert, or_, select, update
from sqlalchemy.exc import IntegrityError

from gpufleet.domain.clock import Clock
from gpufleet.domain.gate import FINISHED_TRANSITIONS
from gpufleet.store import schema as s
from gpufleet.store.locks import LeaseLock
from gpufleet.store.rows import Clusters, of_clusters


class _Finished(Exception):
    def __init__(self, row: dict[str, Any]):
        self.row = row


def _finished_into(conn: Any, cluster: str, pool: str) -> dict[str, Any] | None:
    t = s.transitions
    done = (t.c.cluster == cluster) & (t.c.state == "done")
    row = conn.execute(
        select(t).where(done, t.c.to_pool == pool).order_by(t.c.id.desc()).limit(1)
    ).first()
    if row is None:
        return None
    later = select(t.c.id).where(done, t.c.from_pool == pool, t.c.id > row.id).limit(1)
    return None if conn.execute(later).first() is not None else dict(row._mapping)


class TransitionRecords:
    engine: Any
    clock: Clock

    def transitions_in_flight(self, cluster: Clusters) -> list[dict[str, Any]]:
        """The cluster's transitions not known to be finished (every cluster's with None, or
        several clusters' names): ``running`` ones and any whose state is not one of the
        finished states (the reader decides what an unknown one means)."""
        t = s.transitions
        finished = [str(v) for v in FINISHED_TRANSITIONS]
        where = [or_(t.c.state.is_(None), t.c.state.not_in(finished))]
        if cluster is not None:
            where.append(of_clusters(t.c.cluster, cluster))
        with self.engine.connect() as conn:
            rows = conn.execute(select(t).where(*where)).all()
            return [dict(r._mapping) for r in rows]

    def open_transition(
        self,
        cluster: str,
        from_pool: str,
        to_pool: str,
        run_id: str,
        *,
        dag_id: str | None = None,
        now: datetime | None = None,
        **kw: Any,
    ) -> tuple[dict[str, Any], bool]:
        """The cluster's running transition, or a new one for these pools: ``(row, created)``.
        Atomic through the lock index: of two runs racing, one creates, the other gets the
        first's row (and decides: the same pools resume, other pools are refused). A pool that
        a finished transition brought into service is not transitioned into again: the
        finished transition's row comes back (``state`` done), read in the transaction that
        would create the new one, so a holder that finished meanwhile is seen. A new one is
        held by ``dag_id``/``run_id`` with its first heartbeat at ``now``."""
        t = s.transitions
        now = now or self.clock.now()
        try:
            with self.engine.begin() as conn:
                tid = conn.execute(
                    insert(t).values(
                        cluster=cluster,
                        from_pool=from_pool,
                        to_pool=to_pool,
                        state="running",
                        run_id=run_id,
                        dag_id=dag_id,
                        started_at=now,
                        heartbeat_at=now,
                        **kw,
                    )
                ).inserted_primary_key[0]
                finished = _finished_into(conn, cluster, to_pool)
                if finished is not None:
                    raise _Finished(finished)  # rolls the insert back
        except _Finished as exc:
            return exc.row, False
        except IntegrityError:
            row = self.running_transition(cluster)
            if row is None:  # finished in between: try once more
                return self.open_transition(
                    cluster, from_pool, to_pool, run_id, dag_id=dag_id, now=now, **kw
                )
            return row, False
        return self.transition(int(tid)) or {}, True

    def finished_into(self, cluster: str, pool: str) -> dict[str, Any] | None:
        """The done transition that brought ``pool`` into service, unless a later done
        transition moved the work away from it again."""
        with self.engine.connect() as conn:
            return _finished_into(conn, cluster, pool)

    def running_transition(self, cluster: str) -> dict[str, Any] | None:
        t = s.transitions
        with self.engine.connect() as conn:
            row = conn.execute(
                select(t).where(t.c.cluster == cluster, t.c.state == "running")
            ).first()
        return dict(row._mapping) if row is not None else None

    def transition(self, transition_id: int) -> dict[str, Any] | None:
        t = s.transitions
        with self.engine.connect() as conn:
            row = conn.execute(select(t).where(t.c.id == transition_id)).first()
        return dict(row._mapping) if row is not None else None

    def transitions(self, cluster: str | None = None, limit: int = 20) -> list[dict[str, Any]]:
        t = s.transitions
        query = select(t).order_by(t.c.id.desc()).limit(limit)
        if cluster:
            query = query.where(t.c.cluster == cluster)
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(query).all()]

    def transitioned_pools(self) -> set[tuple[str, str]]:
        """``(cluster, pool)`` of every pool a finished transition brought into service (a
        ``planned`` catalog pool that is in service until the catalog says so)."""
        t = s.transitions
        with self.engine.connect() as conn:
            rows = conn.execute(select(t.c.cluster, t.c.to_pool).where(t.c.state == "done"))
            return {(r.cluster, r.to_pool) for r in rows}

    def transition_lease(self, transition_id: int, dag_id: str | None = None) -> LeaseLock:
        """The lock running transition ``transition_id`` holds: ``LeaseLock``'s renewal and
        compare-and-set on that row while it is running (``dag_id``: the holder's DAG, set by
        each renewal: a transition recorded before v10 names none)."""
        return LeaseLock(
            self.engine,
            s.transitions,
            {"id": transition_id, "state": "running"},
            renew={"dag_id": dag_id} if dag_id else None,
            clock=self.clock,
        )

    def heartbeat_transition(
        self, transition_id: int, run_id: str, dag_id: str | None, now: datetime
    ) -> bool:
        """``LeaseLock.heartbeat`` of the transition's lock: False when ``run_id`` no longer
        holds it (taken over, finished): the caller must stop acting on the cluster."""
        return self.transition_lease(transition_id, dag_id).heartbeat(run_id, now)

    def take_over_transition(
        self,
        transition_id: int,
        seen: dict[str, Any],
        run_id: str,
        dag_id: str | None = None,
        now: datetime | None = None,
    ) -> bool:
        """``LeaseLock.take_over`` of the transition's lock (compare-and-set on the holder and
        heartbeat of ``seen``): True when this run holds the lock now."""
        return self.transition_lease(transition_id).take_over(seen, dag_id, run_id, now)

    def update_transition(self, transition_id: int, **values: Any) -> None:
        """Set ``step``, ``run_id`` (a resuming run takes the lock over) or ``params``."""
        t = s.transitions
        with self.engine.begin() as conn:
            conn.execute(update(t).where(t.c.id == transition_id).values(**values))

    def finish_transition(self, transition_id: int, state: str, step: str | None = None) -> None:
        t = s.transitions
        values: dict[str, Any] = {"state": state, "finished_at": self.clock.now()}
        if step is not None:
            values["step"] = step
        with self.engine.begin() as conn:
            conn.execute(update(t).where(t.c.id == transition_id).values(**values))

    def step_started(
        self, transition_id: int, step: str, detail: dict[str, Any] | None = None
    ) -> None:
        """Record that ``step`` began (before it acts); a redo after a crash keeps the first
        start time and merges the detail."""
        ts = s.transition_steps
        with self.engine.begin() as conn:
            row = conn.execute(
                select(ts).where(ts.c.transition_id == transition_id, ts.c.step == step)
            ).first()
            if row is None:
                conn.execute(
                    insert(ts).values(
                        transition_id=transition_id,
                        step=step,
                        state="started",
                        detail=detail or {},
                        at=self.clock.now(),
                    )
                )
            elif detail:
                conn.execute(
                    update(ts)
                    .where(ts.c.id == row.id)
                    .values(detail={**(row.detail or {}), **detail})
                )

    def step_done(
        self, transition_id: int, step: str, detail: dict[str, Any] | None = None
    ) -> None:
        """Record that ``step`` completed (after it acted), with its evidence."""
        self.step_started(transition_id, step)
        ts = s.transition_steps
        with self.engine.begin() as conn:
            row = conn.execute(
                select(ts).where(ts.c.transition_id == transition_id, ts.c.step == step)
            ).first()
            conn.execute(
                update(ts)
                .where(ts.c.id == row.id)
                .values(
                    state="done",
                    finished_at=self.clock.now(),
                    detail={**(row.detail or {}), **(detail or {})},
                )
            )

    def transition_steps(self, transition_id: int) -> list[dict[str, Any]]:
        ts = s.transition_steps
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(ts).where(ts.c.transition_id == transition_id).order_by(ts.c.id)
            ).all()
        return [dict(r._mapping) for r in rows]
