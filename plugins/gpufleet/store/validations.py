"""Ledger records of validations: one row per pool verdict per run (``gf_validations``: the
verdict, its reasons, figures and details) with its per-pair figures (``gf_validation_pairs``),
and the reads the gate, drift, reports and cost summaries make over them. A mixin of ``Ledger``
(it needs ``self.engine``).

Order is the ledger's insertion order (row ids), never a row's own timestamp.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from datetime import datetime
from functools import lru_cache
from typing import Any

from sqlalchemy import insert, select, update

from gpufleet.domain.clock import Clock
from gpufleet.domain.validation_kinds import ValidationKind
from gpufleet.errors import LedgerError
from gpufleet.store import schema as s
from gpufleet.store.rows import typed_rows

_CLUSTERS = 400  # cluster names bound per statement
_MARKS = {"qmark": "?", "format": "%s", "pyformat": "%s"}  # positional, by DB-API paramstyle


@lru_cache(maxsize=16)
def _latest_of(clusters: int, kinds: int, mark: str) -> str:
    """The latest row of every pool of ``clusters`` clusters in ``kinds`` kinds: the latest
    validations (v16, ``store.schema_latest``) joined to their rows; parameters positional
    (``mark``), the clusters then the kinds."""
    columns = ", ".join(f"v.{c.name}" for c in s.validations.c)  # by name: upgraded tables differ
    return (
        f"SELECT {columns} FROM gf_latest_validations l "
        "JOIN gf_validations v ON v.id = l.validation_id "
        f"WHERE l.cluster IN ({', '.join([mark] * clusters)}) "
        f"AND l.kind IN ({', '.join([mark] * kinds)})"
    )


class ValidationRecords:
    engine: Any
    clock: Clock

    def record_validation(
        self,
        *,
        run_id: str,
        cluster: str,
        pool: str,
        kind: str,
        passed: bool,
        started_at: datetime,
        finished_at: datetime | None = None,
        pairs: Iterable[dict[str, Any]] = (),
        **fields: Any,
    ) -> int:
        """One pool's verdict for one run, with its per-pair figures; returns the row id.
        ``passed`` records verdict ``pass`` or ``fail`` (see ``record_validation_error``)."""
        values = {
            "run_id": run_id,
            "cluster": cluster,
            "pool": pool,
            "kind": kind,
            "passed": passed is True,
            "verdict": fields.pop("verdict", None) or ("pass" if passed is True else "fail"),
            "started_at": started_at,
            "finished_at": finished_at or self.clock.now(),
            "reasons": list(fields.pop("reasons", [])),
            "details": dict(fields.pop("details", {})),
            **fields,
        }
        with self.engine.begin() as conn:
            vid = conn.execute(insert(s.validations).values(**values)).inserted_primary_key[0]
            rows = [
                {**p, "validation_id": vid, "reasons": list(p.get("reasons", []))} for p in pairs
            ]
            if rows:
                conn.execute(insert(s.validation_pairs), rows)
        return int(vid)

    def record_validation_error(
        self,
        run_id: str,
        cluster: str,
        pool: str,
        kind: str,
        reason: str,
        started_at: datetime | None = None,
    ) -> int:
        """A validation that could not finish: verdict ``error``, not passed, finished now. It
        becomes the pool's latest validation, so the pool stops counting as validated at once."""
        now = self.clock.now()
        return self.record_validation(
            run_id=run_id,
            cluster=cluster,
            pool=pool,
            kind=kind,
            passed=False,
            verdict="error",
            started_at=started_at or now,
            finished_at=now,
            reasons=[reason],
        )

    def latest_validation(self, cluster: str, pool: str, kind: str) -> dict[str, Any] | None:
        """The last validation recorded (highest row id: the ledger's insertion order, never a
        row's own timestamp, which a skewed clock or a hand edit can put anywhere), with its
        ``verdict``."""
        v = s.validations
        q = (
            select(v)
            .where(v.c.cluster == cluster, v.c.pool == pool, v.c.kind == kind)
            .order_by(v.c.id.desc())
            .limit(1)
        )
        with self.engine.connect() as conn:
            row = conn.execute(q).first()
        return dict(row._mapping) if row is not None else None

    def latest_validations(
        self,
        cluster: str,
        pools: Iterable[str],
        kinds: Iterable[str] = (ValidationKind.FABRIC, ValidationKind.STORAGE),
    ) -> dict[tuple[str, str], dict[str, Any]]:
        """``latest_validation`` of every (pool, kind) of one cluster, keyed by (pool, kind), in
        one statement (``latest_validations_by_cluster``), so a page over many pools costs no
        more with a year of history."""
        return self.latest_validations_by_cluster({cluster: pools}, kinds)[cluster]

    def latest_validations_by_cluster(
        self,
        by_cluster: Mapping[str, Iterable[str]],
        kinds: Iterable[str] = (ValidationKind.FABRIC, ValidationKind.STORAGE),
    ) -> dict[str, dict[tuple[str, str], dict[str, Any]]]:
        """``latest_validation`` of every (pool, kind) of many clusters (a fleet-wide read):
        cluster -> (pool, kind) -> row, every cluster asked present. The ledger's latest
        validations (``gf_latest_validations``, kept by the database) joined to their rows,
        ``_CLUSTERS`` clusters to a statement: no index probe into the history, whatever its
        length. Rows are typed as ``select`` types them (``store.rows.typed_rows``)."""
        pools = {cluster: set(names) for cluster, names in by_cluster.items()}
        kinds = list(dict.fromkeys(kinds))
        out: dict[str, dict[tuple[str, str], dict[str, Any]]] = {c: {} for c in pools}
        clusters = [c for c, names in pools.items() if names]
        if not clusters or not kinds:
            return out
        dialect = self.engine.dialect
        mark = _MARKS.get(dialect.paramstyle)
        with self.engine.connect() as conn:
            for start in range(0, len(clusters), _CLUSTERS):
                chunk = clusters[start : start + _CLUSTERS]
                if mark is None:  # a driver without positional parameters: SQLAlchemy binds
                    v, latest = s.validations, s.latest_validations
                    query = (
                        select(v)
                        .join(latest, latest.c.validation_id == v.c.id)
                        .where(latest.c.cluster.in_(chunk), latest.c.kind.in_(kinds))
                    )
                    rows = [dict(r._mapping) for r in conn.execute(query)]
                else:
                    sql = _latest_of(len(chunk), len(kinds), mark)
                    rows = typed_rows(
                        conn.exec_driver_sql(sql, (*chunk, *kinds)), s.validations.c, dialect
                    )
                for row in rows:
                    if row["pool"] in pools.get(row["cluster"], ()):
                        out[row["cluster"]][(row["pool"], row["kind"])] = row
        return out

    def validation_history(
        self,
        cluster: str,
        pool: str,
        kind: str = ValidationKind.FABRIC,
        limit: int = 30,
        *,
        passed_only: bool = False,
        before_id: int | None = None,
    ) -> list[dict[str, Any]]:
        """The most recent ``limit`` verdicts (insertion order), oldest first; with
        ``passed_only`` only passing ones, with ``before_id`` only those recorded before that
        row. One query on the (cluster, pool, kind, id) index."""
        v = s.validations
        cond = [v.c.cluster == cluster, v.c.pool == pool, v.c.kind == kind]
        if passed_only:
            cond.append(v.c.verdict == "pass")
        if before_id is not None:
            cond.append(v.c.id < before_id)
        q = select(v).where(*cond).order_by(v.c.id.desc()).limit(limit)
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in reversed(conn.execute(q).all())]

    def merge_validation_details(self, validation_id: int, entries: dict[str, Any]) -> None:
        """Merge ``entries`` into one validation row's ``details`` (keys replaced whole)."""
        v = s.validations
        with self.engine.begin() as conn:
            row = conn.execute(select(v.c.details).where(v.c.id == validation_id)).first()
            if row is None:
                raise LedgerError(f"no validation {validation_id} to add details to")
            details = {**(row.details or {}), **entries}
            conn.execute(update(v).where(v.c.id == validation_id).values(details=details))

    def first_pass_latencies(self, validation_ids: Iterable[int]) -> dict[int, list[float]]:
        """The small-message latency of each passing first-pass pair, per validation (one
        query for all of them)."""
        p = s.validation_pairs
        ids = list(validation_ids)
        out: dict[int, list[float]] = {i: [] for i in ids}
        if not ids:
            return out
        q = select(p.c.validation_id, p.c.small_latency_us).where(
            p.c.validation_id.in_(ids),
            p.c.pass_no == 1,
            p.c.passed.is_(True),
            p.c.small_latency_us.is_not(None),
        )
        with self.engine.connect() as conn:
            for vid, latency in conn.execute(q.order_by(p.c.id)).all():
                out[vid].append(float(latency))
        return out

    def small_latencies(self, rows: Iterable[dict[str, Any]]) -> dict[int, float | None]:
        """Each fabric validation row's small-message latency, by row id: the figure its details
        recorded (``small_latency_us``), else the median of its passing first-pass pairs (one
        query for every row missing it), else None."""
        out: dict[int, float | None] = {}
        missing = []
        for r in rows:
            out[r["id"]] = (r.get("details") or {}).get("small_latency_us")
            if out[r["id"]] is None:
                missing.append(r["id"])
        for vid, values in self.first_pass_latencies(missing).items():
            out[vid] = statistics.median(values) if values else None
        return out

    def validations_since(
        self, cluster: str, pools: Iterable[str], kind: str, since: datetime
    ) -> list[dict[str, Any]]:
        """The verdicts of ``kind`` of ``cluster``'s ``pools`` finished at ``since`` or later,
        newest first (a night's rows, whichever the latest is: a pool's storage check recorded
        after its filesystem's full test does not hide the full test). One query on the
        (cluster, pool, kind, id) index."""
        v = s.validations
        names = sorted(set(pools))
        if not names:
            return []
        q = (
            select(v)
            .where(
                v.c.cluster == cluster,
                v.c.pool.in_(names),
                v.c.kind == kind,
                v.c.finished_at >= since,
            )
            .order_by(v.c.id.desc())
        )
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(q).all()]

    def validations_for_run(self, run_id: str) -> list[dict[str, Any]]:
        v = s.validations
        with self.engine.connect() as conn:
            rows = conn.execute(select(v).where(v.c.run_id == run_id).order_by(v.c.id)).all()
            return [dict(r._mapping) for r in rows]

    def pairs(self, validation_id: int) -> list[dict[str, Any]]:
        p = s.validation_pairs
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(p).where(p.c.validation_id == validation_id).order_by(p.c.id)
            ).all()
            return [dict(r._mapping) for r in rows]
