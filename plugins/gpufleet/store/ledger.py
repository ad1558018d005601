"""Ledger access: one ``Ledger`` per database URL, used by operators, the CLI and benchmarks."""

from __future__ import annotations

from typing import Any

from sqlalchemy import and_, func, insert, select, update
from sqlalchemy.exc import DBAPIError, IntegrityError

from gpufleet.domain.clock import SYSTEM_CLOCK, Clock
from gpufleet.errors import LedgerError
from gpufleet.store import migrations
from gpufleet.store import schema as s
from gpufleet.store.approvals import ApprovalRecords
from gpufleet.store.database import (
    LEDGER_CONN_ID,
    default_ledger_url,
    display_url,
    engine_for,
    normalise_url,
)
from gpufleet.store.events import EventRecords
from gpufleet.store.nodes import NodeRecords
from gpufleet.store.regions import RegionRecords
from gpufleet.store.remediation import RemediationRecords
from gpufleet.store.rows import Clusters, of_clusters, select_dicts
from gpufleet.store.snapshots import SnapshotRecords
from gpufleet.store.transitions import TransitionRecords
from gpufleet.store.validations import ValidationRecords

__all__ = ["LEDGER_CONN_ID", "Ledger"]

_ready: set[str] = set()  # URLs whose schema this process has prepared


def _row(r: Any) -> dict[str, Any] | None:
    return dict(r._mapping) if r is not None else None


