"""NodeWatchTrigger against the simulated cluster's list-then-watch, on the sim's clock (the
trigger's sleeps advance it; nothing waits): the baseline list, a change as one batch, a burst
coalesced, a 410 as a relist, and a restart that resumes from the acknowledged cursor.

The trigger runs as the triggerer runs it (``run()`` to its next event); between events a test
changes the cluster, or acknowledges a batch in the ledger as the response does."""

from __future__ import annotations

import asyncio
import importlib
import json
import time
from collections.abc import Callable

import pytest

from gpufleet.airflow.event_triggers import NodeWatchTrigger
from gpufleet.backends.base import Taint
from gpufleet.backends.sim import watch_log
from gpufleet.backends.sim.cluster import SimClusterBackend
from gpufleet.backends.sim.state import SimState
from gpufleet.config.catalog import load_catalog
from gpufleet.services.nodes.watch_batch import Batch
from gpufleet.store import Ledger

CLUSTER = "a3u-sim"
OTHER = "p5-sim"
FLUSH_S = 10.0
QUIET_S = 300.0


def node(i: int) -> str:
    return f"{CLUSTER}-h200-a-{i}"


@pytest.fixture
def sim(fleet_state) -> SimClusterBackend:
    return SimClusterBackend(load_catalog().cluster(CLUSTER))


def batches(
    trigger: NodeWatchTrigger, n: int, between: Callable[[int], None] | None = None
) -> list[Batch]:
    """The first ``n`` batches the trigger yields; ``between(i)`` runs after the i-th (in a
    thread, as the world changes while the triggerer waits). The trigger is then stopped as the
    triggerer stops one (its generator closed mid-watch)."""

    async def collect() -> list[Batch]:
        events = trigger.run()
        out: list[Batch] = []
        try:
            while len(out) < n:
                out.append(Batch.from_dict((await anext(events)).payload))
                if between is not None and len(out) < n:
                    await asyncio.to_thread(between, len(out) - 1)
        finally:
            await events.aclose()
        return out

    began = time.monotonic()
    out = asyncio.run(asyncio.wait_for(collect(), 60))
    assert time.monotonic() - began < 30  # simulated minutes, never waited on
    return out


def ack(batch: Batch, run_id: str = "response") -> None:
    """What the response does once it recorded a batch."""
    ledger = Ledger()
    for stream, version in (("nodes", batch.nodes_version), ("events", batch.events_version)):
        if version is not None:
            ledger.ack_watch(batch.cluster, stream, version, run_id)


def trigger(**kwargs) -> NodeWatchTrigger:
    return NodeWatchTrigger(cluster=kwargs.pop("cluster", CLUSTER), flush_s=FLUSH_S, **kwargs)


# --- what the triggerer stores ------------------------------------------------------------------


def test_serializes_to_plain_kwargs_and_rebuilds_the_same():
    t = NodeWatchTrigger(cluster=CLUSTER, flush_s=5, watch_timeout_s=30, ledger_conn_id="l")
    classpath, kwargs = t.serialize()
    assert classpath == "gpufleet.airflow.event_triggers.NodeWatchTrigger"
    assert json.loads(json.dumps(kwargs)) == kwargs
    module, _, name = classpath.rpartition(".")
    rebuilt = getattr(importlib.import_module(module), name)(**kwargs)
    assert rebuilt.serialize() == (classpath, kwargs)


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), "10"])
def test_a_flush_interval_that_is_not_a_positive_number_is_refused(bad):
    with pytest.raises(ValueError, match="flush_s"):
        NodeWatchTrigger(cluster=CLUSTER, flush_s=bad)


# --- the baseline -------------------------------------------------------------------------------


def test_a_cluster_never_acknowledged_starts_from_a_list_of_every_node(sim):
    sim.gpu_fault(node(2), xid=13)  # an Event from before gpufleet watched: not replayed
    listed, _ = sim.list_nodes_versioned()
    t = trigger()

    def change(_):
        sim.set_labels(node(1), {"example.com/after": "1"})

    baseline, after = batches(t, 2, between=change)
    assert baseline.relist and baseline.cluster == CLUSTER
    assert sorted(baseline.nodes) == sorted(n.name for n in listed)
    assert all(f is not None and f["pool"] == n.pool for n, f in _pairs(listed, baseline))
    assert baseline.events == {} and baseline.events_version is not None
    # what followed is the change alone: no relist, and the old Event was never read
    assert not after.relist and list(after.nodes) == [node(1)] and after.events == {}


def _pairs(listed, batch):
    return [(n, batch.nodes[n.name]) for n in listed]


