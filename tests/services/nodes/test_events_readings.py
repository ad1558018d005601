"""The response to the interval readings (services.nodes.events, services.nodes.readings): a
dcgm-exporter reading taken by the nightly's passive rule, an EC2 instance status; recorded
once per value, a bad one quarantines at once, an unknown one is a note; the snapshot's
version acknowledged as stream ``readings``."""

from __future__ import annotations

import pytest

from gpufleet.backends import cluster_backend
from gpufleet.backends.sim.dcgm_exporter import dcgm_exporter_metrics
from gpufleet.config.catalog import load_catalog
from gpufleet.domain.faults import parse_fault
from gpufleet.domain.nodes import NodeState
from gpufleet.domain.workloads import QUARANTINE_KEY
from gpufleet.services.nodes.events import EventResponse
from gpufleet.services.nodes.readings import exporter_reading, unknown_reading
from gpufleet.services.nodes.watch_batch import Batch
from gpufleet.store import Ledger

CLUSTER = "a3u-sim"
TEXT_OK = 'DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-aaaa-0001"} 0\n'


@pytest.fixture
def fleet(fleet_state):
    catalog = load_catalog()
    backend = cluster_backend(catalog.cluster(CLUSTER))
    ledger = Ledger()
    batch = Batch(CLUSTER)
    batch.listed(backend.list_nodes(), "100")
    EventResponse(ledger, catalog).respond(batch, "baseline")
    return catalog, backend, ledger


def metrics(node: str, *faults: str) -> str:
    return dcgm_exporter_metrics(node, [parse_fault(f) for f in faults], gpu_model="H200", gpus=8)


def readings(exporters, version="1000") -> Batch:
    batch = Batch(CLUSTER)
    batch.read(exporters, {}, version)
    return batch


def test_the_passive_rule_reads_the_exporter(fleet_state):
    node = "n1"
    assert exporter_reading(metrics(node), node) is None  # healthy: nothing to hand on
    failed = exporter_reading(metrics(node, f"row-remap-failed:{node}"), node)
    assert failed is not None and failed["action"] == "repair"
    pending = exporter_reading(metrics(node, f"row-remap-pending:{node}"), node)
    assert pending is not None and pending["action"] == "reset_gpu"
    assert pending["key"] != failed["key"]
    # the same values read again: the same key (coalesced); a reading whose findings change
    # is a new one; a counter that moves under findings that stay (a DBE more on a GPU whose
    # remap failed: NVIDIA's RMA either way) is not
    again = exporter_reading(metrics(node, f"row-remap-failed:{node}"), node)
    assert again == failed
    dbe = exporter_reading(metrics(node, f"ecc-dbe:{node}"), node)
    both = exporter_reading(metrics(node, f"ecc-dbe:{node}", f"row-remap-failed:{node}"), node)
    assert dbe is not None and both is not None
    assert dbe["key"] != failed["key"] and both["key"] == failed["key"]
    # what is not the exporter's metrics, or serves none of the fields: unknown
    assert exporter_reading("<html>502 Bad Gateway</html>", node) == unknown_reading(
        exporter_reading("<html>502 Bad Gateway</html>", node)["unknown"], "no-fields"
    )
    assert "unknown" in exporter_reading('DCGM_FI_DEV_GPU_TEMP{gpu="0"} 40\n', node)


def test_a_bad_reading_quarantines_once_and_a_replay_does_nothing(fleet):
    catalog, backend, ledger = fleet
    node = sorted(n.name for n in backend.list_nodes())[1]
    reading = exporter_reading(metrics(node, f"ecc-dbe:{node}"), node)
    report = EventResponse(ledger, catalog).respond(readings({node: reading}), "r1")
    assert list(report.quarantined) == [node]
    assert ledger.node_state(CLUSTER, node)["state"] == NodeState.QUARANTINED.value
    info = next(n for n in backend.list_nodes() if n.name == node)
    assert any(t.key == QUARANTINE_KEY for t in info.taints)
    assert ledger.watch_cursor(CLUSTER, "readings") == "1000"
    again = EventResponse(ledger, catalog).respond(readings({node: reading}, "2000"), "r2")
    assert again.signals == [] and again.quarantined == {}
    assert ledger.watch_cursor(CLUSTER, "readings") == "2000"


def test_an_unknown_reading_is_a_note_never_a_quarantine(fleet):
    catalog, backend, ledger = fleet
    node = sorted(n.name for n in backend.list_nodes())[2]
    down = unknown_reading("no dcgm-exporter pod runs on the node", "no-pod")
    report = EventResponse(ledger, catalog).respond(readings({node: down}), "r1")
    assert report.quarantined == {} and ledger.node_state(CLUSTER, node) is None
    assert any("unknown, not healthy" in n for n in report.notes)
    (row,) = ledger.node_signals(CLUSTER, node)
    assert (row["source"], row["what"], row["response"]) == ("exporter", "unknown", "note")


def test_a_reading_of_a_node_the_ledger_knows_is_gone_says_nothing(fleet):
    catalog, backend, ledger = fleet
    node = sorted(n.name for n in backend.list_nodes())[3]
    ledger.see_nodes(CLUSTER, {node: None})
    reading = exporter_reading(metrics(node, f"ecc-dbe:{node}"), node)
    report = EventResponse(ledger, catalog).respond(readings({node: reading}), "r1")
    assert report.signals == [] and report.quarantined == {}


def test_a_snapshot_survives_the_wire_and_the_later_one_stands_in_a_merge():
    first = readings({"a": {"unknown": "x", "key": "unknown:no-pod"}}, "1000")
    later = readings({}, "2000")
    assert Batch.from_dict(first.to_dict()) == first
    merged = first.merge(later)
    assert merged.exporters == {} and merged.readings_version == "2000"
    assert first.merge(Batch(CLUSTER)).exporters == first.exporters
    assert first.follows("readings", "5000")  # a snapshot is whole
    with pytest.raises(ValueError, match="exporters"):
        Batch.from_dict({"cluster": CLUSTER, "exporters": ["a"]})
