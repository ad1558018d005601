"""What onboarding refuses before creating anything (pure domain: gpufleet.domain.onboarding)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpufleet.backends.base import ReservationInfo
from gpufleet.config.catalog import load_catalog
from gpufleet.domain.fleet import Cluster
from gpufleet.domain.onboarding import gke_network_profile, preflight_refusals
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
