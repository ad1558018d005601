"""Ledger records of the node lifecycle (``domain.nodes``): where each node that left service
stands (``gf_node_states``) and every move it made (``gf_node_events``: timed, with its evidence
and, for a person's move, who). A mixin of ``Ledger`` (it needs ``self.engine``).

``move_node`` is the one writer of both tables: it judges each move with the state machine
(``domain.nodes.check_move``, a node with no row starting ``released``: in service) against the
row it reads in the same transaction as it writes the state row and its event, so no caller
(the lifecycle service ``services.nodes.lifecycle.NodeLifecycle.move``, the ledger's ``quarantine``
and
``release``) can write a move the machine forbids: it raises ``NodeTransitionError``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import insert, select, update

from gpufleet.domain.clock import Clock
from gpufleet.domain.nodes import IN_SERVICE, NodeState, check_move
from gpufleet.store import schema as s
from gpufleet.store.rows import Clusters, of_clusters


@dataclass(frozen=True)
class NodeMove:
    """One move of a node's lifecycle: the state it goes to; what the ledger records with it
    (``reason``, ``evidence``, ``by`` a person's name, the ``run_id`` that made it, and the
    node's ``failed_repairs`` count when it changes); and the facts the state machine judges it
    by (``domain.nodes.check_move``: ``by`` set is a person's move, ``retest_passed``,
    ``job_running``, ``replaced``, ``stay``)."""

    to_state: NodeState
    reason: str | None = None
    evidence: dict[str, Any] | None = None
    by: str | None = None
    run_id: str | None = None
    failed_repairs: int | None = None
    retest_passed: bool | None = None
    job_running: bool = False
    replaced: bool = False
    stay: bool = False


class NodeRecords:
    engine: Any
    clock: Clock

    def node_state(self, cluster: str, node: str) -> dict[str, Any] | None:
        t = s.node_states
        with self.engine.connect() as conn:
            row = conn.execute(select(t).where(t.c.cluster == cluster, t.c.node == node)).first()
        return dict(row._mapping) if row is not None else None

    def node_states(
        self, cluster: Clusters = None, pool: str | None = None, states: Any = None
    ) -> list[dict[str, Any]]:
        """Rows of nodes (of ``cluster``, one name or several, and ``pool``; in ``states`` when
        given), by node name."""
        t = s.node_states
        query = select(t).order_by(t.c.cluster, t.c.node)
        if cluster is not None:
            query = query.where(of_clusters(t.c.cluster, cluster))
        if pool:
            query = query.where(t.c.pool == pool)
        if states is not None:
            query = query.where(t.c.state.in_([str(x) for x in states]))
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(query).all()]

    def move_node(self, cluster: str, pool: str, node: str, move: NodeMove) -> dict[str, Any]:
        """Set the node's state and append ``move`` to its history, once the state machine
        allowed it (``check_move`` with the move's facts); returns the new row."""
        now = self.clock.now()
        t, e = s.node_states, s.node_events
        with self.engine.begin() as conn:
            row = conn.execute(select(t).where(t.c.cluster == cluster, t.c.node == node)).first()
            check_move(
                row.state if row is not None else IN_SERVICE,
                move.to_state,
                by_person=move.by is not None,
                retest_passed=move.retest_passed,
                job_running=move.job_running,
                replaced=move.replaced,
                stay=move.stay,
                node=node,
            )
            values: dict[str, Any] = {
                "pool": pool,
                "state": str(move.to_state),
                "reason": move.reason,
                "evidence": move.evidence or {},
                "since": now,
            }
            if move.failed_repairs is not None:
                values["failed_repairs"] = move.failed_repairs
            if row is None:
                values.setdefault("failed_repairs", 0)
                conn.execute(insert(t).values(cluster=cluster, node=node, **values))
            else:
                conn.execute(
                    update(t).where(t.c.cluster == cluster, t.c.node == node).values(**values)
                )
            conn.execute(
                insert(e).values(
                    cluster=cluster,
                    node=node,
                    pool=pool,
                    from_state=row.state if row is not None else None,
                    to_state=str(move.to_state),
                    reason=move.reason,
                    evidence=move.evidence or {},
                    by=move.by,
                    run_id=move.run_id,
                    at=now,
                )
            )
        return self.node_state(cluster, node) or {}

    def node_history(self, cluster: str, node: str) -> list[dict[str, Any]]:
        e = s.node_events
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(e).where(e.c.cluster == cluster, e.c.node == node).order_by(e.c.id)
            ).all()
        return [dict(r._mapping) for r in rows]
