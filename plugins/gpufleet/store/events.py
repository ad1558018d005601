"""Ledger records of the event path (``store/schema_events.py``, v18): signals, each node as last
seen, the watch cursors, re-admission sessions. A mixin of ``Ledger`` (it needs ``self.engine``
and ``self.clock``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import and_, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from gpufleet.domain.admission import Session, SessionState
from gpufleet.domain.clock import Clock
from gpufleet.domain.events import version_after
from gpufleet.domain.signals import Response, Signal
from gpufleet.store import schema as s


class EventRecords:
    engine: Any
    clock: Clock

    # --- signals -------------------------------------------------------------------------------

    def record_signals(self, signals: Iterable[Signal], run_id: str | None = None) -> list[Signal]:
        """Record each signal once (a replay of the same version records nothing): returns
        those to act on: the new ones, and those recorded before but never acted on
        (``acted_at`` NULL: the response that recorded them died or failed before
        ``mark_acted``)."""
        now = self.clock.now()
        new: list[Signal] = []
        t = s.node_signals
        for sig in signals:
            row = {
                "cluster": sig.cluster,
                "node": sig.node,
                "pool": sig.pool,
                "source": sig.source.value,
                "what": sig.what,
                "response": sig.response.value,
                "action": sig.action.value if sig.action is not None else None,
                "reason": sig.reason,
                "observed_at": sig.observed_at,
                "version": sig.version or "",
                "count": sig.count,
                "recorded_at": now,
                "run_id": run_id,
            }
            try:
                with self.engine.begin() as conn:
                    conn.execute(insert(t).values(**row))
            except IntegrityError:  # already recorded: this version was seen before
                if self._acted(sig):
                    continue
            new.append(sig)
        return new

    def _acted(self, sig: Signal) -> bool:
        t = s.node_signals
        with self.engine.connect() as conn:
            acted = conn.execute(
                select(t.c.acted_at).where(*_signal_key(t, sig))
            ).scalar_one_or_none()
        return acted is not None

    def mark_acted(self, signals: Iterable[Signal]) -> None:
        """The response acted on ``signals`` (recorded by ``record_signals``): a replay of
        their batch does not act on them again."""
        t = s.node_signals
        now = self.clock.now()
        with self.engine.begin() as conn:
            for sig in signals:
                conn.execute(
                    update(t)
                    .where(*_signal_key(t, sig), t.c.acted_at.is_(None))
                    .values(acted_at=now)
                )

    def node_signals(
        self, cluster: str, node: str | None = None, limit: int = 200
    ) -> list[dict[str, Any]]:
        """A cluster's (a node's) signals, newest first."""
        t = s.node_signals
        q = select(t).where(t.c.cluster == cluster)
        if node is not None:
            q = q.where(t.c.node == node)
        q = q.order_by(t.c.observed_at.desc(), t.c.id.desc()).limit(limit)
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(q)]

    def newest_bad_signals(
        self, cluster: str, nodes: Iterable[str] | None = None, pool: str | None = None
    ) -> dict[str, tuple[datetime, str]]:
        """node -> (when, reason) of its newest signal that asked for a quarantine (of
        ``nodes``, of ``pool``'s nodes, or of the cluster's)."""
        t = s.node_signals
        bad = t.c.response == Response.QUARANTINE.value
        if pool is not None:
            bad = and_(bad, t.c.pool == pool)
        newest = (
            select(t.c.node, func.max(t.c.observed_at).label("at"))
            .where(t.c.cluster == cluster, bad)
            .group_by(t.c.node)
        )
        if nodes is not None:
            newest = newest.where(t.c.node.in_(list(nodes)))
        sub = newest.subquery()
        q = (
            select(t.c.node, t.c.observed_at, t.c.reason)
            .join(sub, and_(t.c.node == sub.c.node, t.c.observed_at == sub.c.at))
            .where(t.c.cluster == cluster, bad)
            .order_by(t.c.id)
        )
        with self.engine.connect() as conn:
            return {r.node: (r.observed_at, r.reason) for r in conn.execute(q)}

    # --- nodes as last seen --------------------------------------------------------------------

    def watched_nodes(self, cluster: str) -> dict[str, dict[str, Any]]:
        """node -> the node as the event path last saw it (gone ones included)."""
        t = s.watched_nodes
        with self.engine.connect() as conn:
            rows = conn.execute(select(t).where(t.c.cluster == cluster))
            return {r.node: dict(r._mapping) for r in rows}

    def see_nodes(self, cluster: str, seen: Mapping[str, Mapping[str, Any] | None]) -> int:
        """Keep each node as seen (``seen``: node -> its fields with ``version``; None: gone),
        unless the ledger already keeps it at a later version (a replay never moves a node
        back). Returns how many rows changed."""
        t = s.watched_nodes
        now = self.clock.now()
        changed = 0
        with self.engine.begin() as conn:
            have = {
                r.node: r.version
                for r in conn.execute(
                    select(t.c.node, t.c.version).where(
                        t.c.cluster == cluster, t.c.node.in_(list(seen))
                    )
                )
            }
            for node, fields in seen.items():
                if fields is None:
                    if node in have:
                        conn.execute(
                            update(t)
                            .where(t.c.cluster == cluster, t.c.node == node)
                            .values(gone=True, seen_at=now)
                        )
                        changed += 1
                    continue
                if node in have and not version_after(fields["version"], have[node]):
                    continue
                values = {
                    "pool": fields.get("pool"),
                    "uid": fields.get("uid"),
                    "boot_id": fields.get("boot_id"),
                    "provider_id": fields.get("provider_id"),
                    "unschedulable": bool(fields.get("unschedulable")),
                    "conditions": list(fields.get("conditions") or []),
                    "labels": dict(fields.get("labels") or {}),
                    "version": fields["version"],
                    "seen_at": now,
                    "gone": False,
                }
                if node in have:
                    conn.execute(
                        update(t).where(t.c.cluster == cluster, t.c.node == node).values(**values)
                    )
                else:
                    conn.execute(insert(t).values(cluster=cluster, node=node, **values))
                changed += 1
        return changed

    # --- watch cursors -------------------------------------------------------------------------

    def watch_cursor(self, cluster: str, stream: str) -> str | None:
        """The version ``stream`` (nodes | events) of ``cluster`` was acknowledged at."""
        t = s.watch_cursors
        with self.engine.connect() as conn:
            return conn.execute(
                select(t.c.version).where(t.c.cluster == cluster, t.c.stream == stream)
            ).scalar()

    def ack_watch(self, cluster: str, stream: str, version: str, run_id: str | None = None) -> str:
        """Acknowledge ``stream`` up to ``version``: the cursor only moves forward (an older
        ack, a replay's, leaves it). Returns the cursor after."""
        t = s.watch_cursors
        now = self.clock.now()
        for _ in range(3):  # compare-and-set against a concurrent ack
            old = self.watch_cursor(cluster, stream)
            if old is not None and not version_after(version, old):
                return old
            try:
                with self.engine.begin() as conn:
                    if old is None:
                        conn.execute(
                            insert(t).values(
                                cluster=cluster,
                                stream=stream,
                                version=version,
                                acked_at=now,
                                run_id=run_id,
                            )
                        )
                        return version
                    moved = conn.execute(
                        update(t)
                        .where(t.c.cluster == cluster, t.c.stream == stream, t.c.version == old)
                        .values(version=version, acked_at=now, run_id=run_id)
                    ).rowcount
                if moved:
                    return version
            except IntegrityError:
                continue
        return self.watch_cursor(cluster, stream) or version

    # --- re-admission sessions -----------------------------------------------------------------

    @staticmethod
    def _session(row: Any) -> Session:
        return Session(
            cluster=row.cluster,
            pool=row.pool,
            opened_at=row.opened_at,
            window_s=row.window_s,
            nodes={n: datetime.fromisoformat(at) for n, at in (row.nodes or {}).items()},
            state=SessionState(row.state),
            seq=int(row.id.rpartition("#")[2]) if "#" in row.id else 0,
        )

    def sessions(
        self, cluster: str, pool: str | None = None, states: Iterable[str] = ("open", "validating")
    ) -> list[Session]:
        """The sessions of a cluster (a pool) in ``states``, oldest first."""
        t = s.admission_sessions
        q = select(t).where(t.c.cluster == cluster, t.c.state.in_(list(states)))
        if pool is not None:
            q = q.where(t.c.pool == pool)
        with self.engine.connect() as conn:
            return [self._session(r) for r in conn.execute(q.order_by(t.c.opened_at))]

    def session_row(self, session_id: str) -> dict[str, Any] | None:
        t = s.admission_sessions
        with self.engine.connect() as conn:
            r = conn.execute(select(t).where(t.c.id == session_id)).first()
            return dict(r._mapping) if r is not None else None

    def save_session(self, session: Session) -> bool:
        """Record a new session, or the nodes of an open one: False when the session is no
        longer open (a run claimed it meanwhile): the caller joins a new one."""
        t = s.admission_sessions
        nodes = {n: at.isoformat() for n, at in session.nodes.items()}
        with self.engine.begin() as conn:
            moved = conn.execute(
                update(t)
                .where(t.c.id == session.id, t.c.state == SessionState.OPEN.value)
                .values(nodes=nodes)
            ).rowcount
            if moved:
                return True
            exists = conn.execute(select(t.c.id).where(t.c.id == session.id)).first()
            if exists is not None:
                return False
            conn.execute(
                insert(t).values(
                    id=session.id,
                    cluster=session.cluster,
                    pool=session.pool,
                    opened_at=session.opened_at,
                    window_s=session.window_s,
                    state=SessionState.OPEN.value,
                    nodes=nodes,
                )
            )
            return True

    def claim_session(self, session_id: str, run_id: str, stale_run: str | None = None) -> bool:
        """Move a session from open to validating for ``run_id`` (compare-and-set: one run
        wins); ``stale_run``: take over a session that run was validating (it died)."""
        t = s.admission_sessions
        was = t.c.state == SessionState.OPEN.value
        if stale_run is not None:
            was = and_(t.c.state == SessionState.VALIDATING.value, t.c.run_id == stale_run)
        with self.engine.begin() as conn:
            return bool(
                conn.execute(
                    update(t)
                    .where(t.c.id == session_id, was)
                    .values(state=SessionState.VALIDATING.value, run_id=run_id)
                ).rowcount
            )

    def finish_session(self, session_id: str, run_id: str, outcome: Mapping[str, Any]) -> bool:
        """Record a validating session's outcome (only by the run that claimed it)."""
        t = s.admission_sessions
        with self.engine.begin() as conn:
            return bool(
                conn.execute(
                    update(t)
                    .where(
                        t.c.id == session_id,
                        t.c.state == SessionState.VALIDATING.value,
                        t.c.run_id == run_id,
                    )
                    .values(
                        state=SessionState.DONE.value,
                        judged_at=self.clock.now(),
                        outcome=dict(outcome),
                    )
                ).rowcount
            )


def _signal_key(t, sig: Signal) -> tuple:
    """The WHERE of a signal's row: its unique key (``uq_gf_node_signals``)."""
    return (
        t.c.cluster == sig.cluster,
        t.c.node == sig.node,
        t.c.source == sig.source.value,
        t.c.what == sig.what,
        t.c.version == (sig.version or ""),
    )
