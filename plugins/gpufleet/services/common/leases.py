"""Holding a ledger lease lock (``store.locks.LeaseLock``): the one sequence every lock of a
run follows (a region's onboarding, a pool's validation). Taken when free; renewed (the
holder's lease, ``heartbeat_at``) when this run holds it; taken over by compare-and-set on the
holder and heartbeat read when the holder is dead (``domain.leases``: its run ended, or this
Airflow does not know its run and its lease expired); else left to its holder."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from gpufleet.domain.leases import LEASE_TTL, Liveness, holder_dead


def hold_lease(
    lock: Any,
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
    now = now or datetime.now(UTC)
    row = lock.hold(dag_id, run_id, now, holder)
    if row["run_id"] == run_id and row.get("holder") == holder:
        if row["heartbeat_at"] == now or lock.heartbeat(run_id, now, holder):
            return True, row, False
        return False, lock.row() or row, True
    dead = holder_dead(row, holder_alive, now, dag_id=row["dag_id"], ttl=lease_ttl)
    if dead and lock.take_over(row, dag_id, run_id, now, holder):
        return True, lock.row() or row, False
    return False, lock.row() or row, False


def holder_text(row: dict[str, Any]) -> str:
    """The holder a refusal names: ``run R of DAG (since T, last heard from H)``, with
    ``(X)`` after the run when one part of it, ``X``, holds it."""
    part = f" ({row['holder']})" if row.get("holder") else ""
    return (
        f"run {row['run_id']}{part} of {row['dag_id']} (since {row['taken_at']}, last heard "
        f"from {row['heartbeat_at']})"
    )


LEASE_MINUTES = int(LEASE_TTL.total_seconds() // 60)  # how long an unknown holder's lease lasts
