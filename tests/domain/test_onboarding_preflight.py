"""What onboarding refuses before creating anything (pure domain: gpufleet.domain.onboarding),
the healthy hosts the provider reports in the reservation's sub-blocks included."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpufleet.backends.base import ReservationInfo
from gpufleet.backends.topology_api import (
    DEGRADED,
    HEALTHY,
    UNKNOWN,
    ReservationHealth,
    SubBlockHealth,
)
from gpufleet.config.catalog import load_catalog
from gpufleet.domain.fleet import Cluster
from gpufleet.domain.onboarding import (
    gke_network_profile,
    healthy_host_refusals,
    preflight_refusals,
)
from tests.support.fleet import ROOT

EXAMPLES = ROOT / "include" / "fleet-examples"


def Report(name, machine_type, count, in_use, zone, blocks):  # noqa: N802 - a constructor
    """What a cloud reports about a reservation."""
    return ReservationInfo(name, machine_type, count, in_use, zone=zone, blocks=blocks)


@pytest.fixture(scope="module")
def gke():
    return load_catalog(EXAMPLES).region("us-central1")


@pytest.fixture(scope="module")
def eks():
    return load_catalog(EXAMPLES).region("us-east-1")


def gke_report(**kw) -> dict[str, Report]:
    base = Report(
        "a3u-reservation-1",
        "a3-ultragpu-8g",
        16,
        0,
        "us-central1-b",
        ("a3u-reservation-1-block-0001",),
    )
    return {base.name: replace(base, **kw)}


def reasons(refusals) -> list[str]:
    return [r.reason for r in refusals]


def test_a_sound_reservation_is_not_refused(gke, eks):
    assert preflight_refusals(gke, gke_report(), ()) == []
    eks_report = Report("cr-0123456789abcdef0", "p5.48xlarge", 8, 0, "us-east-1a", None)
    assert preflight_refusals(eks, {eks_report.name: eks_report}, ()) == []


def test_shortfall_is_refused_with_the_figures(gke):
    (refusal,) = preflight_refusals(gke, gke_report(count=16, in_use=4), ())
    assert refusal.where == "a3u-reservation-1"
    assert refusal.reason == (
        "capacity short: train-usc1/a3u-pool-1 (16) need 16 machines; the reservation has 12 "
        "free (16 reserved, 4 in use)"
    )
    # a pool that exists already holds its machines: no capacity needed
    assert preflight_refusals(gke, gke_report(in_use=16), {"train-usc1/a3u-pool-1"}) == []


def test_machine_type_mismatch_names_both(gke):
    (refusal,) = preflight_refusals(gke, gke_report(machine_type="a3-megagpu-8g"), ())
    assert "holds a3-megagpu-8g machines but the pool is a3-ultragpu-8g" in refusal.reason


def test_rdma_mapping_follows_the_reservation_zone(gke):
    refusals = reasons(preflight_refusals(gke, gke_report(zone="us-central1-c"), ()))
    assert any("is in zone us-central1-c but the catalog says us-central1-b" in r for r in refusals)
    assert any(gke_network_profile("us-central1-b") in r for r in refusals)


def test_unreported_zone_or_block_stops_instead_of_guessing(gke):
    (refusal,) = preflight_refusals(gke, gke_report(zone=None), ())
    assert "did not report the zone" in refusal.reason
    (refusal,) = preflight_refusals(gke, gke_report(blocks=None), ())
    assert "pins block 'a3u-reservation-1-block-0001'" in refusal.reason
    assert "did not report the reservation's blocks" in refusal.reason
    (refusal,) = preflight_refusals(gke, gke_report(blocks=("other-block",)), ())
    assert "not a block of reservation" in refusal.reason and "other-block" in refusal.reason


def test_eks_reservation_needs_a_subnet_in_its_zone(eks):
    report = Report("cr-0123456789abcdef0", "p5.48xlarge", 8, 0, "us-east-1c", None)
    refusals = reasons(preflight_refusals(eks, {report.name: report}, ()))
    assert any(
        "subnets are in us-east-1a, us-east-1b" in r and "add one in us-east-1c" in r
        for r in refusals
    )


def test_catalog_requires_what_onboarding_creates_with():
    base = load_catalog(EXAMPLES).cluster("train-use1").model_dump()
    with pytest.raises(ValueError, match="needs 'iam'"):
        Cluster.model_validate({**base, "iam": None})
    gke = load_catalog(EXAMPLES).cluster("train-usc1").model_dump()
    gke["network"]["gvnic"] = None
    with pytest.raises(ValueError, match="needs 'network.gvnic'"):
        Cluster.model_validate(gke)


def test_gke_rdma_subnet_names_fit_a_device_network_name():
    from gpufleet.domain.fleet_rules import MAX_GKE_DEVICE_NETWORK_NAME, region_problems

    region = load_catalog(EXAMPLES).region("us-central1")
    data = region.model_dump()
    long_name = "a" * (MAX_GKE_DEVICE_NETWORK_NAME + 1)
    data["clusters"][0]["network"]["subnets"][0]["name"] = long_name
    from gpufleet.domain.fleet import Region

    problems = region_problems(Region.model_validate(data))
    assert [m for _, m in problems if "at most 41" in m] == [
        f"{long_name!r} is 42 characters; GKE names a device Network object after it, which "
        "may be at most 41"
    ]
    assert region_problems(region) == []


# --- healthy hosts: the provider's view of the reservation before the pool exists -----------

POOL_KEY = "train-usc1/a3u-pool-1"  # 16 nodes on block a3u-reservation-1-block-0001
BLOCK = "a3u-reservation-1-block-0001"


def rack(name, healthy, degraded, hosts=8, status=None):
    """One sub-block as the provider reports it (keyed by its physical ids)."""
    status = status or (DEGRADED if degraded else HEALTHY)
    return SubBlockHealth("3e3056e2", name, status, healthy, degraded, hosts)


def view(*racks, subblocks=True):
    return ReservationHealth("a3u-reservation-1", BLOCK, tuple(racks) if subblocks else None)


def test_enough_healthy_hosts_is_not_refused(gke):
    views = {POOL_KEY: view(rack("sb1", 8, 0), rack("sb2", 8, 0))}
    assert healthy_host_refusals(gke, views) == []
    assert preflight_refusals(gke, gke_report(), (), views) == []


def test_too_few_healthy_hosts_is_a_shortfall_naming_the_degraded_subblocks(gke):
    views = {POOL_KEY: view(rack("sb1", 8, 0), rack("sb2", 5, 3), rack("sb3", 0, 0, 0))}
    (refusal,) = preflight_refusals(gke, gke_report(), (), views)
    assert refusal.where == "a3u-reservation-1"
    assert refusal.reason == (
        "healthy hosts short: train-usc1/a3u-pool-1 (16) need 16 machines; the provider reports "
        f"13 healthy hosts in block {BLOCK} of the reservation, 3 degraded (degraded "
        "sub-blocks: 3e3056e2/sb2 5 healthy, 3 degraded of 8 hosts)"
    )
    # beside a capacity shortfall, each with its own figures
    both = reasons(preflight_refusals(gke, gke_report(in_use=4), (), views))
    assert [r.split(":")[0] for r in both] == ["capacity short", "healthy hosts short"]
    # a pool that exists already holds its machines: the nightly judges its racks
    assert healthy_host_refusals(gke, views, {POOL_KEY}) == []


def test_one_healthy_host_short_is_refused_and_exactly_enough_is_not(gke):
    assert healthy_host_refusals(gke, {POOL_KEY: view(rack("sb1", 8, 0), rack("sb2", 8, 0))}) == []
    (refusal,) = healthy_host_refusals(gke, {POOL_KEY: view(rack("sb1", 8, 0), rack("sb2", 7, 1))})
    assert "need 16 machines; the provider reports 15 healthy hosts" in refusal.reason


def test_too_few_hosts_all_healthy_is_the_capacitys_not_the_healths(gke):
    few = {POOL_KEY: view(rack("sb1", 8, 0), rack("sb2", 4, 0, 4))}
    assert healthy_host_refusals(gke, few) == []
    (refusal,) = preflight_refusals(gke, gke_report(count=12), (), few)
    assert refusal.reason.startswith("capacity short:")
    # hosts neither healthy nor degraded are not healthy: that sub-block is named
    gone = {POOL_KEY: view(rack("sb1", 8, 0), rack("sb2", 5, 0, 8))}
    (refusal,) = healthy_host_refusals(gke, gone)
    assert refusal.reason.endswith(
        "(degraded sub-blocks: 3e3056e2/sb2 5 healthy, 0 degraded of 8 hosts)"
    )


def test_no_subblock_health_or_no_view_is_not_judged(gke):
    assert healthy_host_refusals(gke, {POOL_KEY: view(subblocks=False)}) == []  # EKS
    assert healthy_host_refusals(gke, {POOL_KEY: view()}) == []  # none listed
    assert healthy_host_refusals(gke, {}) == []  # not read


def test_hosts_of_unreported_health_count_as_healthy(gke):
    unknown = rack("sb2", None, None, 8, status=UNKNOWN)
    assert healthy_host_refusals(gke, {POOL_KEY: view(rack("sb1", 8, 0), unknown)}) == []
    four = rack("sb2", None, None, 4, status=UNKNOWN)
    (refusal,) = healthy_host_refusals(gke, {POOL_KEY: view(rack("sb1", 6, 2), four)})
    assert refusal.reason.endswith(
        "6 healthy hosts in block a3u-reservation-1-block-0001 of the reservation, 2 degraded "
        "(degraded sub-blocks: 3e3056e2/sb1 6 healthy, 2 degraded of 8 hosts); 4 hosts of no "
        "reported health counted as healthy"
    )
    uncounted = rack("sb2", None, None, None, status=UNKNOWN)  # how many hosts: not said
    assert healthy_host_refusals(gke, {POOL_KEY: view(rack("sb1", 0, 8), uncounted)}) == []


@pytest.mark.parametrize(
    ("views", "message"),
    [
        ({POOL_KEY: view(rack("sb1", -1, 0))}, "sub-block 3e3056e2/sb1: healthy_hosts -1 is not"),
        ({POOL_KEY: view(rack("sb1", 8, 0, "8"))}, "hosts '8' is not a host count"),
        ({POOL_KEY: view(rack("sb1", True, 0))}, "healthy_hosts True is not a host count"),
        ({"train-usc1/nope": view(rack("sb1", 8, 0))}, "pools region us-central1 does not have"),
    ],
)
def test_a_malformed_view_is_a_clear_error_not_a_verdict(gke, views, message):
    with pytest.raises(ValueError, match=message):
        healthy_host_refusals(gke, views)