# --- changes as batches ------------------------------------------------------------------------


def test_a_node_change_is_one_batch_within_a_flush(sim):
    clock = SimState().clock
    ack(batches(trigger(), 1)[0])
    t = trigger()
    sim.set_unschedulable(node(3), True)
    started = clock.time()
    (batch,) = batches(t, 1)
    assert list(batch.nodes) == [node(3)] and batch.nodes[node(3)]["unschedulable"] is True
    assert not batch.relist and batch.events == {}
    # yielded a flush after it was first seen, and no later than a flush plus one watch round
    assert FLUSH_S <= clock.time() - started <= 2 * FLUSH_S
    assert t.api_calls["watch_nodes"] >= 1 and t.api_calls["list_nodes"] == 0


def test_a_burst_of_changes_of_one_node_is_one_entry_at_its_latest_state(sim):
    (baseline,) = batches(trigger(), 1)
    ack(baseline)
    for i in range(5):
        sim.set_labels(node(1), {"example.com/burst": str(i)})
    sim.add_taint(node(1), Taint("example.com/t", "x", "NoSchedule"))
    for cordoned in (True, False, True):
        sim.set_unschedulable(node(1), cordoned)
    for _ in range(3):
        sim.gpu_fault(node(1), xid=13)  # the same Event, seen three times
    *changes, _ = sim.watch_nodes(baseline.nodes_version, 0)
    assert len(changes) == 9
    (batch,) = batches(trigger(), 1)
    assert list(batch.nodes) == [node(1)]
    # its newest state
    assert batch.nodes[node(1)]["version"] == changes[-1].version
    assert batch.nodes[node(1)]["unschedulable"] is True
    (event,) = batch.events.values()
    assert (event["node"], event["count"]) == (node(1), 3)


@pytest.mark.parametrize("interval_s", [60.0, 0.0])
def test_nothing_changed_yields_nothing_and_costs_only_watches(sim, interval_s):
    """A quiet cluster: the trigger keeps watching (a bookmark per watch, one watch per stream
    a round) and yields nothing: five simulated minutes of quiet are 2 x 30 watch calls, and
    (unless ``exporter_interval_s`` is 0) one list of the exporter pods a minute (the nodes it
    reads: those the ledger has seen, none here: the test acknowledged without a response)."""
    ack(batches(trigger(), 1)[0])
    clock = SimState().clock
    started = clock.time()
    t = trigger(exporter_interval_s=interval_s)

    async def quiet() -> bool:
        events = t.run()
        pending = asyncio.ensure_future(anext(events))
        while clock.time() - started < QUIET_S and not pending.done():
            await asyncio.sleep(0)  # let the trigger's rounds run: its sleeps move the clock
        fired = pending.done()
        pending.cancel()
        await asyncio.gather(pending, return_exceptions=True)
        await events.aclose()
        return fired

    assert asyncio.run(asyncio.wait_for(quiet(), 60)) is False
    assert t.batches == 0
    readings = {"list_exporters"} if interval_s else set()
    assert set(t.api_calls) == {"watch_nodes", "watch_events", *readings}
    if interval_s:
        assert QUIET_S / interval_s <= t.api_calls["list_exporters"] <= QUIET_S / interval_s + 1
    assert t.api_calls["watch_nodes"] == t.api_calls["watch_events"]
    assert QUIET_S / FLUSH_S <= t.api_calls["watch_nodes"] <= QUIET_S / FLUSH_S + 2
    assert NodeWatchTrigger.calls[CLUSTER]["watch_nodes"] >= t.api_calls["watch_nodes"]


# --- 410 Gone -----------------------------------------------------------------------------------


def test_a_version_the_server_no_longer_keeps_is_a_relist_yielded_at_once(sim):
    ack(batches(trigger(), 1)[0])
    with sim.state.tx() as conn:
        watch_log.set_keep(conn, 3)
    for i in range(6):  # past what the log keeps: the acked version is compacted away
        sim.set_labels(node(0), {"example.com/n": str(i)})
    clock = SimState().clock
    started = clock.time()
    t = trigger()
    (batch,) = batches(t, 1)
    assert batch.relist and batch.nodes[node(0)]["version"] == batch.nodes_version
    listed, _ = sim.list_nodes_versioned()
    assert sorted(batch.nodes) == sorted(n.name for n in listed)
    assert clock.time() - started < FLUSH_S  # not held for a flush
    assert t.api_calls["list_nodes"] == 1


# --- restart ------------------------------------------------------------------------------------


