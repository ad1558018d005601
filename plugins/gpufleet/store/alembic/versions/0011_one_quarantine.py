"""Version 11: quarantine in one table. The node lifecycle (``gf_node_states``, ``gf_node_events``)
is the record of a quarantine; ``gf_quarantined_nodes`` is dropped once its rows are carried over:

- an open quarantine (``released_at`` NULL) of a node the lifecycle holds in service (no row,
  or ``released``) becomes its state ``quarantined`` (the reason, the run id as evidence, since
  it was quarantined) and an event; a node the lifecycle already holds out of service keeps its
  state (its quarantine event is there);
- the quarantines of a node with no lifecycle events at all (kept before version 8) become its
  history: a ``quarantined`` event, and a ``released`` one for a closed row.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

CARRIED = "gf_quarantined_nodes (schema version 11)"

quarantined_nodes = sa.table(
    "gf_quarantined_nodes",
    sa.column("id", sa.Integer),
    sa.column("cluster", sa.String),
    sa.column("pool", sa.String),
    sa.column("node", sa.String),
    sa.column("reason", sa.Text),
    sa.column("run_id", sa.String),
    sa.column("quarantined_at", sa.DateTime(timezone=True)),
    sa.column("released_at", sa.DateTime(timezone=True)),
)
node_states = sa.table(
    "gf_node_states",
    sa.column("cluster", sa.String),
    sa.column("node", sa.String),
    sa.column("pool", sa.String),
    sa.column("state", sa.String),
    sa.column("reason", sa.Text),
    sa.column("failed_repairs", sa.Integer),
    sa.column("evidence", sa.JSON),
    sa.column("since", sa.DateTime(timezone=True)),
)
node_events = sa.table(
    "gf_node_events",
    sa.column("cluster", sa.String),
    sa.column("node", sa.String),
    sa.column("pool", sa.String),
    sa.column("from_state", sa.String),
    sa.column("to_state", sa.String),
    sa.column("reason", sa.Text),
    sa.column("evidence", sa.JSON),
    sa.column("by", sa.String),
    sa.column("run_id", sa.String),
    sa.column("at", sa.DateTime(timezone=True)),
)


def _event(conn, q, from_state, to_state, at) -> None:
    conn.execute(
        node_events.insert().values(
            cluster=q.cluster,
            node=q.node,
            pool=q.pool,
            from_state=from_state,
            to_state=to_state,
            reason=q.reason if to_state == "quarantined" else "released (before version 11)",
            evidence={"reason": q.reason, "run_id": q.run_id, "carried_from": CARRIED},
            by=None,
            run_id=q.run_id,
            at=at,
        )
    )


def upgrade() -> None:
    conn = op.get_bind()
    cols = (node_states.c.cluster, node_states.c.node, node_states.c.state)
    states = {(r.cluster, r.node): r.state for r in conn.execute(sa.select(*cols))}
    has_row = set(states)
    with_history = {
        (r.cluster, r.node)
        for r in conn.execute(sa.select(node_events.c.cluster, node_events.c.node).distinct())
    }
    rows = conn.execute(sa.select(quarantined_nodes).order_by(quarantined_nodes.c.id)).all()
    for q in rows:
        key, before = (q.cluster, q.node), states.get((q.cluster, q.node))
        if q.released_at is not None:
            if key not in with_history:  # kept before the lifecycle: its history
                _event(conn, q, before, "quarantined", q.quarantined_at)
                _event(conn, q, "quarantined", "released", q.released_at)
                states[key] = "released"
            continue
        if (before or "released") != "released":
            continue  # the lifecycle holds it out of service already, with its quarantine
        _event(conn, q, before, "quarantined", q.quarantined_at)
        values = {
            "pool": q.pool,
            "state": "quarantined",
            "reason": q.reason,
            "evidence": {"reason": q.reason, "run_id": q.run_id, "carried_from": CARRIED},
            "since": q.quarantined_at,
        }
        if key in has_row:
            where = (node_states.c.cluster == q.cluster) & (node_states.c.node == q.node)
            conn.execute(node_states.update().where(where).values(**values))
        else:
            conn.execute(
                node_states.insert().values(
                    cluster=q.cluster, node=q.node, failed_repairs=0, **values
                )
            )
            has_row.add(key)
        states[key] = "quarantined"
    op.drop_table("gf_quarantined_nodes")


def downgrade() -> None:
    raise NotImplementedError("the ledger only moves forward")
