"""The sim's node reboot: the machine stays and every GPU resets, so the node's faults of
``REBOOT_CLEARS`` (this boot's Xid events, a pending row remap) are gone and every other fault
stays until a host repair; another node's faults are untouched; a ``sticky`` fault survives;
the node reads NotReady for the reboot's simulated duration (shorter than a repair's), then
Ready with its labels and taints; a reboot under way is found; ``dry_run`` changes nothing;
foreign nodes are refused, and so is a reboot during a repair."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpufleet.backends import cloud_backend, cluster_backend
from gpufleet.backends.base import EnsureAction, Taint
from gpufleet.backends.sim.cloud_table import CREATE_S
from gpufleet.backends.sim.faults import PoolFaults
from gpufleet.backends.sim.gpu_health import gpu_health_outputs
from gpufleet.backends.sim.state import SimState
from gpufleet.config.catalog import load_catalog
from gpufleet.domain.faults import GPU_FAULT_KINDS, REBOOT_CLEARS
from gpufleet.domain.health import HealthAction, decide_health
from gpufleet.domain.workloads import QUARANTINE_KEY
from gpufleet.errors import BackendError, TransientBackendError
from gpufleet.parsing.health import parse_nvidia_smi_remap_ecc, parse_xid_lines
from tests.support.fleet import frozen_sim_clock

CLUSTER, POOL = "a3u-sim", "h200-a"
NODE, OTHER = f"{CLUSTER}-{POOL}-1", f"{CLUSTER}-{POOL}-2"
REBOOT_S = CREATE_S["reboot"]  # how long a reboot "takes" on the sim's clock
# one fault of every kind that names a node
NODE_FAULTS = ("xid:{}:79", "xid:{}:48", "bad-node:{}:nic", "not-ready:{}") + tuple(
    f"{kind}:{{}}" for kind in GPU_FAULT_KINDS if kind != "xid"
)


@pytest.fixture
def sim(fleet_state):
    frozen_sim_clock()
    cluster = load_catalog().cluster(CLUSTER)
    return cloud_backend(cluster), cluster_backend(cluster)


def the_node(kube, name: str = NODE):
    return next(n for n in kube.list_nodes(POOL) if n.name == name)


def faults_in_force() -> set[tuple[str, str]]:
    return {(f.fault.text, f.scope) for f in SimState().faults(cluster=CLUSTER)}


def test_the_reboot_is_shorter_than_a_repair():
    assert 0 < REBOOT_S < CREATE_S["repair"]
    assert {"xid", "row-remap-pending"} == REBOOT_CLEARS


def test_a_reboot_clears_exactly_the_faults_a_reboot_clears_and_only_the_nodes(sim):
    cloud, kube = sim
    for fault in NODE_FAULTS:
        SimState().inject(CLUSTER, POOL, fault.format(NODE))
        SimState().inject(CLUSTER, POOL, fault.format(OTHER))
    SimState().inject(CLUSTER, POOL, "fabric-down")  # the pool's, no node's
    done = cloud.reboot_node(the_node(kube))
    assert (done.kind, done.name, done.action, done.status) == (
        "reboot",
        NODE,
        EnsureAction.CREATED,
        "UPDATING",
    )
    cleared = {f.format(NODE) for f in NODE_FAULTS if f.split(":")[0] in REBOOT_CLEARS}
    assert cleared == {f"xid:{NODE}:79", f"xid:{NODE}:48", f"row-remap-pending:{NODE}"}
    kept = {f.format(NODE) for f in NODE_FAULTS} - cleared
    assert done.detail == {"cleared": sorted(cleared), "kept": sorted(kept)}
    assert faults_in_force() == {
        *((f, "cli") for f in kept),
        *((f.format(OTHER), "cli") for f in NODE_FAULTS),
        ("fabric-down", "cli"),
    }


def test_after_the_reboot_the_nodes_gpus_read_healthy(sim):
    cloud, kube = sim
    SimState().inject(CLUSTER, POOL, f"xid:{NODE}:79")
    SimState().inject(CLUSTER, POOL, f"row-remap-pending:{NODE}")

    def decision():
        gpu = PoolFaults.of(SimState().faults(cluster=CLUSTER), POOL).gpu_faults_of(NODE)
        out = gpu_health_outputs(NODE, gpu, gpu_model="H200", gpus=8)
        return decide_health(
            xid=parse_xid_lines(out.kernel_log),
            memory=parse_nvidia_smi_remap_ecc(out.nvidia_smi),
        ).action

    assert decision() is HealthAction.REBOOT
    cloud.reboot_node(the_node(kube))
    assert decision() is HealthAction.HEALTHY


def test_the_node_is_not_ready_while_it_reboots_then_ready_as_it_was(sim):
    cloud, kube = sim
    quarantine = Taint(QUARANTINE_KEY, "gpu-health", "NoSchedule")
    kube.add_taint(NODE, quarantine)
    before = the_node(kube)
    cloud.reboot_node(before)
    assert not the_node(kube).ready
    assert the_node(kube, OTHER).ready
    SimState().clock.advance(REBOOT_S - 0.01)
    assert not the_node(kube).ready
    SimState().clock.advance(0.02)
    after = the_node(kube)
    assert after.ready and (after.labels, after.taints) == (before.labels, before.taints)
    assert quarantine in after.taints  # the lifecycle retests and releases it, not the reboot


def test_a_sticky_fault_survives_the_reboot(sim):
    cloud, kube = sim
    SimState().inject(CLUSTER, POOL, f"xid:{NODE}:79", scope="sticky")
    done = cloud.reboot_node(the_node(kube))
    assert done.detail == {"cleared": [], "kept": [f"xid:{NODE}:79"]}
    assert faults_in_force() == {(f"xid:{NODE}:79", "sticky")}


def test_a_reboot_under_way_is_found_and_changes_nothing(sim):
    cloud, kube = sim
    assert cloud.reboot_node(the_node(kube)).action == EnsureAction.CREATED
    SimState().inject(CLUSTER, POOL, f"xid:{NODE}:79")  # a new Xid while it boots
    again = cloud.reboot_node(the_node(kube))
    assert (again.kind, again.action, again.status) == ("reboot", EnsureAction.FOUND, "UPDATING")
    assert faults_in_force() == {(f"xid:{NODE}:79", "cli")}
    SimState().clock.advance(REBOOT_S + 0.01)  # once it is done, a reboot is a new one
    assert cloud.reboot_node(the_node(kube)).action == EnsureAction.CREATED
    assert faults_in_force() == set()


def test_dry_run_changes_nothing(sim):
    cloud, kube = sim
    SimState().inject(CLUSTER, POOL, f"xid:{NODE}:79")
    planned = cloud.reboot_node(the_node(kube), dry_run=True)
    assert (planned.kind, planned.action) == ("reboot", EnsureAction.WOULD_CREATE)
    assert faults_in_force() == {(f"xid:{NODE}:79", "cli")}
    assert the_node(kube).ready


def test_a_reboot_during_a_repair_is_refused_and_a_repair_during_a_reboot_is_not(sim):
    cloud, kube = sim
    cloud.repair_node(the_node(kube))
    with pytest.raises(BackendError, match="is being repaired"):
        cloud.reboot_node(the_node(kube))
    cloud.reboot_node(the_node(kube, OTHER))
    assert cloud.repair_node(the_node(kube, OTHER)).action == EnsureAction.CREATED
    SimState().clock.advance(REBOOT_S + 0.01)
    assert not the_node(kube, OTHER).ready  # the repair outlasts the reboot
    SimState().clock.advance(CREATE_S["repair"])
    assert the_node(kube, OTHER).ready and the_node(kube).ready


@pytest.mark.parametrize(
    "provider_id",
    [None, f"gce://p/us-central1-b/{NODE}", f"sim://other-cluster/{NODE}", f"sim://{CLUSTER}/"],
)
def test_foreign_provider_ids_are_refused(sim, provider_id):
    cloud, kube = sim
    SimState().inject(CLUSTER, POOL, f"xid:{NODE}:79")
    with pytest.raises(BackendError, match="refusing to reboot it"):
        cloud.reboot_node(replace(the_node(kube), provider_id=provider_id))
    assert faults_in_force() == {(f"xid:{NODE}:79", "cli")}


def test_an_unknown_node_is_refused(sim):
    cloud, kube = sim
    ghost = replace(the_node(kube), provider_id=f"sim://{CLUSTER}/ghost-9")
    with pytest.raises(BackendError, match="'ghost-9' does not exist"):
        cloud.reboot_node(ghost)


def test_injected_api_errors_are_transient_and_change_nothing(sim):
    cloud, kube = sim
    node = the_node(kube)
    SimState().inject(CLUSTER, POOL, f"xid:{NODE}:79")
    SimState().inject(CLUSTER, POOL, "api-errors:1.0")
    with pytest.raises(TransientBackendError, match="reboot node: 503"):
        cloud.inner.reboot_node(node)
    assert (f"xid:{NODE}:79", "cli") in faults_in_force()
