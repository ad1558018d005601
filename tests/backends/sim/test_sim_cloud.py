"""The simulated fleet's cloud backend keeps the real backends' contract: ensure = read first,
create only what is missing, report differences, return at once while a create runs; a
``preexisting: false`` cluster exists only once created; new pools' nodes come up NotReady and
tainted as asked."""

from __future__ import annotations

import pytest

from gpufleet.backends import cloud_backend, cluster_backend
from gpufleet.backends.base import EnsureAction, ResourceStatus, Taint
from gpufleet.backends.sim.cloud_table import CREATE_S
from gpufleet.backends.sim.programs import speed
from gpufleet.backends.sim.state import SimState
from gpufleet.config.catalog import load_catalog
from gpufleet.domain.workloads import UNVALIDATED_KEY
from gpufleet.errors import BackendError
from tests.support.fleet import frozen_sim_clock

NEW = "a3u-euw4-sim"  # preexisting: false in include/fleet/sim.yaml
UNVALIDATED = Taint(UNVALIDATED_KEY, "true", "NoSchedule")


@pytest.fixture(autouse=True)
def _frozen_clock(fleet_state):
    """Time moves only when the test advances the sim's clock."""
    frozen_sim_clock()


@pytest.fixture
def catalog():
    return load_catalog()


def _wait_ready(get):
    """What ``get`` reads once the sim's clock has passed a create's simulated duration
    (``CREATE_S`` x ``GPUFLEET_SIM_SPEED``); a create still running reads CREATING before."""
    info = get()
    if info.status != ResourceStatus.READY:
        assert info.status == ResourceStatus.CREATING, info
        SimState().clock.advance(max(CREATE_S.values()) * speed())
        info = get()
    return info


def test_preexisting_cluster_reports_what_exists(catalog, fleet_state):
    cloud = cloud_backend(catalog.cluster("a3u-sim"))
    res = cloud.get_reservation("res-a3u-a")
    assert (res.count, res.in_use, res.free) == (6, 6, 0)
    assert (res.zone, res.blocks) == ("us-central1-b", ("block-1",))
    assert cloud.get_reservation("res-a3u-b").blocks is None  # none reported: never guessed
    assert cloud.ensure_cluster().action == EnsureAction.FOUND
    assert all(e.action == EnsureAction.FOUND for e in cloud.ensure_network())
    pool = cloud.ensure_node_pool("h200-a")
    assert (pool.action, pool.status, pool.differences) == (
        EnsureAction.FOUND,
        ResourceStatus.READY,
        (),
    )
    assert cloud.delete_node_pool("h200-b") is True
    assert cloud.get_node_pool("h200-b").status == ResourceStatus.ABSENT
    SimState().inject("a3u-sim", "h200-b", "capacity-short:3")
    assert cloud.get_reservation("res-a3u-b").count == 1
    with pytest.raises(BackendError, match="has 1 of 1 machines free; node pool 'h200-b' needs 4"):
        cloud.ensure_node_pool("h200-b")
    SimState().clear()
    assert cloud.ensure_node_pool("h200-b").action == EnsureAction.CREATED
    assert _wait_ready(lambda: cloud.get_node_pool("h200-b")).node_count == 4


def test_new_cluster_exists_only_once_created(catalog, fleet_state):
    cluster = catalog.cluster(NEW)
    cloud = cloud_backend(cluster)
    assert cloud.get_cluster().status == ResourceStatus.ABSENT
    with pytest.raises(BackendError, match="does not exist yet: onboard its region"):
        cluster_backend(cluster).list_nodes()
    # dry run: everything would be created, nothing is
    assert {e.action for e in cloud.ensure_network(dry_run=True)} == {EnsureAction.WOULD_CREATE}
    assert cloud.ensure_cluster(dry_run=True).action == EnsureAction.WOULD_CREATE
    assert cloud.ensure_node_pool("h200-eu", dry_run=True).action == EnsureAction.WOULD_CREATE
    assert cloud.ensure_filesystem("lustre-euw4", dry_run=True).action == EnsureAction.WOULD_CREATE
    assert cloud.get_cluster().status == ResourceStatus.ABSENT
    # real run: creates, returns at once while the create runs
    net = cloud.ensure_network()
    assert [e.kind for e in net] == ["network"] + ["subnet"] * 9  # 8 RDMA + the gVNIC subnet
    first = cloud.ensure_cluster()
    assert (first.action, first.status) == (EnsureAction.CREATED, ResourceStatus.CREATING)
    assert _wait_ready(cloud.get_cluster).features["multi_networking"] is True
    again = cloud.ensure_cluster()
    assert (again.action, again.status) == (EnsureAction.FOUND, ResourceStatus.READY)
    pool = cloud.ensure_node_pool("h200-eu", taints=(UNVALIDATED,))
    assert (pool.action, pool.status) == (EnsureAction.CREATED, ResourceStatus.CREATING)
    nodes = cluster_backend(cluster).list_nodes("h200-eu")
    assert len(nodes) == 4 and not any(n.ready for n in nodes)
    assert all(n.unvalidated and not n.schedulable for n in nodes)
    _wait_ready(lambda: cloud.get_node_pool("h200-eu"))
    assert all(n.ready for n in cluster_backend(cluster).list_nodes("h200-eu"))
    assert cloud.ensure_node_pool("h200-eu").action == EnsureAction.FOUND  # second run: nothing new
    assert len(cluster_backend(cluster).list_nodes("h200-eu")) == 4
    fs = cloud.ensure_filesystem("lustre-euw4")
    assert fs.action == EnsureAction.CREATED
    info = _wait_ready(lambda: cloud.get_filesystem("lustre-euw4"))
    assert info.network == "default" and info.mount_name and info.id  # the primary VPC


def test_not_ready_fault_keeps_one_node_not_ready(catalog, fleet_state):
    cluster = catalog.cluster(NEW)
    cloud = cloud_backend(cluster)
    SimState().inject(NEW, "h200-eu", f"not-ready:{NEW}-h200-eu-2")
    cloud.ensure_cluster()
    cloud.ensure_node_pool("h200-eu")
    _wait_ready(lambda: cloud.get_node_pool("h200-eu"))
    not_ready = [n.name for n in cluster_backend(cluster).list_nodes("h200-eu") if not n.ready]
    assert not_ready == [f"{NEW}-h200-eu-2"]


def test_api_errors_after_n_calls(catalog, fleet_state):
    from gpufleet.backends.sim.cloud import SimCloudBackend
    from gpufleet.errors import TransientBackendError

    cloud = SimCloudBackend(catalog.cluster(NEW))
    SimState().inject(NEW, "h200-eu", "api-errors:1:after=3")
    for _ in range(3):
        cloud.get_cluster()
    with pytest.raises(TransientBackendError, match="503"):
        cloud.get_cluster()


def test_differences_are_reported_not_changed(catalog, fleet_state):
    cluster = catalog.cluster(NEW)
    cloud = cloud_backend(cluster)
    cloud.ensure_cluster()
    cloud.ensure_node_pool("h200-eu")
    with SimState().tx() as conn:  # someone removed a node by hand
        conn.execute("DELETE FROM nodes WHERE name=?", (f"{NEW}-h200-eu-3",))
    again = cloud.ensure_node_pool("h200-eu")
    assert again.differences == ("nodes: catalog 4, cloud 3",)
    assert len(cluster_backend(cluster).list_nodes("h200-eu")) == 3  # not "fixed" silently