def test_a_restart_resumes_from_the_acknowledged_cursor(sim):
    """A batch yielded but not acknowledged before the triggerer was killed is read again by
    the next trigger; what was acknowledged is not."""
    ack(batches(trigger(), 1)[0])
    sim.set_labels(node(0), {"example.com/acked": "1"})
    (acked,) = batches(trigger(), 1)
    ack(acked)  # handled: never again

    sim.set_labels(node(1), {"example.com/lost": "1"})
    sim.gpu_fault(node(1), xid=13)
    (unacked,) = batches(trigger(), 1)  # yielded, then the triggerer is killed: no ack
    assert list(unacked.nodes) == [node(1)] and len(unacked.events) == 1

    sim.set_labels(node(2), {"example.com/later": "1"})
    (again,) = batches(trigger(), 1)  # the restarted trigger
    assert sorted(again.nodes) == [node(1), node(2)]  # the unacknowledged change, and the new
    assert again.events.keys() == unacked.events.keys()
    assert node(0) not in again.nodes and not again.relist

    ack(again)
    sim.set_labels(node(3), {"example.com/last": "1"})
    (last,) = batches(trigger(), 1)
    assert list(last.nodes) == [node(3)] and last.events == {}


def test_a_batch_never_acknowledged_is_read_again_without_a_restart(sim):
    """A batch whose run failed for good (or never ran) is not lost while the trigger runs on:
    once it has gone unacknowledged for ``redeliver_s``, the watch goes back to the acknowledged
    versions and yields its changes again."""
    ack(batches(trigger(), 1)[0])
    clock = SimState().clock
    t = trigger(redeliver_s=120)
    sim.set_unschedulable(node(0), True)  # its run will fail: never acknowledged
    began = clock.time()
    lost, again = batches(t, 2)
    assert list(lost.nodes) == [node(0)] and list(again.nodes) == [node(0)]
    assert again.nodes[node(0)] == lost.nodes[node(0)]
    assert clock.time() - began >= 120 and t.redeliveries == 1


def test_an_acknowledged_batch_is_not_read_again(sim):
    ack(batches(trigger(), 1)[0])
    clock = SimState().clock
    t = trigger(redeliver_s=120)
    sim.set_unschedulable(node(0), True)
    events = t.run()

    async def run() -> bool:
        first = Batch.from_dict((await anext(events)).payload)
        await asyncio.to_thread(ack, first)  # its run succeeded
        began = clock.time()
        pending = asyncio.ensure_future(anext(events))
        while clock.time() - began < 300 and not pending.done():
            await asyncio.sleep(0)
        fired = pending.done()
        pending.cancel()
        await asyncio.gather(pending, return_exceptions=True)
        await events.aclose()
        return fired

    assert asyncio.run(asyncio.wait_for(run(), 60)) is False
    assert t.redeliveries == 0 and t.batches == 1


def test_each_cluster_is_watched_on_its_own(sim):
    ack(batches(trigger(), 1)[0])
    (other,) = batches(trigger(cluster=OTHER), 1)
    assert other.cluster == OTHER and other.relist  # its own baseline: never acknowledged
    assert all(name.startswith(OTHER) for name in other.nodes)


# --- the response's intake: asset events as the task receives them ----------------------------


def _asset_event(cluster: str, payload: dict | None, minute: int):
    from datetime import UTC, datetime

    from airflow.sdk.api.datamodels._generated import AssetReferenceAssetEventDagRun
    from airflow.sdk.execution_time.comms import AssetEventDagRunReferenceResult

    from gpufleet.airflow.assets import NODE_SIGNALS_URI

    uri = NODE_SIGNALS_URI.format(cluster=cluster)
    extra = {"from_trigger": True, "payload": payload} if payload is not None else {"by": "hand"}
    return AssetEventDagRunReferenceResult(
        asset=AssetReferenceAssetEventDagRun(name=f"node-signals-{cluster}", uri=uri, extra={}),
        extra=extra,
        source_task_id=None,
        source_dag_id=None,
        source_run_id=None,
        source_map_index=None,
        source_aliases=[],
        timestamp=datetime(2026, 12, 7, 3, minute, tzinfo=UTC),
    )


