"""The event-storm bench (``bench.event_storm``) keeps its promises at a tiny size: every
faulted node quarantined, at most two watch calls in flight per cluster, the quiet period's API
calls and the storm's counted per cluster, every batch handled and timed, and the simulated
time deterministic (the same seed: the same calls and batches per cluster)."""

from __future__ import annotations

import pytest

from bench.event_storm import WATCH_BOUND, StormResult, StormSpec, run_storm

pytestmark = [pytest.mark.slow]

QUIET_S, STORM_S, SETTLE_S, FLUSH_S = 300.0, 300.0, 120.0, 10.0


@pytest.fixture(scope="module")
def storm(tmp_path_factory) -> StormResult:
    spec = StormSpec(
        pools=20, quiet_s=QUIET_S, storm_s=STORM_S, settle_s=SETTLE_S, flush_s=FLUSH_S, seed=3
    )
    return run_storm(spec, work=tmp_path_factory.mktemp("storm"))


def test_every_faulted_node_is_quarantined_and_no_healthy_one(storm):
    assert len(storm.faulted) == round(0.1 * storm.nodes) == 32
    assert storm.quarantined == len(storm.faulted)
    assert storm.missed == [] and storm.healthy_out == []
    assert storm.ok


def test_the_watch_calls_per_cluster_are_bounded_and_both_streams_watched_at_once(storm):
    assert set(storm.most_watches) == set(storm.quiet.calls) and storm.clusters == 2
    assert all(most == WATCH_BOUND for most in storm.most_watches.values())


def test_quiet_and_storm_are_counted_per_cluster(storm):
    rounds = QUIET_S / FLUSH_S
    # a quiet period: one nodes watch and one Events watch per round, no batch; and a round
    # of interval readings a minute: one list of the exporter pods, one read per node
    watches = storm.quiet.watch_calls
    assert all(abs(n - 2 * rounds) <= 2 for n in watches.values()), watches
    lists = storm.quiet.readings["list_exporters"]
    assert storm.clusters * QUIET_S / 60 <= lists <= storm.clusters * (QUIET_S / 60 + 1)
    assert storm.quiet.readings["scrape_exporter"] == lists * storm.nodes // storm.clusters
    assert sum(storm.quiet.calls.values()) == sum(watches.values()) + sum(
        storm.quiet.readings.values()
    )
    assert all(n == 0 for n in storm.quiet.batches.values())
    assert storm.quiet.respond_s == []
    # the storm: every cluster yields batches, each handled and timed
    assert all(n > 0 for n in storm.storm.batches.values())
    assert len(storm.storm.respond_s) == sum(storm.storm.batches.values())
    assert storm.storm.respond_cpu_s > 0 and storm.quiet.trigger_cpu_s > 0
    assert all(n >= 2 * (STORM_S + SETTLE_S) / FLUSH_S - 2 for n in storm.storm.calls.values())


def test_a_cluster_over_its_watch_bound_fails_the_bench(storm):
    from dataclasses import replace

    over = replace(storm, most_watches={**storm.most_watches, "cluster-0000": WATCH_BOUND + 1})
    assert not over.ok
    missed = replace(storm, quarantined=storm.quarantined - 1, missed=[("cluster-0000", "n")])
    assert not missed.ok
    assert not replace(storm, healthy_out=[("cluster-0000", "n")]).ok


def test_simulated_time_is_deterministic_and_the_clock_put_back(tmp_path):
    from gpufleet.airflow.triggers import PollingTrigger

    before = PollingTrigger.clock

    def once(folder):
        spec = StormSpec(pools=20, nodes=8, quiet_s=60.0, storm_s=120.0, settle_s=60.0, seed=5)
        r = run_storm(spec, work=folder)
        assert PollingTrigger.clock is before
        out = [round(s, 1) for s in r.out_after_s]  # the ledger keeps microseconds
        return r.faulted, out, r.storm.calls, r.storm.batches, r.quiet.calls

    assert once(tmp_path / "a") == once(tmp_path / "b")
