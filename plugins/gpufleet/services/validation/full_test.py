"""Who runs a Lustre filesystem's full throughput test tonight (``storage`` runs it).

Pools share a filesystem, so its full test runs once in its ``full_test_every_nights``: the
first pool's validation that finds no full test of it standing (``last_full_test``: within the
filesystem's ``full_test_hours``) and takes its lock (``claim_full_test``: the validation lock
table, pool = the filesystem, kind ``filesystem``) runs it; the lock is released with its
verdict (``release_full_test``). A fabric validation that runs its pool's own check in its
pairs' pods asks ``pool_check_duty`` whether that check is the pool's tonight.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from gpufleet.domain.fleet import FULL_TEST_HOURS, PoolRef
from gpufleet.domain.leases import Liveness, holder_text
from gpufleet.domain.validation_kinds import ValidationKind
from gpufleet.services.common.leases import hold_lease
from gpufleet.store import Ledger

FULL = "filesystem"  # StorageState.scope of the full test (the lock's kind too)
POOL = "pool"  # StorageState.scope of a pool check


def last_full_test(ledger: Ledger, ref: PoolRef, now: datetime) -> dict[str, Any] | None:
    """The full test of ``ref``'s filesystem that stands at ``now`` (``newest_full_test``), if
    it still does: past its own night (``FULL_TEST_HOURS``) only a full test that passed
    stands, and a pool check that **failed** after it (any pool's) voids it. Either way the
    next validation runs the full test again, to tell a filesystem that fell short from one
    pool's route to it: a filesystem tested once in ``full_test_every_nights`` is tested again
    the night after its full test failed or a pool's own clients read short."""
    found, short = _full_tests(ledger, ref, now)
    if found is None or any(i > found["id"] for i in short):
        return None  # none, or a pool's own clients read short since: test it again
    if found["verdict"] == "fail" and found["finished_at"] < now - timedelta(hours=FULL_TEST_HOURS):
        return None  # it failed on a night before this one: test it again
    return found


def newest_full_test(ledger: Ledger, ref: PoolRef, now: datetime) -> dict[str, Any] | None:
    """The newest full test of ``ref``'s filesystem (by any pool of its cluster mounting it)
    that reached a verdict within its ``full_test_hours`` of ``now``, standing or not: what a
    night's cost shares out (``views.cost``). Per pool, its newest storage row that is not its
    own pool check decides (a pool check, recorded by its fabric validation, is often newer
    than the full test and never hides it; an error after the full test, a try that could not
    finish, leaves the pool no full test); a row from before pool checks existed (no
    ``scope``) was a full test."""
    return _full_tests(ledger, ref, now)[0]


def _full_tests(
    ledger: Ledger, ref: PoolRef, now: datetime
) -> tuple[dict[str, Any] | None, list[int]]:
    """(``newest_full_test``, the ids of the filesystem's failed pool checks in its window)."""
    fs = ref.filesystem
    if fs is None:
        return None, []
    pools = [p.name for p in ref.cluster.node_pools if p.filesystem == fs.name]
    rows = ledger.validations_since(
        ref.cluster.name, pools, ValidationKind.STORAGE, now - timedelta(hours=fs.full_test_hours)
    )
    decided: dict[str, dict[str, Any] | None] = {}
    short: list[int] = []
    for r in rows:  # newest first
        scope = (r.get("details") or {}).get("scope", FULL)
        if scope == POOL and r["verdict"] == "fail":
            short.append(r["id"])
        if r["pool"] in decided:
            continue
        judged = r["verdict"] in ("pass", "fail")
        if judged and scope == POOL:
            continue  # the pool's own check: look further back
        decided[r["pool"]] = r if judged and scope == FULL else None
    found = [r for r in decided.values() if r is not None]
    return max(found, key=lambda r: r["id"], default=None), short


def claim_full_test(
    ledger: Ledger,
    ref: PoolRef,
    dag_id: str,
    run_id: str,
    holder_alive: Liveness,
    now: datetime | None = None,
) -> str | None:
    """Whether this pool's validation in ``run_id`` is to run ``ref``'s filesystem full test
    tonight: None when it is (no full test of it within its ``full_test_hours``, and it now holds
    the filesystem's lock, released with its verdict), else why not, naming who did or does
    it."""
    now = now or ledger.clock.now()
    return _claim(ledger, ref, dag_id, run_id, holder_alive, now, last_full_test(ledger, ref, now))


def _claim(  # noqa: PLR0913  claim_full_test's, with the night's full test read once
    ledger: Ledger,
    ref: PoolRef,
    dag_id: str,
    run_id: str,
    holder_alive: Liveness,
    now: datetime,
    done: dict[str, Any] | None,
) -> str | None:
    """``claim_full_test`` given ``done``, the filesystem's last full test (``last_full_test``)."""
    fs = ref.filesystem
    assert fs is not None, f"{ref.key} mounts no filesystem"  # only a pool that mounts one asks
    if done is not None:
        return _ran(fs.name, done)
    held, row, _lost = hold_lease(
        ledger.validation_lock(ref.cluster.name, fs.name, FULL),
        dag_id,
        run_id,
        holder_alive,
        now,
        holder=ref.key,
    )
    if held:
        return None
    return (
        f"filesystem {fs.name}'s full throughput test is being run by {holder_text(row)}: "
        "this pool checked its own clients"
    )


def pool_check_duty(
    ledger: Ledger,
    ref: PoolRef,
    dag_id: str,
    run_id: str,
    holder_alive: Liveness,
    now: datetime | None = None,
) -> str | None:
    """For a fabric validation that runs ``ref``'s storage pool check in its pairs' pods: why
    the check is the pool's own tonight (another pool runs or ran the filesystem's full test:
    ``claim_full_test``'s reason), or None when the full test is this pool's in ``run_id`` (its
    storage task runs it, or ran it: no pool check beside it)."""
    now = now or ledger.clock.now()
    done = last_full_test(ledger, ref, now)
    if done is not None and done["run_id"] == run_id and done["pool"] == ref.pool.name:
        return None
    return _claim(ledger, ref, dag_id, run_id, holder_alive, now, done)


def pool_check_reason(ledger: Ledger, ref: PoolRef, host: str, now: datetime | None = None) -> str:
    """For a fabric validation whose pool does not host its filesystem's full test tonight
    (``scope.full_test_hosts`` named ``host``): why its pool check is its own: the full test
    standing, or ``host``'s to run. It never takes the full test: this pool has no storage task
    to run it."""
    fs = ref.filesystem
    assert fs is not None, f"{ref.key} mounts no filesystem"  # only a pool that mounts one asks
    done = last_full_test(ledger, ref, now or ledger.clock.now())
    if done is not None:
        return _ran(fs.name, done)
    return (
        f"filesystem {fs.name}'s full throughput test is {ref.cluster.name}/{host}'s tonight: "
        "this pool checked its own clients"
    )


def _ran(fs: str, done: dict[str, Any]) -> str:
    """Why a pool checks its own clients: ``done``, its filesystem's last full test, stands."""
    return (
        f"filesystem {fs}'s full throughput test ran at "
        f"{done['finished_at']:%Y-%m-%d %H:%M} UTC from {done['cluster']}/{done['pool']} "
        f"(run {done['run_id']}): "
        "this pool checked its own clients"
    )


def release_full_test(ledger: Ledger, ref: PoolRef, run_id: str) -> None:
    """Release the filesystem's full-test lock if ``run_id`` holds it."""
    from gpufleet.services.validation import validation_lock

    if ref.filesystem is not None:
        validation_lock.release(
            ledger, ref.cluster.name, ref.filesystem.name, FULL, run_id, ref.key
        )
