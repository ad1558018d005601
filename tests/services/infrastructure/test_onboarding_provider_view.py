"""Onboarding's preflight reads the provider's view of each reservation before it creates
anything (issue 19 item 4), on the simulated fleet: the sub-blocks of the reservation (its
block) of each pool whose machines carry topology, with their healthy and degraded hosts. Too
few healthy hosts for a pool still to be created is a shortfall, refused with nothing created;
enough proceeds, the view recorded in the step's result; a view the provider does not give
(EKS) or that cannot be read is recorded and never refuses.

``sim-europe-west4`` is the catalog's region still to be onboarded: reservation
``res-a3u-euw4`` holds 4 hosts in block ``block-1``, all in the sim's rack ``block-1-sb1``, and
pool ``h200-eu`` asks for 4. (The end-to-end DAG runs: tests/test_onboarding_dag.py.)
"""

from __future__ import annotations

import pytest

from gpufleet.backends import cloud_backend
from gpufleet.backends.base import ResourceStatus
from gpufleet.backends.sim.state import SimState
from gpufleet.config.catalog import load_catalog
from gpufleet.services.infrastructure.onboarding import OnboardingRefused, RegionOnboarding
from gpufleet.store import Ledger

REGION, CLUSTER, POOL = "sim-europe-west4", "a3u-euw4-sim", "h200-eu"
KEY = f"{CLUSTER}/{POOL}"
RACK = "block-1/block-1-sb1"


@pytest.fixture
def ledger(fleet_state, tmp_path) -> Ledger:
    return Ledger(f"sqlite:///{tmp_path / 'ledger.db'}")


def onboarding(ledger: Ledger, region: str = REGION, **kw) -> RegionOnboarding:
    return RegionOnboarding(load_catalog().region(region), ledger, "run-1", **kw)


def nothing_created() -> bool:
    with SimState().read() as conn:
        rows = conn.execute("SELECT kind FROM cloud WHERE cluster=?", (CLUSTER,)).fetchall()
    cloud = cloud_backend(load_catalog().cluster(CLUSTER))
    return rows == [] and cloud.get_cluster().status == ResourceStatus.ABSENT


def test_too_few_healthy_hosts_is_refused_at_preflight_and_nothing_is_created(ledger):
    SimState().inject(CLUSTER, POOL, "subblock-down:block-1-sb1")
    with pytest.raises(OnboardingRefused) as refused:
        onboarding(ledger).preflight()
    reason = (
        f"healthy hosts short: {KEY} (4) need 4 machines; the provider reports 0 healthy hosts "
        f"in block block-1 of the reservation, 4 degraded (degraded sub-blocks: {RACK} 0 healthy, "
        "4 degraded of 4 hosts)"
    )
    assert str(refused.value) == (
        f"region {REGION}: preflight refused, nothing was created: res-a3u-euw4: {reason}"
    )
    (action,) = ledger.onboarding_actions(REGION, "run-1")
    assert (action["step"], action["kind"], action["name"], action["action"]) == (
        "preflight",
        "preflight",
        "res-a3u-euw4",
        "refused",
    )
    assert action["detail"]["reason"] == reason
    (rack,) = action["detail"]["provider_views"][KEY]["subblocks"]  # the view, beside the reason
    assert (rack["key"], rack["status"], rack["healthy_hosts"], rack["degraded_hosts"]) == (
        RACK,
        "DEGRADED",
        0,
        4,
    )
    assert ledger.region_state(REGION)["state"] == "failed"
    assert nothing_created()
    with pytest.raises(OnboardingRefused, match="healthy hosts short"):
        onboarding(ledger, dry_run=True).preflight()  # a dry run is refused alike


@pytest.mark.parametrize("fault", [None, "subblock-down:block-1-sb2"], ids=["none", "elsewhere"])
def test_enough_healthy_hosts_proceeds_with_the_view_recorded(ledger, fault):
    if fault:  # a rack the reservation has no host in
        SimState().inject(CLUSTER, POOL, fault)
    result = onboarding(ledger).preflight()
    view = result.to_dict()["provider_views"][KEY]
    assert (view["reservation"], view["block"], view["why"]) == ("res-a3u-euw4", "block-1", None)
    assert [
        (s["key"], s["status"], s["healthy_hosts"], s["degraded_hosts"]) for s in view["subblocks"]
    ] == [(RACK, "HEALTHY", 4, 0)]
    assert (
        f"{KEY}: reservation res-a3u-euw4 block block-1: the provider reports 4 healthy and 0 "
        f"degraded hosts (per sub-block, status healthy/degraded: {RACK} HEALTHY 4/0); the "
        "pool asks 4"
    ) in result.notes
    assert ledger.onboarding_actions(REGION, "run-1") == []  # nothing refused
    assert ledger.region_state(REGION)["state"] == "onboarding"
    assert nothing_created()  # the preflight only reads


def test_a_view_that_cannot_be_read_is_recorded_and_not_judged(ledger):
    # the reservation and the pool are read; every call after (the view) fails, retries too
    SimState().inject(CLUSTER, POOL, "subblock-down:block-1-sb1")
    SimState().inject(CLUSTER, POOL, "api-errors:1:after=2")
    result = onboarding(ledger).preflight()
    error = result.provider_views[KEY]["error"]
    assert "read reservation sub-block health: 503" in error
    assert any(
        n.startswith(f"{KEY}: the provider's sub-block health of reservation res-a3u-euw4 was not")
        and n.endswith("not judged, onboarding goes on")
        for n in result.notes
    )
    assert ledger.onboarding_actions(REGION, "run-1") == []


def test_eks_gives_no_subblocks_before_launch_and_an_existing_pool_is_not_judged(ledger):
    eks = onboarding(ledger, "sim-us-east-1").preflight()
    view = eks.provider_views["p5-sim/h100-a"]
    assert (view["subblocks"], view["detail"]) == (None, {"network_nodes": ["nn-cb-p5-a"]})
    assert any("no host health" in n and "healthy hosts not judged" in n for n in eks.notes)
    # h200-a exists and holds its machines: its degraded rack is the nightly's to judge
    SimState().inject("a3u-sim", "h200-a", "subblock-down:block-1-sb2")
    gke = onboarding(ledger, "sim-us-central1").preflight()
    racks = gke.provider_views["a3u-sim/h200-a"]["subblocks"]
    assert [(r["key"], r["status"]) for r in racks] == [
        ("block-1/block-1-sb1", "HEALTHY"),
        ("block-1/block-1-sb2", "DEGRADED"),
    ]
    assert ledger.onboarding_actions("sim-us-central1", "run-1") == []


def test_machines_missing_but_healthy_are_the_capacity_refusal_alone(ledger):
    SimState().inject(CLUSTER, POOL, "capacity-short:2")  # 2 hosts left, both healthy
    with pytest.raises(OnboardingRefused):
        onboarding(ledger).preflight()
    (action,) = ledger.onboarding_actions(REGION, "run-1")
    assert action["detail"]["reason"].startswith("capacity short: ")
    (rack,) = action["detail"]["provider_views"][KEY]["subblocks"]
    assert (rack["hosts"], rack["healthy_hosts"]) == (2, 2)
    assert nothing_created()
