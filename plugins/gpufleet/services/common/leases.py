"""Holding a ledger lease lock (``store.locks.LeaseLock``): the one sequence every lock of a
run follows (a region's onboarding, a pool's validation, a reservation transition). Taken when
free; renewed (the holder's lease, ``heartbeat_at``) when this run holds it; taken over by
compare-and-set on the holder and heartbeat read when the holder is dead (``domain.leases``:
its run ended, or this Airflow does not know its run and its lease expired); else left to its
holder. ``hold_lease`` takes the lock with ``LeaseLock.hold``; a transition's lock is taken by
opening the transition, and ``keep_lease`` goes on from the row that read."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from gpufleet.domain.leases import LEASE_TTL, Liveness, holder_dead

if TYPE_CHECKING:
    from gpufleet.store.locks import LeaseLock


def hold_lease(
    lock: LeaseLock,
    dag_id: str,
    run_id: str,
    holder_alive: Liveness,
    now: datetime | None = None,
    lease_ttl: timedelta = LEASE_TTL,
    holder: str | None = None,
) -> tuple[bool, dict[str, Any], bool]:
    """Hold ``lock`` for ``run_id`` of ``dag_id`` (``holder``: one part of that run): (True,
    the row, False) when it holds it now, else (False, the row naming the holder, whether it
    held it and lost its lease to that holder meanwhile). Another holder of the same run is
    alive as long as the run is."""
    now = now or lock.clock.now()
    row = lock.hold(dag_id, run_id, now, holder)
    taken = row["run_id"] == run_id and row.get("holder") == holder and row["heartbeat_at"] == now
    held, current, lost = keep_lease(
        lock, row, dag_id, run_id, holder_alive, now, lease_ttl, holder, taken=taken
    )
    return held, current or row, lost


def keep_lease(
    lock: LeaseLock,
    row: dict[str, Any],
    dag_id: str,
    run_id: str,
    holder_alive: Liveness,
    now: datetime,
    lease_ttl: timedelta = LEASE_TTL,
    holder: str | None = None,
    *,
    taken: bool = False,
) -> tuple[bool, dict[str, Any] | None, bool]:
    """The sequence from ``row``, the lock's row as read (``taken``: this run has just taken
    it): ``(held, the lock's row as read again, lost)``. This run's lock is renewed (``lost``
    when it was taken over meanwhile); a dead holder's is taken over by compare-and-set;
    another's is left. The row read again is None when nobody holds the lock any more."""
    if row["run_id"] == run_id and row.get("holder") == holder:
        if taken or lock.heartbeat(run_id, now, holder):
            return True, row, False
        return False, lock.row(), True
    dead = holder_dead(row, holder_alive, now, dag_id=dag_id, ttl=lease_ttl)
    if dead and lock.take_over(row, dag_id, run_id, now, holder):
        return True, lock.row(), False
    return False, lock.row(), False
