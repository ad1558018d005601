"""A pool's validation lock (``gf_validation_locks``, one per pool and kind): one run validates
a pool's fabric, or its filesystem, at a time. Two runs pairing the same nodes at once would
each find the other's pods holding them and wait until their timeout, then record an error
that makes the gate refuse the pool; with the lock, the second one learns at once who is
validating the pool (``hold`` says so). Held by the validation task from its first round to
its verdict, renewed at each round, released with the verdict (or the error that ends it); a
holder that died is seen dead as the region lock's is (``services.common.leases``)."""

from __future__ import annotations

from datetime import datetime

from gpufleet.domain.leases import Liveness, holder_text, refusal
from gpufleet.services.common.leases import hold_lease
from gpufleet.store import Ledger


def hold(
    ledger: Ledger,
    cluster: str,
    pool: str,
    kind: str,
    dag_id: str,
    run_id: str,
    holder_alive: Liveness,
    now: datetime | None = None,
    holder: str | None = None,
) -> str | None:
    """Hold the pool's ``kind`` validation lock for ``run_id`` of ``dag_id`` (``holder``: one
    part of the run): None when it holds it now, else why not (a sentence naming the holder)."""
    held, row, lost = hold_lease(
        ledger.validation_lock(cluster, pool, kind),
        dag_id,
        run_id,
        holder_alive,
        now,
        holder=holder,
    )
    if held:
        return None
    return refusal(
        f"{cluster}/{pool} {kind}",
        "being validated",
        holder_text(row),
        ": its verdict stands for this pool",
        run_id if lost else None,
    )


def release(
    ledger: Ledger, cluster: str, pool: str, kind: str, run_id: str, holder: str | None = None
) -> bool:
    """Release the lock if ``run_id`` (``holder``) holds it (never another's)."""
    return ledger.validation_lock(cluster, pool, kind).release(run_id, holder)
