"""When a ledger lock's holder is dead (the transition lock of a cluster, the onboarding lock
of a region). Pure.

Design: docs/design/locks-and-leases.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

LEASE_TTL = timedelta(minutes=60)
LEASE_RENEW = timedelta(minutes=5)  # a holder's waiting task touches its lock at least this often
LEASE_MINUTES = int(LEASE_TTL.total_seconds() // 60)  # how long an unknown holder's lease lasts
HANDED_ON = (
    "a run that died hands the lock on (one this Airflow does not know, after "
    f"{LEASE_MINUTES} minutes of silence)"
)

# (dag_id, run_id) -> True (queued or running), False (ended), None (unknown to this Airflow)
Liveness = Callable[[str, str], "bool | None"]


def last_heartbeat(row: Mapping[str, Any]) -> datetime | None:
    """When the holder last touched the lock: its heartbeat, else when it took the lock."""
    for key in ("heartbeat_at", "taken_at", "started_at"):
        if isinstance(row.get(key), datetime):
            return row[key]
    return None


def lease_expired(row: Mapping[str, Any], now: datetime, ttl: timedelta = LEASE_TTL) -> bool:
    """No heartbeat for longer than ``ttl`` (a lock with no time at all is expired)."""
    beat = last_heartbeat(row)
    return beat is None or now - beat > ttl


def holder_dead(
    row: Mapping[str, Any],
    alive: Liveness,
    now: datetime,
    *,
    dag_id: str,
    ttl: timedelta = LEASE_TTL,
) -> bool:
    """Whether the lock's holder is dead (see the module). ``dag_id``: the holder's DAG when
    the row does not name one (a transition recorded before v10: the caller's own DAG)."""
    run_id = row.get("run_id")
    if not run_id:
        return True
    known = alive(row.get("dag_id") or dag_id, run_id)
    if known is not None:
        return not known
    return lease_expired(row, now, ttl)


def holder_text(row: Mapping[str, Any]) -> str:
    """The holder a refusal names: ``run R of DAG (since T, last heard from H)``, with
    ``(X)`` after the run when one part of it, ``X``, holds it."""
    part = f" ({row['holder']})" if row.get("holder") else ""
    return (
        f"run {row['run_id']}{part} of {row['dag_id']} (since {row['taken_at']}, last heard "
        f"from {row['heartbeat_at']})"
    )


def refusal(what: str, doing: str, holder: str, then: str, lost: str | None = None) -> str:
    """The sentence every lock refuses with: ``what`` (the locked thing) ``doing`` by
    ``holder`` (the run holding it), ``then`` (what the refused run does: its leading
    punctuation included), and ``HANDED_ON``; with ``lost``, that this run (``lost``) held the
    lock and lost its lease to that holder. E.g. ``region R: this run (run-1) lost its lease;
    it is being onboarded by run run-2 ...: nothing was changed; wait for that run to end; a
    run that died hands the lock on (...)``."""
    why = f"this run ({lost}) lost its lease; " if lost else ""
    return f"{what}: {why}{doing} by {holder}{then}; {HANDED_ON}"
