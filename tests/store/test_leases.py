"""When a ledger lock's holder is dead (``domain.leases``): what this Airflow knows of its run
decides; for a run it does not know, only the lease. And the renewal of a lease in the ledger
(``store.locks.LeaseLock.heartbeat``, on both of its tables: a region's onboarding lock and a
pool's validation lock): only the holder moves it, never a run whose lease was taken over."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpufleet.domain.leases import LEASE_RENEW, LEASE_TTL, holder_dead
from gpufleet.services.common.leases import hold_lease
from gpufleet.store import Ledger
from tests.store.test_ledger import ledger_url  # noqa: F401  (fixture: SQLite and PostgreSQL)

T0 = datetime(2026, 12, 1, 3, 0, tzinfo=UTC)
ROW = {"dag_id": "d", "run_id": "r", "taken_at": T0 - timedelta(hours=1), "heartbeat_at": T0}


@pytest.mark.parametrize(
    ("known", "after", "dead"),
    [
        (True, timedelta(days=3), False),  # running: never taken, however silent
        (False, timedelta(0), True),  # ended: taken at once
        (None, LEASE_TTL, False),  # unknown: the lease decides, to the second
        (None, LEASE_TTL + timedelta(seconds=1), True),
    ],
)
def test_a_holder_is_dead_when_its_run_ended_or_unknown_with_an_expired_lease(known, after, dead):
    assert holder_dead(ROW, lambda d, r: known, T0 + after, dag_id="x") is dead


def test_the_lease_counts_from_the_lock_taken_or_the_transition_started_without_a_heartbeat():
    row = {"run_id": "r", "started_at": T0}
    assert not holder_dead(row, lambda d, r: None, T0 + LEASE_TTL, dag_id="x")
    assert holder_dead(row, lambda d, r: None, T0 + LEASE_TTL * 2, dag_id="x")
    assert holder_dead({"run_id": None}, lambda d, r: True, T0, dag_id="x")  # no holder


def test_the_holders_dag_is_asked_else_the_callers():
    asked = []
    holder_dead(ROW, lambda d, r: asked.append(d), T0, dag_id="x")
    holder_dead({**ROW, "dag_id": None}, lambda d, r: asked.append(d), T0, dag_id="x")
    assert asked == ["d", "x"]


def test_a_holder_touches_its_lock_several_times_per_lease():
    assert LEASE_RENEW * 3 <= LEASE_TTL


# --- renewing in the ledger: only the holder moves its lease, on both lease-lock tables ------

LOCKS = {  # the two tables of store.locks.LeaseLock's shape
    "region": lambda ledger: ledger.region_lease("sim-europe-west4"),
    "validation": lambda ledger: ledger.validation_lock("a3u-sim", "h200-a", "fabric"),
}
UNKNOWN = lambda dag_id, run_id: None  # noqa: E731 - this Airflow knows neither run: leases decide
PAST = LEASE_TTL + timedelta(minutes=1)  # silent this long: the lease expired


@pytest.mark.parametrize("table", sorted(LOCKS))
def test_a_run_renewing_after_its_lease_was_taken_over_is_refused_and_moves_nothing(
    ledger_url,  # noqa: F811
    table,
):
    """Run A holds, goes silent past its lease, run B takes the lock over; A's late renewal
    (its task read the lock as its own before B took it) must answer False (the caller stops)
    and leave B's heartbeat alone: else B's lease is stretched by a run that no longer holds
    it, and A goes on acting as the holder."""
    lock = LOCKS[table](Ledger(ledger_url))
    assert hold_lease(lock, "d", "run-a", UNKNOWN, T0)[0]
    assert not hold_lease(lock, "d", "run-b", UNKNOWN, T0 + LEASE_TTL)[0]  # fresh: A keeps it
    assert hold_lease(lock, "d", "run-b", UNKNOWN, T0 + PAST)[0]  # expired: B takes over
    taken = lock.row()
    assert (taken["run_id"], taken["heartbeat_at"]) == ("run-b", T0 + PAST)

    assert lock.heartbeat("run-a", T0 + PAST + LEASE_RENEW) is False
    assert lock.row() == taken  # B's lease, holder and start untouched

    assert lock.heartbeat("run-b", T0 + PAST + LEASE_RENEW) is True  # the holder renews
    assert lock.row()["heartbeat_at"] == T0 + PAST + LEASE_RENEW


def test_another_part_of_the_holders_run_does_not_renew_its_lease(ledger_url):  # noqa: F811
    """A validation lock held by one part of a run (``holder``: one pool's full filesystem
    test) is renewed by that part only: the run's other parts hold it no more than another
    run does (``store.locks``)."""
    lock = LOCKS["validation"](Ledger(ledger_url))
    lock.hold("d", "run-a", T0, holder="pool-1")
    held = lock.row()
    assert lock.heartbeat("run-a", T0 + LEASE_RENEW, holder="pool-2") is False
    assert lock.heartbeat("run-a", T0 + LEASE_RENEW) is False  # the run itself, no part
    assert lock.row() == held
    assert lock.heartbeat("run-a", T0 + LEASE_RENEW, holder="pool-1") is True
    assert lock.row()["heartbeat_at"] == T0 + LEASE_RENEW


# --- the one refusal sentence of every lock --------------------------------------------------


def test_the_refusal_names_what_who_and_what_to_do_then_that_a_dead_holder_hands_on():
    from gpufleet.domain.leases import HANDED_ON, LEASE_MINUTES, refusal

    assert LEASE_MINUTES == 60 and HANDED_ON.endswith("after 60 minutes of silence)")
    assert refusal("region R", "it is being onboarded", "run X", ": wait") == (
        f"region R: it is being onboarded by run X: wait; {HANDED_ON}"
    )
    assert refusal("pool P", "being validated", "run X", ": wait", lost="run-a") == (
        f"pool P: this run (run-a) lost its lease; being validated by run X: wait; {HANDED_ON}"
    )


def test_the_region_and_validation_locks_refuse_in_the_one_sentence(ledger_url):  # noqa: F811
    """Both locks' refusals name the holder (``holder_text``) and end with ``HANDED_ON``."""
    from gpufleet.domain.leases import HANDED_ON, holder_text
    from gpufleet.services.infrastructure import region_lock
    from gpufleet.services.validation import validation_lock

    ledger = Ledger(ledger_url)
    region = "sim-europe-west4"
    assert region_lock.hold(ledger, region, "d", "run-a", UNKNOWN, T0) is None
    why = region_lock.hold(ledger, region, "d", "run-b", UNKNOWN, T0)
    row = ledger.region_lock(region)
    assert why == (
        f"region {region}: it is being onboarded by {holder_text(row)}: nothing was changed; "
        f"wait for that run to end; {HANDED_ON}"
    )
    args = (ledger, "a3u-sim", "h200-a", "fabric", "d")
    assert validation_lock.hold(*args, "run-a", UNKNOWN, T0) is None
    assert validation_lock.hold(*args, "run-b", UNKNOWN, T0 + PAST) is None  # taken over
    row = ledger.validation_lock("a3u-sim", "h200-a", "fabric").row()
    assert validation_lock.hold(*args, "run-a", UNKNOWN, T0 + PAST) == (
        f"a3u-sim/h200-a fabric: being validated by {holder_text(row)}: its verdict stands "
        f"for this pool; {HANDED_ON}"
    )
