"""One storage task per filesystem (issue 35): the nightly's scope maps the storage task once
per filesystem, its host pool's, taken in turn night by night; every pool's fabric task is told
the host. The pure planner over the shipped catalog (a3u-sim's h200-a and h200-b share
lustre-a3u; h200-c is planned; p5-sim's h100-a mounts fsx-p5 alone)."""

from __future__ import annotations

import pytest

from gpufleet.config.catalog import load_catalog
from gpufleet.errors import GpufleetError
from gpufleet.services.validation.scope import plan_scope

A3U = ["h200-a", "h200-b"]  # lustre-a3u's pools in service, in catalog order


def storage_hosts(scope) -> dict[str, str]:
    return {t["cluster"]: t["node_pool"] for t in scope["storage"]}


def test_the_storage_task_is_mapped_once_per_filesystem_and_every_pool_knows_its_host():
    scope = plan_scope(load_catalog(), clusters=["a3u-sim", "p5-sim"], night=0)
    assert scope["storage"] == [
        {"cluster": "a3u-sim", "node_pool": "h200-a", "pool_check_in_fabric": True},
        {"cluster": "p5-sim", "node_pool": "h100-a", "pool_check_in_fabric": True},
    ]
    assert scope["fabric"] == [
        {"cluster": "a3u-sim", "node_pool": p, "pool_check": True, "full_test_host": "h200-a"}
        for p in A3U
    ] + [
        {"cluster": "p5-sim", "node_pool": "h100-a", "pool_check": True, "full_test_host": "h100-a"}
    ]


def test_the_host_is_each_pool_of_the_filesystem_in_turn():
    """No pool hosts for good: a host whose nodes are all busy leaves the full test to the next
    night's, another pool."""
    hosts = [
        storage_hosts(plan_scope(load_catalog(), clusters=["a3u-sim"], night=n))["a3u-sim"]
        for n in range(738_000, 738_004)
    ]
    assert sorted(hosts[:2]) == A3U and hosts[2:] == hosts[:2]


def test_a_pool_left_out_never_hosts_and_a_planned_pool_in_service_does():
    catalog = load_catalog()
    for night in range(2):
        scope = plan_scope(
            catalog, clusters=["a3u-sim"], leave_out={("a3u-sim", "h200-a")}, night=night
        )
        assert storage_hosts(scope) == {"a3u-sim": "h200-b"}
        assert [t["node_pool"] for t in scope["fabric"]] == ["h200-b"]
    served = {("a3u-sim", "h200-c")}
    hosts = {
        storage_hosts(plan_scope(catalog, clusters=["a3u-sim"], in_service=served, night=n))[
            "a3u-sim"
        ]
        for n in range(3)
    }
    assert hosts == {"h200-a", "h200-b", "h200-c"}


def test_a_storage_only_run_maps_each_pool_and_a_fabric_only_run_none():
    catalog = load_catalog()
    alone = plan_scope(catalog, clusters=["a3u-sim"], mode="storage")
    assert alone == {
        "fabric": [],
        "storage": [{"cluster": "a3u-sim", "node_pool": p} for p in A3U],
    }
    fabric = plan_scope(catalog, clusters=["a3u-sim"], mode="fabric")
    assert fabric == {
        "fabric": [{"cluster": "a3u-sim", "node_pool": p} for p in A3U],
        "storage": [],
    }


def test_a_bad_mode_is_refused():
    with pytest.raises(GpufleetError, match="mode 'all' is not one of both, fabric, storage"):
        plan_scope(load_catalog(), mode="all")
