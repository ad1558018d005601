"""The Lustre full test once per filesystem per night, and each pool's own check (issue 18):
through the storage service over the simulated fleet (a3u-sim's three pools share
lustre-a3u)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpufleet.config.catalog import load_catalog
from gpufleet.domain.faults import parse_fault
from gpufleet.services.validation.full_test import claim_full_test, release_full_test
from gpufleet.services.validation.storage import StorageValidation
from gpufleet.services.views.cost import last_full_tests
from gpufleet.store import Ledger
from tests.support.fleet import _wait

ALIVE = lambda dag_id, run_id: "running"  # noqa: E731 - every holder is alive here


@pytest.fixture
def ledger(fleet_state):
    return Ledger()


def claim_for(ledger, ref, run_id, now=None):
    return lambda rid: claim_full_test(ledger, ref, "nightly", rid, ALIVE, now)


def storage(ledger, pool: str, run_id: str, now=None, finish: bool = True):
    ref = load_catalog().pool("a3u-sim", pool)
    svc = StorageValidation(ref, ledger, claim=claim_for(ledger, ref, run_id, now))
    state = svc.begin(run_id)
    if not finish:
        return svc, state
    _wait(svc.backend, state.workload)
    svc.finish(state)
    return next(
        r
        for r in ledger.validations_for_run(run_id)
        if r["pool"] == pool and r["kind"] == "storage"
    )


def test_the_first_pool_runs_the_full_test_the_others_check_their_own_clients(ledger):
    full = storage(ledger, "h200-a", "night-1")
    own = storage(ledger, "h200-b", "night-1")
    assert full["details"]["scope"] == "filesystem" and full["details"]["clients"] == 4
    assert own["details"]["scope"] == "pool" and own["details"]["clients"] == 2
    assert full["passed"] and own["passed"], (full["reasons"], own["reasons"])
    assert full["expected_mb_s"] == full["details"]["tier_expected_mb_s"]
    assert own["expected_mb_s"] == pytest.approx(full["expected_mb_s"] / 2)  # 2 of 4 shares
    # two clients read what two of the full test's four did (tonight's noise aside)
    assert own["read_mb_s"] == pytest.approx(full["read_mb_s"] / 2, rel=0.2)
    assert (
        "full throughput test ran" in own["reasons"][-1] and "a3u-sim/h200-a" in own["reasons"][-1]
    )
    # the pool's check costs a fraction of the full test
    assert own["details"]["gpu_minutes"] < full["details"]["gpu_minutes"] / 4


def test_a_pool_check_still_fails_a_pool_whose_route_to_the_filesystem_is_slow(ledger):
    from gpufleet.backends.faults import fault_injection

    storage(ledger, "h200-a", "night-1")
    ref = load_catalog().pool("a3u-sim", "h200-b")
    fault_injection(ref.cluster).inject("h200-b", parse_fault("lustre-slow:0.5"))
    own = storage(ledger, "h200-b", "night-1")
    assert own["details"]["scope"] == "pool" and not own["passed"]
    assert "2 of 4 clients' share" in own["reasons"][0], own["reasons"]


def test_while_one_pool_runs_the_full_test_another_checks_its_own_clients(ledger):
    first, state = storage(ledger, "h200-a", "night-1", finish=False)
    assert state.scope == "filesystem"
    other = storage(ledger, "h200-b", "night-1")  # the same run's other pool, meanwhile
    assert other["details"]["scope"] == "pool"
    assert "is being run by run night-1 (a3u-sim/h200-a)" in other["reasons"][-1], other["reasons"]
    # the other pool's task ends by releasing what it may hold: never h200-a's lock
    release_full_test(ledger, load_catalog().pool("a3u-sim", "h200-b"), "night-1")
    assert ledger.validation_lock("a3u-sim", "lustre-a3u", "filesystem").row()["holder"] == (
        "a3u-sim/h200-a"
    )
    _wait(first.backend, state.workload)
    first.finish(state)
    # its verdict released the filesystem's lock
    assert ledger.validation_lock("a3u-sim", "lustre-a3u", "filesystem").row() is None


def test_the_next_night_runs_the_full_test_again_and_an_error_is_no_full_test(ledger):
    storage(ledger, "h200-a", "night-1")
    ref = load_catalog().pool("a3u-sim", "h200-c")
    later = datetime.now(UTC) + timedelta(hours=ref.filesystem.full_test_hours, minutes=1)
    assert claim_full_test(ledger, ref, "nightly", "night-2", ALIVE, later) is None
    ledger.validation_lock("a3u-sim", "lustre-a3u", "filesystem").release(
        "night-2", "a3u-sim/h200-c"
    )
    # a full test that could not finish (h200-a's newest row tonight) counts for nothing
    ledger.record_validation_error("night-3", "a3u-sim", "h200-a", "storage", "lost the cluster")
    assert claim_full_test(ledger, ref, "nightly", "night-3", ALIVE) is None


def at_cadence(every: int):
    """h200-c's pool (lustre-a3u's third) with the filesystem tested once in ``every`` nights."""
    base = load_catalog().pool("a3u-sim", "h200-c")
    fs = base.filesystem.model_copy(update={"full_test_every_nights": every})
    others = tuple(f for f in base.cluster.filesystems if f.name != fs.name)
    cluster = base.cluster.model_copy(update={"filesystems": (*others, fs)})
    return base.model_copy(update={"cluster": cluster})


@pytest.mark.parametrize(("every", "stands_h"), [(1, 20), (3, 68), (7, 164)])
def test_a_filesystem_full_test_once_in_n_nights_stands_that_long(ledger, every, stands_h):
    """``full_test_every_nights``: the full test stands 20 h and a day per further night of its
    cadence; the pools' own checks run every night meanwhile."""
    storage(ledger, "h200-a", "night-1")
    ref = at_cadence(every)
    assert ref.filesystem.full_test_every_nights == every
    assert ref.filesystem.full_test_hours == stands_h
    start = datetime.now(UTC)
    before = start + timedelta(hours=stands_h) - timedelta(minutes=5)
    assert "full throughput test ran" in claim_full_test(
        ledger, ref, "nightly", "night-2", ALIVE, before
    )
    after = start + timedelta(hours=stands_h, minutes=1)
    assert claim_full_test(ledger, ref, "nightly", "night-3", ALIVE, after) is None


