"""The simulated fleet's provider view of its racks (issue 19): each sub-block of a pool keyed as
its nodes' labels key it, degraded while a ``subblock-down`` fault holds it (and only that one);
the reservation read the same way before its pool exists (none on an EKS-like cluster);
a faulty sub-block's report recorded in the sim state, found while under way, nothing recorded
on ``dry_run``, and a key of no sub-block of the pool refused."""

from __future__ import annotations

import pytest

from gpufleet.backends import cloud_backend, cluster_backend
from gpufleet.backends.base import EnsureAction
from gpufleet.backends.retry import RetryingCloudBackend
from gpufleet.backends.sim.cloud_table import CREATE_S
from gpufleet.backends.sim.state import SimState
from gpufleet.backends.topology_api import DEGRADED, HEALTHY
from gpufleet.config.catalog import load_catalog
from gpufleet.domain.topology import place_of
from gpufleet.errors import BackendError, TransientBackendError

CLUSTER, POOL = "a3u-sim", "h200-a"  # 6 nodes: block-1-sb1 holds 4, block-1-sb2 holds 2
SB1, SB2 = "block-1/block-1-sb1", "block-1/block-1-sb2"
REASON = "both crossings of the rack's uplink failed on 2 nights"


@pytest.fixture
def cloud(fleet_state) -> RetryingCloudBackend:
    return cloud_backend(load_catalog().cluster(CLUSTER))


def label_keys(cluster: str, pool: str) -> dict[str, int]:
    keys: dict[str, int] = {}
    for node in cluster_backend(load_catalog().cluster(cluster)).list_nodes(pool):
        key = place_of(node.labels).key
        keys[key] = keys.get(key, 0) + 1
    return keys


def test_each_subblock_keyed_as_its_nodes_labels_key_it(cloud):
    health = cloud.subblock_health(POOL)
    assert [(h.key, h.status, h.hosts, h.healthy_hosts, h.degraded_hosts) for h in health] == [
        (SB1, HEALTHY, 4, 4, 0),
        (SB2, HEALTHY, 2, 2, 0),
    ]
    assert {h.key: h.hosts for h in health} == label_keys(CLUSTER, POOL)
    eks = cloud_backend(load_catalog().cluster("p5-sim"))  # EKS's network-node layers
    assert {h.key: h.hosts for h in eks.subblock_health("h100-a")} == label_keys("p5-sim", "h100-a")


def test_a_down_subblock_reads_degraded_and_only_while_the_fault_holds(cloud):
    SimState().inject(CLUSTER, POOL, "subblock-down:block-1-sb2")
    health = {h.key: h for h in cloud.subblock_health(POOL)}
    assert (health[SB2].status, health[SB2].healthy_hosts, health[SB2].degraded_hosts) == (
        DEGRADED,
        0,
        2,
    )
    assert (health[SB1].status, health[SB1].degraded_hosts) == (HEALTHY, 0)
    SimState().clear(CLUSTER, POOL)
    assert {h.status for h in cloud.subblock_health(POOL)} == {HEALTHY}


def test_the_reservation_reads_as_the_pools_nodes_would_sit_before_the_pool_exists(cloud):
    view = cloud.reservation_health(POOL)  # res-a3u-a: 6 hosts in block-1, as h200-a's nodes
    assert (view.reservation, view.block, view.why) == ("res-a3u-a", "block-1", None)
    assert [
        (h.key, h.status, h.hosts, h.healthy_hosts, h.degraded_hosts) for h in view.subblocks
    ] == [
        (h.key, h.status, h.hosts, h.healthy_hosts, h.degraded_hosts)
        for h in cloud.subblock_health(POOL)
    ]
    # a region not onboarded yet: no cluster, no pool, no node; the reservation is there
    eu = cloud_backend(load_catalog().cluster("a3u-euw4-sim"))
    assert not eu.inner.cluster_exists()
    SimState().inject("a3u-euw4-sim", "h200-eu", "subblock-down:block-1-sb1")
    (only,) = eu.reservation_health("h200-eu").subblocks
    assert (only.key, only.status, only.hosts, only.healthy_hosts, only.degraded_hosts) == (
        "block-1/block-1-sb1",
        DEGRADED,
        4,
        0,
        4,
    )
    # the machines a capacity-short takes are missing, not degraded
    SimState().clear("a3u-euw4-sim", "h200-eu")
    SimState().inject("a3u-euw4-sim", "h200-eu", "capacity-short:1")
    (only,) = eu.reservation_health("h200-eu").subblocks
    assert (only.status, only.hosts, only.healthy_hosts) == (HEALTHY, 3, 3)


def test_an_eks_like_reservation_reports_its_network_node_and_no_subblocks():
    view = cloud_backend(load_catalog().cluster("p5-sim")).reservation_health("h100-a")
    assert (view.reservation, view.subblocks) == ("cb-p5-a", None)
    assert view.detail == {"network_nodes": ["nn-cb-p5-a"]}
    assert "no host health" in view.why


def test_a_report_is_recorded_found_while_under_way_then_made_again(cloud):
    done = cloud.report_faulty_subblock(POOL, SB2, REASON)
    assert (done.kind, done.name, done.action, done.status) == (
        "subblock_report",
        SB2,
        EnsureAction.CREATED,
        "UPDATING",
    )
    (recorded,) = cloud.inner.subblock_reports(POOL)
    assert (recorded["key"], recorded["reason"], recorded["reports"]) == (SB2, REASON, 1)
    assert {h.key: h.detail["reports"] for h in cloud.subblock_health(POOL)} == {SB1: 0, SB2: 1}
    again = cloud.report_faulty_subblock(POOL, SB2, "another reason")
    assert (again.action, again.detail["reason"]) == (EnsureAction.FOUND, REASON)
    SimState().clock.advance(CREATE_S["subblock_report"] + 1)
    assert cloud.report_faulty_subblock(POOL, SB2, REASON).action == EnsureAction.CREATED
    assert [r["reports"] for r in cloud.inner.subblock_reports(POOL)] == [2]


def test_dry_run_records_nothing(cloud):
    planned = cloud.report_faulty_subblock(POOL, SB1, REASON, dry_run=True)
    assert (planned.action, planned.status) == (EnsureAction.WOULD_CREATE, "ABSENT")
    assert cloud.inner.subblock_reports() == []


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("block-1/block-1-sb9", "is not a sub-block of pool 'h200-a'"),
        ("res-a3u-b-b1/res-a3u-b-b1-sb1", "is not a sub-block of pool 'h200-a'"),  # h200-b's
        ("block-1-sb1", "expected <block>/<sub-block>"),
    ],
)
def test_a_key_of_no_subblock_of_the_pool_is_refused(cloud, key, message):
    with pytest.raises(BackendError, match=message):
        cloud.report_faulty_subblock(POOL, key, REASON)
    assert cloud.inner.subblock_reports() == []


def test_injected_api_errors_are_transient(cloud):
    SimState().inject(CLUSTER, POOL, "api-errors:1.0")
    with pytest.raises(TransientBackendError, match="list sub-block health: 503"):
        cloud.inner.subblock_health(POOL)
    with pytest.raises(TransientBackendError, match="report a faulty sub-block: 503"):
        cloud.inner.report_faulty_subblock(POOL, SB1, REASON)
    with pytest.raises(TransientBackendError, match="read reservation sub-block health: 503"):
        cloud.inner.reservation_health(POOL)
