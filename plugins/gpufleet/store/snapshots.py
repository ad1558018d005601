"""Ledger records of node snapshots (``gf_node_snapshots``, v12): one row per pool, replaced
each time a task that lists the pool's nodes anyway records what it saw; and each cluster's
ledger version (v17), what a long-lived reader of them re-reads by. A mixin of ``Ledger`` (it
needs ``self.engine``)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.exc import IntegrityError

from gpufleet.domain.clock import Clock
from gpufleet.store import schema as s
from gpufleet.store.locks import LeaseLock
from gpufleet.store.rows import Clusters, of_clusters, select_dicts

COUNTS = ("nodes", "ready", "free", "quarantined", "busy")


class SnapshotRecords:
    """``record_node_snapshot`` and ``node_snapshots``; ``validation_lock`` (v13), the lease
    lock of one pool's validation of one kind."""

    engine: Any
    clock: Clock

    def validation_lock(self, cluster: str, pool: str, kind: str) -> LeaseLock:
        return LeaseLock(
            self.engine,
            s.validation_locks,
            {"cluster": cluster, "pool": pool, "kind": kind},
            clock=self.clock,
        )

    def record_node_snapshot(
        self,
        cluster: str,
        pool: str,
        counts: Mapping[str, int],
        detail: list[dict[str, Any]],
        *,
        source: str,
        run_id: str | None = None,
        at: datetime | None = None,
    ) -> None:
        """Replace the pool's snapshot: ``counts`` has every key of ``COUNTS`` (whole numbers,
        none above ``nodes``: the table refuses otherwise), ``detail`` one dict per node."""
        missing = [k for k in COUNTS if k not in counts]
        if missing:
            raise ValueError(f"a node snapshot needs {', '.join(missing)}")
        t = s.node_snapshots
        row = {
            "cluster": cluster,
            "pool": pool,
            "taken_at": at or self.clock.now(),
            "source": source,
            "run_id": run_id,
            "detail": list(detail),
            **{k: int(counts[k]) for k in COUNTS},
        }
        where = (t.c.cluster == cluster, t.c.pool == pool)
        with self.engine.begin() as conn:  # one statement wins: a reader sees the old or new
            if conn.execute(update(t).where(*where).values(**row)).rowcount:
                return
            try:
                with conn.begin_nested():
                    conn.execute(insert(t).values(**row))
            except IntegrityError:  # another task recorded the pool's first snapshot meanwhile
                conn.execute(update(t).where(*where).values(**row))

    def node_snapshots(
        self, cluster: Clusters = None, *, detail: bool = True
    ) -> dict[tuple[str, str], dict[str, Any]]:
        """(cluster, pool) -> the pool's latest snapshot (every pool, or ``cluster``'s: one name
        or several);
        without ``detail`` the counts only (a fleet-wide page needs no per-node list)."""
        t = s.node_snapshots
        columns = [c for c in t.c if detail or c.name != "detail"]
        query = select(*columns)
        if cluster is not None:
            query = query.where(of_clusters(t.c.cluster, cluster))
        with self.engine.connect() as conn:
            return {(r["cluster"], r["pool"]): r for r in select_dicts(conn, query)}

    def cluster_versions(self) -> dict[str, int]:
        """Each cluster's ledger version (v17, ``store.schema_versions``): it moves with every
        write a fleet-wide read depends on; ``schema_versions.FLEET`` moves with the regions.
        A cluster never written has no entry (read it as 0)."""
        t = s.cluster_versions
        with self.engine.connect() as conn:
            return {
                r.cluster: int(r.version) for r in conn.execute(select(t.c.cluster, t.c.version))
            }
