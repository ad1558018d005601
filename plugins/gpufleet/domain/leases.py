"""When a ledger lock's holder is dead (the transition lock of a cluster, the onboarding lock
of a region). Pure.

A lock row names its holder (``dag_id``, ``run_id``) and carries a lease: ``heartbeat_at``,
refreshed by the holder each time one of its tasks touches the lock. The holder is dead when:

- this Airflow knows its run and says it is not queued or running (``alive`` answers False);
- this Airflow does not know its run (``alive`` answers None: another deployment sharing the
  ledger, a ``dags test``, a renamed DAG, a deleted run) and its lease expired: no heartbeat
  for longer than the lease's time to live.

A holder that is running (True), or unknown with a fresh heartbeat, keeps the lock.
``LEASE_TTL`` is 60 minutes. The waiting steps re-enter at most ``LEASE_RENEW`` (5 minutes)
apart and renew the lease each time, but a holder's validation tasks (a transition's or an
onboarding's NCCL and Lustre checks) run without touching the lock: the lease must outlast the
longest of them. The price: a holder that died in another deployment keeps the lock for up to
an hour (one this Airflow knows is seen dead at once).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

LEASE_TTL = timedelta(minutes=60)
LEASE_RENEW = timedelta(minutes=5)  # a holder's waiting task touches its lock at least this often

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
