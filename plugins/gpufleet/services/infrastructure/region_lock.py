"""A region's onboarding lock (``gf_region_locks``): one run onboards a region at a time.

Every step of a run that changes the region holds it first (``hold``): taken when free;
renewed (the holder's lease, ``heartbeat_at``) when this run holds it; taken over by
compare-and-set on the holder and heartbeat read when the holder is dead (``domain.leases``:
its run ended, or this Airflow does not know its run and its lease expired); refused, naming
the holder, otherwise. ``RegionOnboarding.lock`` is the caller.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from gpufleet.domain.leases import LEASE_TTL, Liveness, holder_text, refusal
from gpufleet.services.common.leases import hold_lease

if TYPE_CHECKING:
    from gpufleet.store import Ledger


def hold(
    ledger: Ledger,
    region: str,
    dag_id: str,
    run_id: str,
    holder_alive: Liveness,
    now: datetime | None = None,
    lease_ttl: timedelta = LEASE_TTL,
) -> str | None:
    """Hold ``region``'s lock for ``run_id`` of ``dag_id``: None when this run holds it now,
    else why not (a sentence naming the holder, for the refusal)."""
    held, row, lost = hold_lease(
        ledger.region_lease(region), dag_id, run_id, holder_alive, now, lease_ttl
    )
    if held:
        return None
    return _refusal(region, row, lost=run_id if lost else None)


def _refusal(region: str, row: dict[str, Any], lost: str | None = None) -> str:
    return refusal(
        f"region {region}",
        "it is being onboarded",
        holder_text(row),
        ": nothing was changed; wait for that run to end",
        lost,
    )
