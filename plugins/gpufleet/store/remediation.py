"""Ledger records of remediation (docs/remediation.md): the blast-radius breakers' trips and
resets (``gf_breakers``), what the machine held back (``gf_remediation_holds``), and the reads
the ladder and the breakers judge by (the node lifecycle's ``gf_node_states`` and
``gf_node_events``). A mixin of ``Ledger`` (it needs ``self.engine`` and ``self.clock``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import and_, func, insert, or_, select, update

from gpufleet.domain.clock import Clock
from gpufleet.errors import LedgerError
from gpufleet.store import schema as s


class RemediationRecords:
    engine: Any
    clock: Clock

    # --- breakers ---------------------------------------------------------------------------

    def tripped_breakers(self, scope: str | None = None) -> list[dict[str, Any]]:
        """Trips no person reset yet (oldest first), of one ``scope`` or all."""
        t = s.breakers
        query = select(t).where(t.c.reset_at.is_(None)).order_by(t.c.id)
        if scope is not None:
            query = query.where(t.c.scope == scope)
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(query).all()]

    def breaker_history(self, scope: str, key: str) -> list[dict[str, Any]]:
        t = s.breakers
        query = select(t).where(t.c.scope == scope, t.c.key == key).order_by(t.c.id)
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(query).all()]

    def trip_breaker(  # noqa: PLR0913  the trip's facts, keyword-only
        self,
        scope: str,
        key: str,
        *,
        reason: str,
        affected: int,
        limit: int,
        run_id: str | None = None,
    ) -> dict[str, Any]:
        """Record that the breaker tripped; a breaker already tripped keeps its first trip
        (returned as it is)."""
        t = s.breakers
        with self.engine.begin() as conn:
            row = conn.execute(
                select(t).where(t.c.scope == scope, t.c.key == key, t.c.reset_at.is_(None))
            ).first()
            if row is not None:
                return dict(row._mapping)
            conn.execute(
                insert(t).values(
                    scope=scope,
                    key=key,
                    reason=reason,
                    affected=affected,
                    limit_nodes=limit,
                    tripped_at=self.clock.now(),
                    run_id=run_id,
                )
            )
        return self.tripped_breakers_of(scope, key)[0]

    def tripped_breakers_of(self, scope: str, key: str) -> list[dict[str, Any]]:
        return [r for r in self.tripped_breakers(scope) if r["key"] == key]

    def reset_breaker(self, scope: str, key: str, by: str, reason: str) -> dict[str, Any]:
        """A person resets a tripped breaker: who, when and why are recorded; its scope's
        automated actions run again, counting only what happens after the reset. Raises
        ``LedgerError`` when that breaker is not tripped."""
        if not by or not by.strip():
            raise LedgerError("a breaker is reset by a person: give their name (--by)")
        t = s.breakers
        now = self.clock.now()
        with self.engine.begin() as conn:
            row = conn.execute(
                select(t).where(t.c.scope == scope, t.c.key == key, t.c.reset_at.is_(None))
            ).first()
            if row is None:
                tripped = ", ".join(f"{r['scope']} {r['key']}" for r in self.tripped_breakers())
                raise LedgerError(
                    f"the {scope} breaker {key} is not tripped (tripped: {tripped or 'none'})"
                )
            conn.execute(
                update(t)
                .where(t.c.id == row.id)
                .values(reset_at=now, reset_by=by.strip(), reset_reason=reason)
            )
        return next(r for r in self.breaker_history(scope, key) if r["id"] == row.id)

    def last_breaker_reset(self, scope: str, key: str) -> datetime | None:
        t = s.breakers
        with self.engine.connect() as conn:
            return conn.execute(
                select(func.max(t.c.reset_at)).where(t.c.scope == scope, t.c.key == key)
            ).scalar()

    # --- holds ------------------------------------------------------------------------------

    def record_hold(  # noqa: PLR0913  the hold's facts
        self,
        cluster: str,
        pool: str,
        node: str,
        action: str,
        kind: str,
        reason: str,
        *,
        run_id: str | None = None,
        once_since: datetime | None = None,
    ) -> bool:
        """Record that ``action`` on ``node`` was not done (``kind``: ``would_have`` or
        ``held``) and why. With ``once_since``: not again if the same action and kind was
        recorded for the node since then (a node waiting night after night is recorded once
        per state). Returns whether a row was written."""
        h = s.remediation_holds
        with self.engine.begin() as conn:
            if once_since is not None:
                seen = conn.execute(
                    select(h.c.id).where(
                        h.c.cluster == cluster,
                        h.c.node == node,
                        h.c.action == action,
                        h.c.kind == kind,
                        h.c.at >= once_since,
                    )
                ).first()
                if seen is not None:
                    return False
            conn.execute(
                insert(h).values(
                    cluster=cluster,
                    pool=pool,
                    node=node,
                    action=action,
                    kind=kind,
                    reason=reason,
                    at=self.clock.now(),
                    run_id=run_id,
                )
            )
        return True

    def remediation_holds(
        self, cluster: str | None = None, node: str | None = None, kind: str | None = None
    ) -> list[dict[str, Any]]:
        h = s.remediation_holds
        query = select(h).order_by(h.c.id)
        if cluster is not None:
            query = query.where(h.c.cluster == cluster)
        if node is not None:
            query = query.where(h.c.node == node)
        if kind is not None:
            query = query.where(h.c.kind == kind)
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(query).all()]

    # --- what the breakers count ------------------------------------------------------------

    def affected_nodes(
        self, since: datetime, clusters: list[str] | None = None
    ) -> list[dict[str, Any]]:
        """Nodes out of service now, or acted on (moved to ``repairing``) since ``since``, of
        ``clusters`` (None: the fleet): ``cluster``, ``pool``, ``node``, ``out`` (out of
        service now), ``left_at`` (when its current incident began: it last left service) and
        ``acted_at`` (its latest action since ``since``, or None)."""
        t, e = s.node_states, s.node_events
        out_q = select(t.c.cluster, t.c.pool, t.c.node).where(t.c.state != "released")
        left_q = (
            select(e.c.cluster, e.c.node, func.max(e.c.at).label("left_at"))
            .where(
                or_(e.c.from_state.is_(None), e.c.from_state == "released"),
                e.c.to_state != "released",
            )
            .group_by(e.c.cluster, e.c.node)
        )
        acted_q = (
            select(e.c.cluster, e.c.pool, e.c.node, func.max(e.c.at).label("acted_at"))
            .where(and_(e.c.to_state == "repairing", e.c.at >= since))
            .group_by(e.c.cluster, e.c.pool, e.c.node)
        )
        if clusters is not None:
            out_q = out_q.where(t.c.cluster.in_(clusters))
            left_q = left_q.where(e.c.cluster.in_(clusters))
            acted_q = acted_q.where(e.c.cluster.in_(clusters))
        with self.engine.connect() as conn:
            out = conn.execute(out_q).all()
            left = {(r.cluster, r.node): r.left_at for r in conn.execute(left_q).all()}
            acted = conn.execute(acted_q).all()
        nodes: dict[tuple[str, str], dict[str, Any]] = {}
        for r in out:
            nodes[(r.cluster, r.node)] = {
                "cluster": r.cluster,
                "pool": r.pool,
                "node": r.node,
                "out": True,
                "left_at": left.get((r.cluster, r.node)),
                "acted_at": None,
            }
        for r in acted:
            row = nodes.setdefault(
                (r.cluster, r.node),
                {
                    "cluster": r.cluster,
                    "pool": r.pool,
                    "node": r.node,
                    "out": False,
                    "left_at": left.get((r.cluster, r.node)),
                    "acted_at": None,
                },
            )
            row["acted_at"] = r.acted_at
        return sorted(nodes.values(), key=lambda r: (r["cluster"], r["node"]))
