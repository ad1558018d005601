"""The sim's host repair: the machine moves to a healthy host, so the faults of the host
(``bad-node``, ``not-ready`` naming the node) are gone, unless injected ``sticky`` (a fault that
is not the host's); the node reads NotReady for the repair's simulated duration, then Ready
with its labels and taints; a repair under way is found; ``dry_run`` changes nothing."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpufleet.backends import cloud_backend, cluster_backend
from gpufleet.backends.base import EnsureAction, Taint
from gpufleet.backends.sim.cloud_table import CREATE_S
from gpufleet.backends.sim.state import SimState
from gpufleet.config.catalog import load_catalog
from gpufleet.domain.workloads import QUARANTINE_KEY
from gpufleet.errors import BackendError, TransientBackendError
from tests.support.fleet import frozen_sim_clock

CLUSTER, POOL = "a3u-sim", "h200-a"
NODE = f"{CLUSTER}-{POOL}-1"
REPAIR_S = CREATE_S["repair"]  # how long a repair "takes" on the sim's clock


@pytest.fixture
def sim(fleet_state):
    frozen_sim_clock()
    cluster = load_catalog().cluster(CLUSTER)
    return cloud_backend(cluster), cluster_backend(cluster)


def the_node(kube, name: str = NODE):
    return next(n for n in kube.list_nodes(POOL) if n.name == name)


def host_faults() -> set[tuple[str, str]]:
    return {(f.fault.text, f.scope) for f in SimState().faults(cluster=CLUSTER)}


def wait_ready(kube, name: str = NODE):
    """The node once the repair's simulated duration passed (NotReady until its last moment)."""
    SimState().clock.advance(REPAIR_S - 0.01)
    assert not the_node(kube, name).ready
    SimState().clock.advance(0.02)
    return the_node(kube, name)


def test_repair_clears_the_hosts_faults_and_the_node_comes_back(sim):
    cloud, kube = sim
    SimState().inject(CLUSTER, POOL, f"bad-node:{NODE}")
    SimState().inject(CLUSTER, POOL, f"bad-node:{NODE}:nic")
    SimState().inject(CLUSTER, POOL, f"bad-node:{CLUSTER}-{POOL}-2")  # another node's fault
    quarantine = Taint(QUARANTINE_KEY, "fabric", "NoSchedule")
    kube.add_taint(NODE, quarantine)
    before = the_node(kube)
    done = cloud.repair_node(before)
    assert (done.kind, done.name, done.action) == ("repair", NODE, EnsureAction.CREATED)
    assert done.detail == {"cleared": [f"bad-node:{NODE}", f"bad-node:{NODE}:nic"], "kept": []}
    assert host_faults() == {(f"bad-node:{CLUSTER}-{POOL}-2", "cli")}
    during = the_node(kube)
    assert not during.ready  # the machine is moving host
    after = wait_ready(kube)
    assert after.ready
    assert (after.labels, after.taints) == (before.labels, before.taints)
    assert quarantine in after.taints  # the lifecycle retests and releases it, not the repair


def test_a_sticky_fault_survives_repair(sim):
    cloud, kube = sim
    SimState().inject(CLUSTER, POOL, f"bad-node:{NODE}:nic", scope="sticky")
    SimState().inject(CLUSTER, POOL, f"not-ready:{NODE}", scope="sticky")
    done = cloud.repair_node(the_node(kube))
    assert done.detail == {"cleared": [], "kept": [f"bad-node:{NODE}:nic", f"not-ready:{NODE}"]}
    assert host_faults() == {(f"bad-node:{NODE}:nic", "sticky"), (f"not-ready:{NODE}", "sticky")}
    SimState().clock.advance(REPAIR_S + 60)
    assert not the_node(kube).ready  # the sticky not-ready fault keeps it NotReady


def test_a_non_sticky_not_ready_fault_is_cleared_by_repair(sim):
    cloud, kube = sim
    SimState().inject(CLUSTER, POOL, f"not-ready:{NODE}")
    cloud.repair_node(the_node(kube))
    assert host_faults() == set()
    assert wait_ready(kube).ready


def test_a_repair_under_way_is_found_and_changes_nothing(sim):
    cloud, kube = sim
    assert cloud.repair_node(the_node(kube)).action == EnsureAction.CREATED
    SimState().inject(CLUSTER, POOL, f"bad-node:{NODE}")  # a new fault during the repair
    again = cloud.repair_node(the_node(kube))
    assert (again.action, again.status) == (EnsureAction.FOUND, "UPDATING")
    assert host_faults() == {(f"bad-node:{NODE}", "cli")}
    assert not the_node(kube).ready


def test_dry_run_changes_nothing(sim):
    cloud, kube = sim
    SimState().inject(CLUSTER, POOL, f"bad-node:{NODE}")
    planned = cloud.repair_node(the_node(kube), dry_run=True)
    assert planned.action == EnsureAction.WOULD_CREATE
    assert host_faults() == {(f"bad-node:{NODE}", "cli")}
    assert the_node(kube).ready


@pytest.mark.parametrize(
    "provider_id",
    [None, f"gce://p/us-central1-b/{NODE}", f"sim://other-cluster/{NODE}", f"sim://{CLUSTER}/"],
)
def test_foreign_provider_ids_are_refused(sim, provider_id):
    cloud, kube = sim
    SimState().inject(CLUSTER, POOL, f"bad-node:{NODE}")
    node = the_node(kube)
    with pytest.raises(BackendError, match="refusing to repair it"):
        cloud.repair_node(replace(node, provider_id=provider_id))
    assert host_faults() == {(f"bad-node:{NODE}", "cli")}


def test_an_unknown_node_is_refused(sim):
    cloud, kube = sim
    node = the_node(kube)
    ghost = replace(node, provider_id=f"sim://{CLUSTER}/ghost-9")
    with pytest.raises(BackendError, match="'ghost-9' does not exist"):
        cloud.repair_node(ghost)


def test_injected_api_errors_are_transient(sim):
    cloud, kube = sim
    node = the_node(kube)
    SimState().inject(CLUSTER, POOL, "api-errors:1.0")
    with pytest.raises(TransientBackendError, match="repair node: 503"):
        cloud.inner.repair_node(node)
