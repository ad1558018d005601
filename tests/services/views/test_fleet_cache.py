"""The api-server's fleet cache (``services.views.fleet_cache.FleetCache``, issue 18): between
requests it keeps what the fleet page and ``/metrics`` judge on and re-reads only the clusters
whose ledger version moved (v17), so a scrape of 2,000 pools does not re-read 2,000 pools. What
it answers is always what a fresh read answers, after every kind of write the pages show,
including a write that lands between its read of the versions and its read of the rows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpufleet.config.catalog import load_catalog
from gpufleet.services.views.fleet import judge
from gpufleet.services.views.fleet_cache import FleetCache, pools_by_cluster, read_inputs
from gpufleet.store import Ledger
from tests.services.views.test_fleet_reads import night  # noqa: F401 - fixture: several clusters' night
from tests.support.ledger_helpers import quarantine, release

COUNTS = {"nodes": 4, "ready": 4, "free": 3, "quarantined": 1, "busy": 0}


def fresh(ledger: Ledger):
    return read_inputs(load_catalog(), ledger)


def test_each_request_rereads_only_the_clusters_whose_ledger_moved(night):  # noqa: F811
    ledger, catalog, cache = night, load_catalog(), FleetCache()
    clusters = list(pools_by_cluster(catalog.pools()))
    assert len(clusters) >= 3
    c, other = clusters[0], clusters[1]
    pool = pools_by_cluster(catalog.pools())[c][0]
    now = datetime.now(UTC)
    assert cache.inputs(catalog, ledger) == fresh(ledger)
    assert cache.reread == len(clusters)

    def request(expect_reread: set[str]) -> None:
        before = cache.reread
        kept = cache.inputs(catalog, ledger)
        assert kept == fresh(ledger)  # the cache answers what a fresh read answers
        assert judge(kept, now) == judge(fresh(ledger), now)
        assert cache.reread - before == len(expect_reread)

    request(set())  # nothing written: nothing re-read
    ledger.record_validation(
        run_id="night-2", cluster=c, pool=pool, kind="fabric", passed=False,
        started_at=now, finished_at=now, transport="socket", expected_transport="gib",
        reasons=["NCCL fell back to sockets"],
    )  # fmt: skip
    request({c})
    quarantine(ledger, c, pool, f"{pool}-node-9", "bad link", run_id="night-2")
    request({c})
    ledger.set_pool_state(other, pools_by_cluster(catalog.pools())[other][0], "degraded")
    request({other})
    ledger.record_node_snapshot(c, pool, COUNTS, [], source="fabric", run_id="night-2")
    release(ledger, c, f"{pool}-node-9", "fixed", by="alice")
    request({c})
    running = next(c for c in clusters if ledger.running_transition(c))
    ledger.finish_transition(ledger.running_transition(running)["id"], "done")  # its pools free
    request({running})
    region = next(r.region.name for r in catalog.pools() if r.cluster.name == c)
    ledger.set_region_state(region, "failed", "by hand")  # a region moves no cluster: FLEET
    request(set())
    assert judge(cache.inputs(catalog, ledger, [region]), now)[0].problems[0] == (
        "region: onboarding failed"
    )


def test_clusters_that_moved_together_are_read_in_one_statement_per_table(night):  # noqa: F811
    """A scrape while a nightly moves several clusters reads each table once for all of them
    (naming them), not once per cluster, and answers what a fresh read answers."""
    from sqlalchemy import event

    ledger, catalog, cache = night, load_catalog(), FleetCache()
    by_cluster = pools_by_cluster(catalog.pools())
    clusters = list(by_cluster)
    assert len(clusters) >= 3
    cache.inputs(catalog, ledger)
    statements: list[str] = []

    def count(conn, cursor, statement, *args) -> None:
        statements.append(statement)

    def moved(names: list[str]) -> int:
        for i, c in enumerate(names):
            pool = by_cluster[c][0]
            ledger.set_pool_state(c, pool, "degraded", f"moved {i}")
            quarantine(ledger, c, pool, f"{pool}-node-{len(statements)}", "bad link", run_id="n")
        statements.clear()
        event.listen(ledger.engine, "before_cursor_execute", count)
        try:
            before = cache.reread
            kept = cache.inputs(catalog, ledger)
            assert cache.reread - before == len(names)
        finally:
            event.remove(ledger.engine, "before_cursor_execute", count)
        assert kept == fresh(ledger)
        assert all(kept.quarantined[(c, by_cluster[c][0])] >= 1 for c in names)
        return len(statements)

    one = moved(clusters[:1])
    assert moved(clusters[:3]) == one


def test_a_write_while_the_rows_are_read_is_not_lost(night, monkeypatch):  # noqa: F811
    """A writer that commits while the cache reads the rows (after the pool states, before the
    transitions): the version the cache files them under was read before, so the write moved
    past it and the next request reads the cluster again (a cache that read the versions after
    the rows would keep the old pool state for good). On a cold cache and on a refresh."""
    ledger, catalog, cache = night, load_catalog(), FleetCache()
    c = next(iter(pools_by_cluster(catalog.pools())))
    pool = pools_by_cluster(catalog.pools())[c][0]
    read_last = type(ledger).transitioned_pools  # the last table a cluster's read reads

    def race(state: str) -> None:
        def rows_then_a_write(self):
            out = read_last(self)
            monkeypatch.setattr(type(ledger), "transitioned_pools", read_last)
            ledger.set_pool_state(c, pool, state, "by hand")  # after its state was read
            return out

        monkeypatch.setattr(type(ledger), "transitioned_pools", rows_then_a_write)

    race("retired")
    cache.inputs(catalog, ledger)  # cold: every cluster read, the write lands mid-read
    kept = cache.inputs(catalog, ledger)
    assert kept == fresh(ledger) and kept.facts[f"{c}/{pool}"].state.value == "retired"
    ledger.set_pool_state(c, pool, "degraded", "by hand")
    race("suspect")
    cache.inputs(catalog, ledger)  # a refresh of c, the write lands mid-read
    kept = cache.inputs(catalog, ledger)
    assert kept == fresh(ledger) and kept.facts[f"{c}/{pool}"].state.value == "suspect"


def test_a_new_catalog_rereads_everything_and_another_ledger_is_kept_apart(
    night,  # noqa: F811
    tmp_path,
):
    ledger, cache = night, FleetCache()
    cache.inputs(load_catalog(), ledger)
    other = Ledger(f"sqlite:///{tmp_path / 'other.db'}")
    assert cache.inputs(load_catalog(), other) == fresh(other)  # an empty ledger: its own
    assert cache.inputs(load_catalog(), ledger) == fresh(ledger)
    before = cache.reread
    from gpufleet.config import catalog as module

    module._loaded.clear()  # as when the files change: the loader builds a new catalog
    copy = load_catalog()
    cache.inputs(copy, ledger)
    assert cache.reread - before == len(pools_by_cluster(copy.pools()))


@pytest.mark.parametrize("threads", [4])
def test_requests_in_parallel_threads_judge_whole_tables(night, threads):  # noqa: F811
    """The api-server's threads: a refresh swaps new tables in while other requests judge the
    previous ones; none sees a table changing under it."""
    from concurrent.futures import ThreadPoolExecutor

    ledger, catalog, cache = night, load_catalog(), FleetCache()
    c = next(iter(pools_by_cluster(catalog.pools())))
    pool = pools_by_cluster(catalog.pools())[c][0]
    now = datetime.now(UTC)

    def one(i: int) -> int:
        if i % 3 == 0:
            ledger.record_node_snapshot(
                c, pool, {**COUNTS, "free": i % 4}, [], source="fabric", run_id=f"r{i}"
            )
        return len(judge(cache.inputs(catalog, ledger), now + timedelta(seconds=i)))

    with ThreadPoolExecutor(threads) as pool_:
        sizes = list(pool_.map(one, range(24)))
    assert set(sizes) == {len(list(catalog.pools()))}
    assert cache.inputs(catalog, ledger) == fresh(ledger)


def test_verdicts_are_kept_while_they_hold_and_judged_again_when_they_may_not(
    night,  # noqa: F811
    monkeypatch,
):
    """``judge`` over a cache's inputs keeps each cluster's verdicts: a request judges only the
    clusters whose ledger moved, every cluster when the regions moved, time went back or a
    validation turned stale since, and the clusters holding a stale validation each time (its
    age is in the text). Whatever it keeps, it answers what judging afresh answers."""
    from gpufleet.services.views import fleet

    ledger, catalog, cache = night, load_catalog(), FleetCache()
    clusters = pools_by_cluster(catalog.pools())
    c = next(iter(clusters))
    judged: list[str] = []
    real = fleet._judge_pool

    def counted(inputs, ref, now):
        judged.append(ref.cluster.name)
        return real(inputs, ref, now)

    monkeypatch.setattr(fleet, "_judge_pool", counted)
    now = datetime.now(UTC)

    def request(at: datetime, expect: set[str] | None = None) -> set[str]:
        judged.clear()
        verdicts = judge(cache.inputs(catalog, ledger), at)
        again = set(judged)
        assert verdicts == judge(fresh(ledger), at)  # kept or not, the fresh answer
        stale = {v.ref.cluster.name for v in verdicts if any("stale" in p for p in v.problems)}
        assert stale <= again  # a stale age is written at every request
        if expect is not None:
            assert again == expect | stale, (again, expect, stale)
        return again

    assert request(now) == set(clusters)
    request(now, set())
    request(now + timedelta(minutes=5), set())
    pool = clusters[c][0]
    ledger.record_validation(
        run_id="night-2", cluster=c, pool=pool, kind="fabric", passed=True,
        started_at=now, finished_at=now, transport="gib", expected_transport="gib",
    )  # fmt: skip
    request(now + timedelta(minutes=6), {c})
    request(now + timedelta(minutes=7), set())
    request(now - timedelta(minutes=1), set(clusters))  # the clock went back: none kept
    region = next(r.region.name for r in catalog.pools() if r.cluster.name == c)
    ledger.set_region_state(region, "failed", "by hand")
    request(now + timedelta(minutes=8), set(clusters))
    validated = {
        cluster for cluster in clusters
        if any(v.fact.fabric for v in judge(fresh(ledger), now) if v.ref.cluster.name == cluster)
    }  # fmt: skip
    assert c in validated
    later = now + timedelta(hours=27)  # tonight's validations are stale by then
    assert validated <= request(later)
    assert any("stale" in p for v in judge(fresh(ledger), later) for p in v.problems)
