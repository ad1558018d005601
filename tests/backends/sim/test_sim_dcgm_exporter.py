"""The sim's dcgm-exporter (issue 20, passive signals): each GPU fault injected on a node shows in
what the node's exporter serves, in the exporter's shape, and that text, through the real parser
and the passive decision, leads to the action NVIDIA recommends (as the node's own tools do in
the nightly); a healthy node reads healthy; a cluster without an exporter, or a node the cluster
does not have, has no metrics; a NotReady node's exporter cannot be reached."""

from __future__ import annotations

import pytest

from gpufleet.backends import cloud_backend, cluster_backend
from gpufleet.backends.sim.cloud_table import CREATE_S
from gpufleet.backends.sim.cluster import SimClusterBackend
from gpufleet.backends.sim.dcgm_exporter import dcgm_exporter_metrics
from gpufleet.backends.sim.gpu_health import DOWN_LINK, faulty_gpu
from gpufleet.backends.sim.state import SimState
from gpufleet.config.catalog import load_catalog
from gpufleet.domain.faults import GPU_FAULT_KINDS, parse_fault
from gpufleet.domain.health import PASSIVE, HealthAction, decide_passive
from gpufleet.errors import BackendError
from gpufleet.parsing.health import parse_dcgm_exporter
from tests.support.fleet import frozen_sim_clock

A = HealthAction
CLUSTER, POOL = "a3u-sim", "h200-a"
NODE, OTHER = f"{CLUSTER}-{POOL}-1", f"{CLUSTER}-{POOL}-2"
GPU = f"GPU {faulty_gpu(NODE, 8)}"

# fault -> (the action NVIDIA's guidance gives, what the reason says). As the nightly's check
# but for Xid 154: the exporter serves the code, not the driver's text naming the recovery.
EXPECTED = {
    f"xid:{NODE}:79": (A.REBOOT, "Xid 79 (GPU has fallen off the bus): NVIDIA says reboot"),
    f"xid:{NODE}:95": (A.RESET_GPU, "Xid 95 (Uncontained memory error): NVIDIA says reset"),
    f"xid:{NODE}:154": (A.NEEDS_HUMAN, "Xid 154 (GPU Recovery Action Changed)"),
    f"xid:{NODE}:61": (A.NEEDS_HUMAN, "Xid 61"),
    f"xid:{NODE}:45": (A.NEEDS_HUMAN, "RESTART_FM"),
    f"row-remap-pending:{NODE}": (A.RESET_GPU, "row remapping pending after uncorrectable ECC"),
    f"row-remap-failed:{NODE}": (A.REPAIR, "row remapping failure occurred"),
    f"ecc-dbe:{NODE}": (A.REPAIR, "uncorrectable ECC errors (sram_uncorrectable 1)"),
    f"nvlink-down:{NODE}": (A.REPAIR, f"NVLink {DOWN_LINK} is down"),
    f"thermal-throttle:{NODE}": (A.REPAIR, "slowed for heat"),
}


@pytest.fixture
def sim(fleet_state):
    frozen_sim_clock()
    cluster = load_catalog().cluster(CLUSTER)
    return cluster, cluster_backend(cluster)


def passive(kube, node: str = NODE):
    text = kube.gpu_metrics(node)
    assert text is not None
    report = parse_dcgm_exporter(text)
    assert report.problems == () and report.hostname == node
    assert len(report.gpus) == 8
    decision = decide_passive(report)
    assert decision is not None and decision.reason.startswith(f"{PASSIVE}: ")
    return decision


def test_every_gpu_fault_kind_is_exercised():
    assert {parse_fault(f).kind for f in EXPECTED} == set(GPU_FAULT_KINDS)


@pytest.mark.parametrize("fault", sorted(EXPECTED))
def test_each_fault_reads_back_passively_to_nvidias_action(sim, fault):
    _, kube = sim
    SimState().inject(CLUSTER, POOL, fault)
    action, says = EXPECTED[fault]
    decision = passive(kube)
    assert decision.action is action, decision.reason
    assert says in decision.reason
    if not fault.startswith("thermal-throttle"):
        assert decision.reason.startswith(f"{PASSIVE}: {GPU} (PCI 00000000:")
    assert passive(kube, OTHER).action is A.HEALTHY  # another node's fault is not this one's


def test_a_healthy_node_serves_every_health_field_clean(sim):
    _, kube = sim
    decision = passive(kube)
    assert (decision.action, decision.findings) == (A.HEALTHY, ())
    report = parse_dcgm_exporter(kube.gpu_metrics(NODE))
    assert report.signals == {
        "xid", "row_remap_pending", "row_remap_failure", "remapped_rows", "ecc_dbe_volatile",
        "nvlink_errors", "nvlink_state", "thermal"}  # fmt: skip
    assert all(len(g.links) == 18 and not any(link.down for link in g.links) for g in report.gpus)


def test_an_application_xid_is_a_note(sim):
    _, kube = sim
    SimState().inject(CLUSTER, POOL, f"xid:{NODE}:13")
    decision = passive(kube)
    assert decision.action is A.HEALTHY
    said = "Xid 13 (Graphics Engine Exception): NVIDIA says restart the application"
    assert decision.notes == (f"{GPU} (PCI {_bus_of(kube)}): {said}; the GPU is fine",)


def _bus_of(kube) -> str:
    report = parse_dcgm_exporter(kube.gpu_metrics(NODE))
    return report.gpus[faulty_gpu(NODE, 8)].pci_bus


def test_the_same_fault_model_as_the_nodes_own_tools():
    """The exporter's fields and nvidia-smi's come from one GPU state: the faulty GPU is the
    same, and what a reboot clears goes from both."""
    faults = [parse_fault(f"row-remap-pending:{NODE}")]
    report = parse_dcgm_exporter(dcgm_exporter_metrics(NODE, faults, gpu_model="H200", gpus=8))
    hit = report.gpus[faulty_gpu(NODE, 8)]
    assert (hit.remap_pending, hit.dbe_volatile["dram"], hit.last_xid) == (True, 1, 63)
    assert hit.xid_counts == {48: 1, 63: 1}
    assert all(g.remap_pending is False for g in report.gpus if g is not hit)


def test_a_reboot_clears_what_it_clears_from_the_exporter_too(sim):
    cluster, kube = sim
    SimState().inject(CLUSTER, POOL, f"row-remap-pending:{NODE}")
    assert passive(kube).action is A.RESET_GPU
    node = next(n for n in kube.list_nodes(POOL) if n.name == NODE)
    cloud_backend(cluster).reboot_node(node)
    with pytest.raises(
        BackendError, match=f"pod on node {NODE} cannot be reached: the node is NotReady"
    ):
        kube.gpu_metrics(NODE)  # rebooting: its exporter pod cannot be reached
    SimState().clock.advance(CREATE_S["reboot"] + 1)
    assert passive(kube).action is A.HEALTHY


def test_a_node_the_cluster_does_not_have_has_no_exporter(sim):
    _, kube = sim
    assert kube.gpu_metrics("no-such-node") is None


def test_a_cluster_without_an_exporter_serves_none(fleet_state):
    frozen_sim_clock()
    cluster = load_catalog().cluster(CLUSTER)
    bare = cluster.model_copy(
        update={"sim": cluster.sim.model_copy(update={"dcgm_exporter": False})}
    )
    assert SimClusterBackend(bare).gpu_metrics(NODE) is None
    assert SimClusterBackend(cluster).gpu_metrics(NODE) is not None