def test_a_pool_check_that_fails_makes_a_weekly_full_test_due_again(ledger):
    """Tested once a week, the filesystem is tested again the night after any pool's own
    clients read short: the full test tells a filesystem below its tier from one pool's route."""
    from gpufleet.backends.faults import fault_injection

    full = storage(ledger, "h200-a", "night-1")
    ref, tomorrow = at_cadence(7), datetime.now(UTC) + timedelta(days=1)
    assert "full throughput test ran" in claim_full_test(
        ledger, ref, "nightly", "night-2", ALIVE, tomorrow
    )
    passed = storage(ledger, "h200-b", "night-1")  # a pool check that passes changes nothing
    assert passed["details"]["scope"] == "pool" and passed["passed"]
    assert "full throughput test ran" in claim_full_test(
        ledger, ref, "nightly", "night-2", ALIVE, tomorrow
    )
    fault_injection(ref.cluster).inject("h200-b", parse_fault("lustre-slow:0.5"))
    short = storage(ledger, "h200-b", "night-1b")
    assert short["details"]["scope"] == "pool" and not short["passed"]
    assert claim_full_test(ledger, ref, "nightly", "night-2", ALIVE, tomorrow) is None
    # the night's cost still shares out the full test that ran (the shipped catalog's 7)
    assert load_catalog().pool("a3u-sim", "h200-a").filesystem.full_test_every_nights == 7
    shared = last_full_tests(ledger, load_catalog(), [short])[("a3u-sim", "lustre-a3u")]
    assert shared is not None and shared["id"] == full["id"]


def test_a_full_test_that_failed_stands_its_night_only(ledger):
    from gpufleet.backends.faults import fault_injection

    ref = at_cadence(7)
    fault_injection(ref.cluster).inject("h200-a", parse_fault("lustre-slow:0.3"))
    failed = storage(ledger, "h200-a", "night-1")
    assert failed["details"]["scope"] == "filesystem" and not failed["passed"]
    start = datetime.now(UTC)
    assert "full throughput test ran" in claim_full_test(
        ledger, ref, "nightly", "night-1b", ALIVE, start + timedelta(hours=19)
    )
    assert (
        claim_full_test(ledger, ref, "nightly", "night-2", ALIVE, start + timedelta(hours=21))
        is None
    )


@pytest.mark.parametrize("bad", [0, 8, True, "2", 1.5])
def test_the_catalog_refuses_a_full_test_cadence_outside_1_to_7_nights(bad):
    from pydantic import ValidationError

    fs = load_catalog().pool("a3u-sim", "h200-a").filesystem
    with pytest.raises(ValidationError, match="full_test_every_nights"):
        fs.model_validate({**fs.model_dump(), "full_test_every_nights": bad})
