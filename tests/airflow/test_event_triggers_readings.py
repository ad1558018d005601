"""NodeWatchTrigger's interval readings on the sim (docs/events.md): every
``exporter_interval_s`` one list of the cluster's dcgm-exporter pods, one read of each, and on an
EKS-shaped cluster EC2's DescribeInstanceStatus of its instances; what says something is a
snapshot handed on when it changed, decided by the response with the nightly's passive rule and
the EC2 rules, recorded once per value. Faults here are those no agent reports (no Event, no
condition): only the readings can see them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from gpufleet.airflow.event_triggers import NodeWatchTrigger
from gpufleet.backends.sim.cluster import SimClusterBackend
from gpufleet.backends.sim.state import SimState
from gpufleet.config.catalog import load_catalog
from gpufleet.domain.nodes import NodeState
from gpufleet.domain.workloads import QUARANTINE_KEY
from gpufleet.services.nodes.events import EventResponse
from gpufleet.services.nodes.watch_batch import Batch
from gpufleet.store import Ledger

GKE, EKS = "a3u-sim", "p5-sim"
INTERVAL_S = 60.0


def first_node(cluster: str) -> str:
    return sorted(n.name for n in SimClusterBackend(load_catalog().cluster(cluster)).nodes())[0]


def run(
    cluster: str, until: Callable[[Batch], bool], between: Callable[[], None] | None = None
) -> tuple[NodeWatchTrigger, list[Batch]]:
    """Run a trigger of ``cluster``, each batch handed to the response (as the DAG does), until
    a batch satisfies ``until`` (``between`` runs once, after the first batch)."""
    catalog, ledger = load_catalog(), Ledger()
    trigger = NodeWatchTrigger(cluster=cluster, flush_s=10.0, exporter_interval_s=INTERVAL_S)

    async def collect() -> list[Batch]:
        events = trigger.run()
        out: list[Batch] = []
        try:
            while True:
                batch = Batch.from_dict((await anext(events)).payload)
                EventResponse(ledger, catalog).respond(batch, f"run-{len(out)}")
                out.append(batch)
                if until(batch):
                    return out
                if between is not None and len(out) == 1:
                    await asyncio.to_thread(between)
        finally:
            await events.aclose()

    return trigger, asyncio.run(asyncio.wait_for(collect(), 60))


def signals(cluster: str, node: str) -> list[tuple[str, str, str]]:
    return sorted(
        (r["source"], r["what"], r["response"]) for r in Ledger().node_signals(cluster, node)
    )


def held(cluster: str, node: str) -> str | None:
    row = Ledger().node_state(cluster, node)
    return None if row is None else row["state"]


def quarantined(cluster: str, node: str) -> bool:
    backend = SimClusterBackend(load_catalog().cluster(cluster))
    info = next(n for n in backend.nodes() if n.name == node)
    return any(t.key == QUARANTINE_KEY for t in info.taints)


def test_a_gpu_memory_fault_no_agent_reports_is_read_from_the_exporter_and_quarantines(
    fleet_state,
):
    node = first_node(GKE)
    world = SimClusterBackend(load_catalog().cluster(GKE))
    trigger, got = run(
        GKE, lambda b: node in b.exporters, lambda: world.gpu_memory_fault(node, "row-remap-failed")
    )
    reading = got[-1].exporters[node]
    assert reading["action"] == "repair"
    assert "row remapping failure" in reading["reason"]
    assert got[-1].readings_version is not None and not got[-1].nodes and not got[-1].events
    assert ("exporter", "gpu-health", "quarantine") in signals(GKE, node)
    assert held(GKE, node) == NodeState.QUARANTINED.value and quarantined(GKE, node)
    # one list of the pods a round, and one read per node the watcher knows
    nodes = len(world.nodes())
    rounds = trigger.api_calls["list_exporters"]
    assert rounds >= 1 and trigger.api_calls["scrape_exporter"] == rounds * nodes
    assert Ledger().watch_cursor(GKE, "readings") == got[-1].readings_version


def test_a_reading_that_stays_is_not_handed_on_again_and_a_new_value_is_recorded_once(
    fleet_state,
):
    node = first_node(GKE)
    world = SimClusterBackend(load_catalog().cluster(GKE))
    run(GKE, lambda b: node in b.exporters, lambda: world.gpu_memory_fault(node, "ecc-dbe"))
    before = Ledger().node_signals(GKE, node)
    # a new watcher (a restart) hands its first snapshot on again: nothing new is recorded
    run(GKE, lambda b: node in b.exporters)
    assert Ledger().node_signals(GKE, node) == before
    # the counters move (a second fault on the GPU): a new reading, recorded once; the node
    # is held already, the lifecycle has it
    world.gpu_memory_fault(node, "row-remap-failed")
    _, got = run(GKE, lambda b: node in b.exporters)
    rows = Ledger().node_signals(GKE, node)
    assert len([r for r in rows if r["source"] == "exporter"]) == 2
    assert held(GKE, node) == NodeState.QUARANTINED.value


def test_a_cluster_that_runs_no_exporter_has_no_exporter_readings(fleet_state, monkeypatch):
    node = first_node(GKE)
    world = SimClusterBackend(load_catalog().cluster(GKE))
    monkeypatch.setattr(SimClusterBackend, "dcgm_exporters", lambda self: {})
    world.gpu_memory_fault(node, "row-remap-failed")
    trigger, got = run(GKE, lambda b: b.relist)
    assert got[-1].exporters == {} and held(GKE, node) is None


def test_ec2_status_and_scheduled_events_of_an_eks_cluster(fleet_state):
    catalog = load_catalog()
    world = SimClusterBackend(catalog.cluster(EKS))
    names = sorted(n.name for n in world.nodes())
    impaired, retiring, rebooting = names[:3]
    now = SimState().clock.time()

    def happen() -> None:
        world.instance_status(impaired, system="impaired")
        world.maintenance(retiring, start=now + 86400, code="instance-retirement")
        world.maintenance(rebooting, start=now + 86400, code="system-reboot")

    trigger, got = run(EKS, lambda b: len(b.instances) == 3, happen)
    last = got[-1].instances
    assert last[impaired]["system_status"] == "impaired"
    assert [e["code"] for e in last[retiring]["events"]] == ["instance-retirement"]
    assert ("ec2", "system-impaired", "quarantine") in signals(EKS, impaired)
    assert ("ec2", "instance-retirement", "quarantine") in signals(EKS, retiring)
    assert ("maintenance", "scheduled", "note") in signals(EKS, rebooting)
    assert held(EKS, impaired) == held(EKS, retiring) == NodeState.QUARANTINED.value
    assert held(EKS, rebooting) is None  # a reboot ahead: a note, re-admitted after it
    # one request per 100 instances a round
    assert trigger.api_calls["describe_instance_status"] == trigger.api_calls["list_exporters"]


def test_a_gke_cluster_has_no_instance_status_source(fleet_state):
    trigger = NodeWatchTrigger(cluster=GKE)
    assert trigger.readings.instance_source() is None
    assert NodeWatchTrigger(cluster=EKS).readings.instance_source() is not None


@pytest.mark.parametrize("bad", [-1, float("nan"), "60", True])
def test_an_interval_that_is_not_a_number_of_seconds_is_refused(bad):
    with pytest.raises(ValueError, match="exporter_interval_s"):
        NodeWatchTrigger(cluster=GKE, exporter_interval_s=bad)


def test_a_reading_that_stays_is_handed_on_once_not_every_round(fleet_state):
    node = first_node(GKE)
    world = SimClusterBackend(load_catalog().cluster(GKE))
    catalog, ledger, clock = load_catalog(), Ledger(), SimState().clock
    trigger = NodeWatchTrigger(cluster=GKE, flush_s=10.0, exporter_interval_s=INTERVAL_S)

    async def watch() -> list[Batch]:
        events = trigger.run()
        out: list[Batch] = []
        try:
            while not out or node not in out[-1].exporters:
                out.append(Batch.from_dict((await anext(events)).payload))
                EventResponse(ledger, catalog).respond(out[-1], f"run-{len(out)}")
                if len(out) == 1:
                    world.gpu_memory_fault(node, "ecc-dbe")
            seen = len(out)
            rounds = trigger.api_calls["list_exporters"]
            while trigger.api_calls["list_exporters"] < rounds + 5:  # five more rounds
                pending = asyncio.ensure_future(anext(events))
                while not pending.done() and trigger.api_calls["list_exporters"] < rounds + 5:
                    await asyncio.sleep(0)
                if pending.done():  # the quarantine's taint: a node change, handed on
                    out.append(Batch.from_dict(pending.result().payload))
                    EventResponse(ledger, catalog).respond(out[-1], f"run-{len(out)}")
                else:
                    pending.cancel()
                    await asyncio.gather(pending, return_exceptions=True)
            assert [b.readings_version for b in out[seen:]] == [None] * (len(out) - seen)
        finally:
            await events.aclose()
        return out

    began = clock.time()
    asyncio.run(asyncio.wait_for(watch(), 60))
    assert clock.time() - began >= 5 * INTERVAL_S


def test_a_snapshot_never_acknowledged_is_handed_on_again(fleet_state):
    """Its run failed for good (nothing acknowledged): ``redeliver_s`` later the watcher hands
    the readings on again, as it reads the watch again from the acknowledged versions."""
    node = first_node(GKE)
    world = SimClusterBackend(load_catalog().cluster(GKE))
    catalog, ledger = load_catalog(), Ledger()
    trigger = NodeWatchTrigger(
        cluster=GKE, flush_s=10.0, exporter_interval_s=INTERVAL_S, redeliver_s=120.0
    )

    async def watch() -> list[Batch]:
        events = trigger.run()
        out: list[Batch] = []
        try:
            first = Batch.from_dict((await anext(events)).payload)
            EventResponse(ledger, catalog).respond(first, "baseline")  # acknowledged
            world.gpu_memory_fault(node, "row-remap-failed")
            while len([b for b in out if node in b.exporters]) < 2:
                out.append(Batch.from_dict((await anext(events)).payload))  # never handled
        finally:
            await events.aclose()
        return out

    got = asyncio.run(asyncio.wait_for(watch(), 60))
    first, again = [b for b in got if node in b.exporters]
    assert again.exporters == first.exporters
    assert trigger.redeliveries == 1 and ledger.watch_cursor(GKE, "readings") is None


def test_after_a_restart_a_node_last_seen_notready_is_not_read(fleet_state):
    from dataclasses import replace

    from gpufleet.domain.events import NodeCondition

    kube = SimClusterBackend(load_catalog().cluster(GKE))
    down, *rest = sorted(kube.list_nodes(), key=lambda n: n.name)
    others = tuple(c for c in down.conditions if c.type != "Ready")
    batch = Batch(GKE)
    not_ready = replace(down, ready=False, conditions=(NodeCondition("Ready", "False"), *others))
    batch.listed([not_ready, *rest], "100")
    EventResponse(Ledger(), load_catalog()).respond(batch, "baseline")
    known = NodeWatchTrigger(cluster=GKE).known_nodes()  # a new trigger: the ledger's nodes
    assert known[down.name]["ready"] is False
    assert {known[n.name]["ready"] for n in rest} == {True}