def test_the_response_reads_each_watchers_batches_in_order_merged_per_cluster():
    """``triggering_asset_events`` as the task runner builds it: the payloads of the watchers'
    events, oldest first; a cluster's batches merged (the later state of a node wins)."""
    from airflow.sdk.execution_time.context import TriggeringAssetEventsAccessor

    from gpufleet.airflow.operators.events import merge_by_cluster, triggering_batches

    def batch(cluster, nodes, version):
        return Batch(cluster, nodes=nodes, nodes_version=version).to_dict()

    fields = {"pool": "p", "version": "5"}
    early = batch(CLUSTER, {node(0): {**fields, "unschedulable": False}}, "5")
    late = batch(CLUSTER, {node(0): {**fields, "unschedulable": True, "version": "9"}}, "9")
    other = batch(OTHER, {"n": fields}, "7")
    accessor = TriggeringAssetEventsAccessor.build(
        [
            _asset_event(CLUSTER, late, 5),  # delivered out of order
            _asset_event(OTHER, other, 2),
            _asset_event(CLUSTER, early, 1),
            _asset_event(CLUSTER, None, 3),  # an event not from the watcher: no batch
        ]
    )
    payloads = triggering_batches({"triggering_asset_events": accessor})
    assert payloads == [early, other, late]
    merged = merge_by_cluster(payloads)
    assert sorted(merged) == [CLUSTER, OTHER]
    assert merged[CLUSTER].nodes[node(0)]["unschedulable"] is True
    assert merged[CLUSTER].nodes_version == "9"


def test_a_hand_made_batch_that_is_not_one_is_refused_naming_it():
    from airflow.sdk.exceptions import AirflowFailException

    from gpufleet.airflow.operators.events import merge_by_cluster

    with pytest.raises(AirflowFailException, match="batch 2: .*cluster"):
        merge_by_cluster([Batch(CLUSTER).to_dict(), {"nodes": {}}])


# --- the assets the watchers feed ---------------------------------------------------------------


def test_every_catalog_cluster_has_one_watched_asset(fleet_state):
    from airflow.serialization.encoders import encode_asset_like

    from gpufleet.airflow.assets import node_signal_assets
    from gpufleet.config.catalog_index import catalog_index

    clusters = list(catalog_index()["clusters"])
    assets = node_signal_assets(clusters)
    assert [a.uri for a in assets] == [f"x-gpufleet://node-signals/{c}" for c in clusters]
    for cluster, asset in zip(clusters, assets, strict=True):
        (watcher,) = asset.watchers
        assert isinstance(watcher.trigger, NodeWatchTrigger)
        assert watcher.trigger.serialize()[1]["cluster"] == cluster
        encoded = encode_asset_like(asset)  # as the DAG processor stores it
        assert encoded["watchers"][0]["trigger"]["classpath"].endswith("NodeWatchTrigger")
    # built again (every parse), each is the same asset, equal and hashed alike
    again = node_signal_assets(clusters)
    assert again == assets and [hash(a) for a in again] == [hash(a) for a in assets]
    assert len({hash(a) for a in assets}) == len(assets)


def test_a_cluster_not_onboarded_yet_is_listed_again_later_not_a_crashing_watcher(fleet_state):
    """A cluster of the catalog that does not exist yet (its region not onboarded) cannot be
    listed: the watcher keeps trying every ``ERROR_BACKOFF_S`` (the triggerer would restart a
    trigger that raised at once, again and again), and lists the cluster once it exists."""
    from gpufleet.airflow.event_triggers import ERROR_BACKOFF_S
    from gpufleet.backends.sim.cloud import SimCloudBackend

    name = "a3u-euw4-sim"  # the catalog's region still to be onboarded
    cluster = load_catalog().cluster(name)
    backend = SimClusterBackend(cluster)
    assert not backend.cluster_exists()
    clock = SimState().clock
    started = clock.time()
    t = trigger(cluster=name)

    async def watch() -> Batch:
        events = t.run()
        pending = asyncio.ensure_future(anext(events))
        try:
            while clock.time() - started < QUIET_S:
                await asyncio.sleep(0)  # its backoffs move the sim's clock
                assert not pending.done(), "a batch, or an error, before the cluster exists"
            tries = t.api_calls["list_nodes"]
            assert t.errors == tries and tries >= QUIET_S / ERROR_BACKOFF_S, dict(t.api_calls)
            cloud = SimCloudBackend(cluster, SimState())
            cloud.ensure_network()
            cloud.ensure_cluster()
            for pool in cluster.node_pools:
                cloud.ensure_node_pool(pool.name)
            return Batch.from_dict((await asyncio.wait_for(pending, 60)).payload)
        finally:
            pending.cancel()
            await asyncio.gather(pending, return_exceptions=True)
            await events.aclose()

    baseline = asyncio.run(asyncio.wait_for(watch(), 60))
    assert baseline.relist and baseline.cluster == name
    assert sorted(baseline.nodes) == sorted(n.name for n in backend.nodes())
    assert baseline.nodes
