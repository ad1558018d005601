"""A ledger lock with a lease: one row per locked thing (``key``: its key columns), naming the
holder (``dag_id``, ``run_id``) and when it took the lock and last renewed it
(``taken_at``, ``heartbeat_at``). Whether a holder is dead is ``domain.leases``'; taking a
dead holder's lock over is a compare-and-set on the holder and heartbeat read, so of many
runs one wins. A region's onboarding lock (``gf_region_locks``) and a pool's validation lock
(``gf_validation_locks``) are two tables of this shape. A lock whose table has a ``holder``
column can be held by one part of a run (``holder``: a filesystem's full test by one pool of a
run whose other pools must see it held); a run's other holders hold it no more than another
run does. A reservation transition's lock is the running ``gf_transitions`` row
(``TransitionRecords.transition_lease``): the same renewal and compare-and-set on its ``id``
and ``state``, taken by ``open_transition`` rather than ``hold``."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Table, and_, delete, insert, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

from gpufleet.domain.clock import SYSTEM_CLOCK, Clock


def unchanged(column: Any, value: Any) -> Any:
    """``column`` still holds ``value`` as read (NULL included): a compare-and-set's test."""
    return column.is_(None) if value is None else and_(column.is_not(None), column == value)


class LeaseLock:
    """The lock of one thing: ``table`` (a lock table) at ``key`` (its key columns' values).
    ``renew``: columns a renewal sets besides ``heartbeat_at`` (a transition's holder DAG);
    ``clock``: the time a hold or take-over given no ``now`` is at (the ledger's)."""

    def __init__(
        self,
        engine: Engine,
        table: Table,
        key: Mapping[str, Any],
        renew: Mapping[str, Any] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ):
        self.engine = engine
        self.clock = clock
        self.table = table
        self.key = dict(key)
        self.renew = dict(renew or {})

    def _where(self, *more: Any) -> list[Any]:
        return [self.table.c[name] == value for name, value in self.key.items()] + list(more)

    def row(self) -> dict[str, Any] | None:
        with self.engine.connect() as conn:
            found = conn.execute(select(self.table).where(*self._where())).first()
        return dict(found._mapping) if found is not None else None

    def _holder(self, holder: str | None) -> dict[str, Any]:
        return {"holder": holder} if "holder" in self.table.c else {}

    def _taken(self, now: datetime) -> dict[str, Any]:
        return {"taken_at": now} if "taken_at" in self.table.c else {}

    def _mine(self, run_id: str, holder: str | None) -> list[Any]:
        t = self.table
        cond = [t.c.run_id == run_id]
        if "holder" in t.c:
            cond.append(t.c.holder.is_(None) if holder is None else t.c.holder == holder)
        return cond

    def hold(
        self, dag_id: str, run_id: str, now: datetime | None = None, holder: str | None = None
    ) -> dict[str, Any]:
        """Take the lock for ``run_id`` (``holder`` in it) when nobody holds it, its first
        heartbeat at ``now``; the lock's row either way (``run_id`` and ``holder`` say who
        holds it: this run, or the one to judge alive or dead)."""
        now = now or self.clock.now()
        row = self.row()
        if row is not None:  # held (perhaps by this run: a later round): no insert to refuse
            return row
        values = {**self.key, "dag_id": dag_id, "run_id": run_id, **self._holder(holder)}
        try:
            with self.engine.begin() as conn:
                conn.execute(insert(self.table).values(**values, taken_at=now, heartbeat_at=now))
        except IntegrityError:  # held (perhaps by this run: a later step)
            row = self.row()
            if row is None:  # released in between: try once more
                return self.hold(dag_id, run_id, now, holder)
            return row
        return self.row() or {}

    def heartbeat(self, run_id: str, now: datetime, holder: str | None = None) -> bool:
        """The holder renews its lease if ``run_id`` (``holder``) still holds the lock; False
        when it does not (taken over): the caller must stop."""
        t = self.table
        with self.engine.begin() as conn:
            changed = conn.execute(
                update(t)
                .where(*self._where(*self._mine(run_id, holder)))
                .values(heartbeat_at=now, **self.renew)
            ).rowcount
        return changed == 1

    def take_over(
        self,
        seen: Mapping[str, Any],
        dag_id: str | None,
        run_id: str,
        now: datetime | None = None,
        holder: str | None = None,
    ) -> bool:
        """Make ``run_id`` the holder if the holder and its heartbeat are still those of
        ``seen`` (the row the caller judged dead): compare-and-set, so of many runs taking over
        one wins, and a holder that renewed its lease meanwhile keeps it."""
        t = self.table
        now = now or self.clock.now()
        with self.engine.begin() as conn:
            changed = conn.execute(
                update(t)
                .where(
                    *self._where(
                        unchanged(t.c.run_id, seen.get("run_id")),
                        unchanged(t.c.heartbeat_at, seen.get("heartbeat_at")),
                    )
                )
                .values(
                    dag_id=dag_id,
                    run_id=run_id,
                    heartbeat_at=now,
                    **self._taken(now),
                    **self._holder(holder),
                )
            ).rowcount
        return changed == 1

    def release(self, run_id: str, holder: str | None = None) -> bool:
        """Release the lock if ``run_id`` (``holder``) holds it (never another's); True if it
        did."""
        t = self.table
        with self.engine.begin() as conn:
            gone = conn.execute(delete(t).where(*self._where(*self._mine(run_id, holder))))
        return gone.rowcount == 1
