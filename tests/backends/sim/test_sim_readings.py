"""What the sim answers the event path's interval readings (docs/events.md): its dcgm-exporter
DaemonSet's pods (one list) and each pod's metrics; EC2's DescribeInstanceStatus of an
EKS-shaped cluster's instances in the API's shape, with the checks an ``instance-status`` action
impaired and the events ``maintenance`` announced; and a GPU memory fault no agent reports."""

from __future__ import annotations

import pytest

from gpufleet.backends.instance_status import instance_status_source
from gpufleet.backends.sim.cluster import SimClusterBackend
from gpufleet.backends.sim.ec2_status import SimInstanceStatus, sim_instance_id
from gpufleet.backends.sim.state import SimState
from gpufleet.config.catalog import load_catalog
from gpufleet.errors import BackendError
from gpufleet.parsing.health import parse_dcgm_exporter

GKE, EKS = "a3u-sim", "p5-sim"


def backend(cluster: str) -> SimClusterBackend:
    return SimClusterBackend(load_catalog().cluster(cluster))


def test_one_list_finds_every_nodes_exporter_pod_and_each_serves_its_metrics(fleet_state):
    b = backend(GKE)
    names = sorted(n.name for n in b.nodes())
    pods = b.dcgm_exporters()
    assert sorted(pods) == names
    pod = pods[names[0]]
    assert (pod.namespace, pod.phase, pod.owner_kind) == ("gpu-operator", "Running", "DaemonSet")
    assert pod.name.startswith("nvidia-dcgm-exporter-")
    report = parse_dcgm_exporter(b.exporter_metrics(pod))
    assert report.hostname == names[0] and len(report.gpus) == 8


def test_a_memory_fault_no_agent_reports_shows_only_in_the_counters(fleet_state):
    b = backend(GKE)
    node = sorted(n.name for n in b.nodes())[0]
    _, events_before = b.list_node_events(None)
    before = next(n for n in b.nodes() if n.name == node)
    b.gpu_memory_fault(node, "row-remap-failed")
    _, events_after = b.list_node_events(None)
    after = next(n for n in b.nodes() if n.name == node)
    assert events_after == events_before and after.conditions == before.conditions
    gpus = parse_dcgm_exporter(b.exporter_metrics(b.dcgm_exporters()[node])).gpus
    assert any(g.remap_failure for g in gpus)
    with pytest.raises(BackendError, match="one of"):
        b.gpu_memory_fault(node, "melted")


def test_a_node_not_ready_has_an_exporter_pod_that_cannot_be_read(fleet_state):
    b = backend(GKE)
    node = sorted(n.name for n in b.nodes())[0]
    with SimState().tx() as conn:
        conn.execute("UPDATE nodes SET ready=0 WHERE cluster=? AND name=?", (GKE, node))
    pod = b.dcgm_exporters()[node]
    assert pod.phase == "Unknown"
    with pytest.raises(BackendError, match="NotReady"):
        b.exporter_metrics(pod)


def test_an_eks_shaped_cluster_answers_describe_instance_status(fleet_state):
    b = backend(EKS)
    names = sorted(n.name for n in b.nodes())
    pids = [f"sim://{EKS}/{n}" for n in names]
    source = instance_status_source(load_catalog().cluster(EKS))
    assert source is not None and instance_status_source(load_catalog().cluster(GKE)) is None
    quiet = source.instance_statuses(pids)
    assert set(quiet) == set(pids)
    assert {(s.system_status, s.instance_status, s.events) for s in quiet.values()} == {
        ("ok", "ok", ())
    }
    assert quiet[pids[0]].instance_id == sim_instance_id(EKS, names[0])
    now = SimState().clock.time()
    b.instance_status(names[0], system="impaired")
    b.maintenance(names[1], start=now + 7200, code="instance-retirement")
    found = source.instance_statuses(pids)
    assert found[pids[0]].system_status == "impaired" and found[pids[0]].system_impaired_since
    (event,) = found[pids[1]].events
    assert event.code == "instance-retirement" and event.event_id.startswith("instance-event-")
    assert event.not_before is not None
    assert event.not_before.timestamp() == pytest.approx(now + 7200, abs=1e-3)
    # the status clears; a replaced node's instance is not reported any more
    b.instance_status(names[0], system="ok")
    assert source.instance_statuses(pids)[pids[0]].system_status == "ok"
    b.replace(names[1])
    assert pids[1] not in source.instance_statuses(pids)


def test_more_than_100_instances_and_a_gke_shaped_cluster_are_refused(fleet_state):
    source = SimInstanceStatus(load_catalog().cluster(EKS))
    with pytest.raises(BackendError, match="at most 100"):
        source.instance_statuses([f"sim://{EKS}/n{i}" for i in range(101)])
    b = backend(GKE)
    node = sorted(n.name for n in b.nodes())[0]
    with pytest.raises(BackendError, match="EKS"):
        b.instance_status(node)