class Ledger(
    ValidationRecords,
    RegionRecords,
    TransitionRecords,
    NodeRecords,
    SnapshotRecords,
    EventRecords,
    RemediationRecords,
    ApprovalRecords,
):
    """Typed reads and writes over the ledger tables. Safe to construct often (engines cached).
    ``clock``: what every time it records is read from (the entry point's; a test's to move)."""

    source: str | None = None  # where its URL came from (opening.open_ledger), for messages

    def __init__(self, url: str | None = None, clock: Clock = SYSTEM_CLOCK):
        self.clock = clock
        self.url = normalise_url(url) if url else default_ledger_url()
        self.engine = engine_for(self.url)
        if self.url not in _ready:
            self._ensure_schema()
            _ready.add(self.url)

    def _ensure_schema(self) -> None:
        try:  # the schema is prepared under a database lock (see migrations.ensure_schema)
            migrations.ensure_schema(self.engine)
        except DBAPIError as exc:
            raise LedgerError(f"cannot prepare the ledger at {self.safe_url}: {exc.orig}") from exc

    @property
    def safe_url(self) -> str:
        """The ledger's URL without user info, for messages."""
        return display_url(self.engine.url)

    # --- pool lifecycle ------------------------------------------------------------------------

    def set_pool_state(
        self,
        cluster: str,
        pool: str,
        state: str,
        reason: str | None = None,
        run_id: str | None = None,
    ) -> None:
        now = self.clock.now()
        t = s.pool_state
        with self.engine.begin() as conn:
            updated = conn.execute(
                update(t)
                .where(t.c.cluster == cluster, t.c.pool == pool)
                .values(state=state, reason=reason, updated_at=now)
            ).rowcount
            if not updated:
                try:
                    with conn.begin_nested():
                        conn.execute(
                            insert(t).values(
                                cluster=cluster,
                                pool=pool,
                                state=state,
                                reason=reason,
                                updated_at=now,
                            )
                        )
                except IntegrityError:  # another process inserted it first
                    conn.execute(
                        update(t)
                        .where(t.c.cluster == cluster, t.c.pool == pool)
                        .values(state=state, reason=reason, updated_at=now)
                    )
            conn.execute(
                insert(s.pool_events).values(
                    cluster=cluster, pool=pool, state=state, reason=reason, run_id=run_id, at=now
                )
            )

    def pool_state(self, cluster: str, pool: str) -> dict[str, Any] | None:
        t = s.pool_state
        with self.engine.connect() as conn:
            return _row(
                conn.execute(select(t).where(t.c.cluster == cluster, t.c.pool == pool)).first()
            )

    def pool_states(self, cluster: Clusters = None) -> dict[tuple[str, str], dict[str, Any]]:
        """Every pool's state (only ``cluster``'s: one name or several), by (cluster, pool)."""
        q = select(s.pool_state)
        if cluster is not None:
            q = q.where(of_clusters(s.pool_state.c.cluster, cluster))
        with self.engine.connect() as conn:
            rows = select_dicts(conn, q)
        return {(r["cluster"], r["pool"]): r for r in rows}

    # --- quarantine: read from the node lifecycle (gf_node_states, gf_node_events) -----------

    def quarantined(
        self, cluster: Clusters = None, pool: str | None = None
    ) -> list[dict[str, Any]]:
        """The nodes out of service since a quarantine that was not followed by a release, by
        node: the quarantine's reason, run id and time (``quarantined_at``), the current pool
        (of ``cluster``: one name or several)."""
        e, t, later = s.node_events, s.node_states, s.node_events.alias("later")
        last_release = (
            select(func.max(later.c.id))
            .where(
                later.c.cluster == e.c.cluster,
                later.c.node == e.c.node,
                later.c.to_state == "released",
            )
            .scalar_subquery()
        )
        query = (
            select(e.c.id, e.c.cluster, t.c.pool, e.c.node, e.c.reason, e.c.run_id)
            .add_columns(e.c.at.label("quarantined_at"), t.c.state)  # state: where it is now
            .join(t, and_(t.c.cluster == e.c.cluster, t.c.node == e.c.node))
            .where(e.c.to_state == "quarantined", e.c.id > func.coalesce(last_release, 0))
            .order_by(e.c.id)
        )
        if cluster is not None:
            query = query.where(of_clusters(t.c.cluster, cluster))
        if pool:
            query = query.where(t.c.pool == pool)
        first: dict[tuple[str, str], dict[str, Any]] = {}
        with self.engine.connect() as conn:
            for r in conn.execute(query).all():  # the first quarantine since the last release
                first.setdefault((r.cluster, r.node), {**r._mapping, "released_at": None})
        return sorted(first.values(), key=lambda q: (q["node"], q["cluster"]))

    # --- gate decisions and launches -----------------------------------------------------------

    def record_gate_decision(
        self,
        *,
        cluster: str,
        pools: list[str],
        nodes: int,
        launch: bool,
        reasons: list[str],
        job: str | None = None,
        run_id: str | None = None,
        pool: str | None = None,
    ) -> int:
        """One gate decision; ``pool`` is the pool a launch was decided onto."""
        with self.engine.begin() as conn:
            return int(
                conn.execute(
                    insert(s.gate_decisions).values(
                        cluster=cluster,
                        pools=list(pools),
                        pool=pool,
                        nodes=nodes,
                        launch=launch,
                        reasons=list(reasons),
                        job=job,
                        run_id=run_id,
                        decided_at=self.clock.now(),
                    )
                ).inserted_primary_key[0]
            )

    def gate_decision(self, decision_id: int) -> dict[str, Any] | None:
        g = s.gate_decisions
        with self.engine.connect() as conn:
            return _row(conn.execute(select(g).where(g.c.id == decision_id)).first())

    def gate_decisions(self, limit: int = 20) -> list[dict[str, Any]]:
        g = s.gate_decisions
        with self.engine.connect() as conn:
            rows = conn.execute(select(g).order_by(g.c.id.desc()).limit(limit)).all()
            return [dict(r._mapping) for r in rows]

    def find_launch(
        self, *, cluster: str, namespace: str, job: str, run_id: str
    ) -> dict[str, Any] | None:
        """The launch of ``namespace/job`` on ``cluster`` in run ``run_id``, if recorded."""
        t = s.launches
        key = (t.c.cluster == cluster, t.c.namespace == namespace, t.c.job == job)
        with self.engine.connect() as conn:
            return _row(conn.execute(select(t).where(*key, t.c.run_id == run_id)).first())

    def ensure_launch(
        self,
        *,
        cluster: str,
        namespace: str,
        job: str,
        run_id: str,
        pool: str,
        state: str,
        gate_decision_id: int | None = None,
        expected_transport: str | None = None,
    ) -> tuple[dict[str, Any], bool]:
        """The launch row of this job in this run: ``(row, True)`` when this call recorded it,
        ``(row, False)`` when it was already there (the row as recorded, whatever was passed).
        One row per (cluster, namespace, job, run), also when two processes race."""
        if not run_id:
            raise LedgerError("a launch is recorded under its run id: run_id is required")
        key = {"cluster": cluster, "namespace": namespace, "job": job, "run_id": run_id}
        found = self.find_launch(**key)
        if found is not None:
            return found, False
        now = self.clock.now()
        values = {
            **key,
            "pool": pool,
            "state": state,
            "gate_decision_id": gate_decision_id,
            "expected_transport": expected_transport,
            "created_at": now,
            "updated_at": now,
        }
        error: IntegrityError | None = None
        try:
            with self.engine.begin() as conn:
                conn.execute(insert(s.launches).values(**values))
            created = True
        except IntegrityError as exc:  # another process recorded it first, or a bad reference
            created, error = False, exc
        row = self.find_launch(**key)
        if row is None:
            why = error.orig if error is not None else "the row vanished"
            raise LedgerError(
                f"cannot record the launch of {namespace}/{job} in run {run_id}: {why}"
            ) from error
        return row, created

    def update_launch(self, launch_id: int, **values: Any) -> None:
        t = s.launches
        with self.engine.begin() as conn:
            now = self.clock.now()
            conn.execute(update(t).where(t.c.id == launch_id).values(updated_at=now, **values))

    def launch(self, launch_id: int) -> dict[str, Any] | None:
        t = s.launches
        with self.engine.connect() as conn:
            return _row(conn.execute(select(t).where(t.c.id == launch_id)).first())

    def launches(self, limit: int = 20) -> list[dict[str, Any]]:
        t = s.launches
        with self.engine.connect() as conn:
            rows = conn.execute(select(t).order_by(t.c.id.desc()).limit(limit)).all()
            return [dict(r._mapping) for r in rows]

    def count(self, table: str) -> int:
        tbl = s.metadata.tables[table]
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(tbl)).scalar() or 0)
