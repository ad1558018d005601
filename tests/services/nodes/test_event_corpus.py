"""Real node objects and node Events, as the agents that write them do (tests/data/events/, each
with its source), read through the Kubernetes backend's conversion and decided by the event
path's rules: the signal each must give."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpufleet.backends.kube.node_objects import node_event, node_info
from gpufleet.config.catalog import load_catalog
from gpufleet.parsing.health import xid_codes
from gpufleet.services.nodes.events import EventResponse
from gpufleet.services.nodes.watch_batch import Batch, event_fields, node_fields

CORPUS = Path(__file__).parents[2] / "data" / "events"
NOW = datetime(2026, 12, 7, 10, 0, tzinfo=UTC)
POOL_KEYS = ("cloud.google.com/gke-nodepool", "eks.amazonaws.com/nodegroup")

# sample -> the signals it must give: (source, what, response)
EXPECT = {
    "eks_nma_xid13_warning_event": {("xid", "13", "note")},
    "eks_nma_xid79_condition": {
        ("condition", "AcceleratedHardwareReady", "quarantine"),
        ("xid", "79", "quarantine"),
    },
    "gke_health_prediction_node": {("prediction", "degradation", "quarantine")},
    "gke_scheduled_maintenance_node": {("maintenance", "scheduled", "note")},
    "kubelet_rebooted_events_v1": set(),  # a reboot shows as a new boot id, not this Event
    "npd_kernel_deadlock_condition": {("condition", "KernelDeadlock", "quarantine")},
    "npd_task_hung_event": set(),
    "nth_scheduled_event": {("maintenance", "scheduled", "note")},
    "nvsentinel_xid13_event": {("xid", "13", "note")},
    "nvsentinel_xid79_condition": {
        ("condition", "SysLogsXIDError", "quarantine"),
        ("xid", "79", "quarantine"),
    },
}


def test_every_sample_has_an_expectation_and_a_source():
    samples = {p.stem for p in CORPUS.glob("*.json")}
    assert samples == set(EXPECT)
    for stem in samples:
        assert "source:" in (CORPUS / f"{stem}.yaml").read_text()


def _signals(stem: str) -> set[tuple[str, str, str]]:
    item = json.loads((CORPUS / f"{stem}.json").read_text())
    batch = Batch("a3u-sim")
    seen: dict = {}
    if item.get("kind") == "Node":
        node = node_info(item, POOL_KEYS)
        before = replace(node, conditions=(), labels={})
        seen = {node.name: {**node_fields(before, "1"), "gone": False}}
        batch.nodes = {node.name: node_fields(node, "2")}
    else:
        event = node_event(item)
        assert event is not None, f"{stem}: not read as a node event"
        batch.events = {event.uid: event_fields(event, "2")}
        seen = {"other": {**node_fields(node_info(_node("other"), POOL_KEYS), "1"), "gone": False}}
    response = EventResponse(ledger=None, catalog=load_catalog())  # decide() reads neither
    signals, _ = response.decide(batch, seen, set(), NOW)
    return {(s.source.value, s.what, s.response.value) for s in signals}


def _node(name: str) -> dict:
    return {"kind": "Node", "metadata": {"name": name, "labels": {}}, "spec": {}, "status": {}}


@pytest.mark.parametrize("stem", sorted(EXPECT))
def test_each_real_sample_gives_its_signal(stem):
    assert _signals(stem) == EXPECT[stem]


@pytest.mark.parametrize(
    ("reason", "message", "codes"),
    [
        ("NvidiaXID79Error", "", [79]),
        ("NvidiaXID13Warning", "NVRM: Xid (PCI:0000:9b:00): 13, pid=1, Graphics Exception", [13]),
        ("SysLogsXIDErrorIsNotHealthy", "ErrorCode:79 PCI:0000:9b:00 Recommended Action=X;", [79]),
        ("TaskHung", "task python3:2431 blocked for more than 120 seconds.", []),
        ("", "ErrorCode:48 and NVRM: Xid (PCI:0000:1b:00): 94, pid=2, Contained ECC", [48, 94]),
    ],
)
def test_xid_codes_in_each_dialect(reason, message, codes):
    assert xid_codes(reason, message) == codes
