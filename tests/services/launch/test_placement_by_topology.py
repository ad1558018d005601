"""Placement by topology through the real services on the simulated fleet (issue 19 items 3 and
5): onboarding applies the provider's Kueue Topology before the flavors naming it and never
edits one; a launch asks for one sub-block or one block by the job's size, runs there, and
records each rank's block and sub-block; a transition gives the new pool a new flavor and
leaves the old one as it was. The sim's racks hold 4 hosts: h200-a is block-1-sb1 (nodes 0-3)
and block-1-sb2 (nodes 4-5)."""

from __future__ import annotations

import pytest

from gpufleet.backends import cloud_backend, cluster_backend
from gpufleet.backends.sim.state import SimState
from gpufleet.config.catalog import load_catalog
from gpufleet.domain.kueue import GKE_TOPOLOGY, REQUIRED_TOPOLOGY
from gpufleet.errors import BackendError
from gpufleet.services.infrastructure.addons import apply_cluster_addons
from gpufleet.store import Ledger
from tests.support.fleet import frozen_sim_clock, validate

CLUSTER = "a3u-sim"


@pytest.fixture(autouse=True)
def _frozen(fleet_state):
    frozen_sim_clock()


def _addons(cluster_name: str = CLUSTER) -> list[dict]:
    cluster = load_catalog().cluster(cluster_name)
    actions = apply_cluster_addons(cluster, cloud_backend(cluster), cluster_backend(cluster))
    return [a for a, _ in actions if a is not None]


def test_onboarding_applies_the_topology_before_the_flavors_then_writes_nothing():
    actions = _addons()
    kinds = [a["kind"] for a in actions]
    assert kinds.count("Topology") == 1
    assert kinds.index("Topology") < kinds.index("ResourceFlavor")
    backend = cluster_backend(load_catalog().cluster(CLUSTER)).inner
    for pool in ("h200-a", "h200-b"):
        flavor = backend.get("ResourceFlavor", f"gpufleet-{pool}")
        assert flavor["spec"]["topologyName"] == GKE_TOPOLOGY.name
    rerun = {
        (a["kind"], a["action"]) for a in _addons() if a["kind"] in ("Topology", "ResourceFlavor")
    }
    assert rerun == {("Topology", "found"), ("ResourceFlavor", "found")}


def test_onboarding_never_edits_a_topology_with_other_levels():
    backend = cluster_backend(load_catalog().cluster(CLUSTER))
    backend.apply(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "Topology",
            "metadata": {"name": GKE_TOPOLOGY.name},
            "spec": {"levels": [{"nodeLabel": "kubernetes.io/hostname"}]},
        }
    )
    with pytest.raises(BackendError, match=f"Topology {GKE_TOPOLOGY.name} exists with another"):
        _addons()
    stored = backend.inner.get("Topology", GKE_TOPOLOGY.name)
    assert stored["spec"]["levels"] == [{"nodeLabel": "kubernetes.io/hostname"}]
    assert backend.inner.get("ResourceFlavor", "gpufleet-h200-a") is None  # none named it


# --- the launch ---------------------------------------------------------------------------------


def _launch(name: str, nodes: int):
    """Gate, submit, wait until every pod runs, confirm and settle, as the launch DAG does;
    the JobSet as submitted and the launch as the ledger records it."""
    from gpufleet.services.launch.submit import TrainingLaunch

    params = {
        "cluster": CLUSTER,
        "pools": ["h200-a"],
        "nodes": nodes,
        "gpus_per_node": 8,
        "job_name": name,
        "namespace": "ml-team",
        "image": "example/train:1",
        "command": ["torchrun", "train.py"],
    }
    launch = TrainingLaunch(load_catalog(), Ledger)
    decision = launch.gate(params, run_id=f"run-{name}")
    job = launch.submit(launch.request(params), f"run-{name}", decision.decision_id)
    backend = launch.backend(CLUSTER)
    for _ in range(600):
        status = backend.workload_status("JobSet", name, "ml-team")
        if status.pods and all(p.phase == "Running" for p in status.pods):
            break
        SimState().clock.advance(0.1)
    assert launch.settle(job, launch.confirm(job)) == "confirmed"
    jobset = backend.inner.get("JobSet", name, "ml-team")
    (row,) = [r for r in Ledger().launches() if r["job"] == name]
    return jobset, row


def _asked(jobset: dict) -> dict:
    template = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    return {k: v for k, v in template["metadata"]["annotations"].items() if "topology" in k}


def test_a_job_that_fits_a_rack_runs_in_one_and_its_ranks_say_where():
    validate(CLUSTER, "h200-a")
    jobset, row = _launch("fits-a-rack", 4)
    assert _asked(jobset) == {REQUIRED_TOPOLOGY: GKE_TOPOLOGY.subblock}
    ranks = row["ranks"]
    assert len(ranks) == 4
    assert {(r["block"], r["subblock"]) for r in ranks.values()} == {("block-1", "block-1-sb1")}


def test_a_job_that_fits_a_rack_only_elsewhere_is_placed_there_not_in_node_order():
    validate(CLUSTER, "h200-a")
    backend = cluster_backend(load_catalog().cluster(CLUSTER))
    backend.set_unschedulable(f"{CLUSTER}-h200-a-0", True)  # rack 1: 3 free; rack 2: 2
    jobset, row = _launch("a-pair", 2)
    assert _asked(jobset) == {REQUIRED_TOPOLOGY: GKE_TOPOLOGY.subblock}
    assert {r["subblock"] for r in row["ranks"].values()} == {"block-1-sb2"}
    assert sorted(r["node"] for r in row["ranks"].values()) == [
        f"{CLUSTER}-h200-a-4",
        f"{CLUSTER}-h200-a-5",
    ]


def test_a_job_bigger_than_a_rack_asks_for_its_block_and_its_racks_are_recorded():
    validate(CLUSTER, "h200-a")
    jobset, row = _launch("spans-racks", 5)
    assert _asked(jobset) == {REQUIRED_TOPOLOGY: GKE_TOPOLOGY.block}
    seen = {(r["block"], r["subblock"]) for r in row["ranks"].values()}
    assert seen == {("block-1", "block-1-sb1"), ("block-1", "block-1-sb2")}


# --- the transition -----------------------------------------------------------------------------


def test_a_transition_creates_the_new_pools_flavor_and_leaves_the_old_one():
    from gpufleet.domain.transition import Step
    from gpufleet.manifests.addons.kueue import render_pool_queues
    from gpufleet.services.infrastructure.transition import ReservationTransition
    from gpufleet.services.nodes.drain import DrainSettings

    catalog = load_catalog()
    kube = cluster_backend(catalog.cluster(CLUSTER))
    for obj in render_pool_queues(catalog.pool(CLUSTER, "h200-b"), ["ml-team"]):
        kube.ensure_object(obj)  # what onboarding left for the pool in service
    old = kube.inner.get("ResourceFlavor", "gpufleet-h200-b")
    writes: list[tuple[str, str, str]] = []
    real = kube.ensure_object

    def recording(manifest):
        answer = real(manifest)
        writes.append((manifest["kind"], manifest["metadata"]["name"], answer))
        return answer

    kube.ensure_object = recording
    svc = ReservationTransition(
        catalog, CLUSTER, "h200-b", "h200-c", Ledger(), "run-t", DrainSettings(soak_s=0), kube=kube
    )
    svc.open("run", lambda dag, run: False)
    for step in (Step.PREFLIGHTED, Step.NEW_POOL_CREATED, Step.NEW_POOL_READY):
        for _ in range(100):
            if svc.advance(step).done:
                break
            SimState().clock.advance(5)
    validate(CLUSTER, "h200-c", run_id="run-t")
    assert svc.advance(Step.NEW_POOL_VALIDATED).failed is None
    assert svc.advance(Step.SCHEDULING_SWITCHED).done
    flavors = [(name, answer) for kind, name, answer in writes if kind == "ResourceFlavor"]
    assert flavors[0] == ("gpufleet-h200-c", "created")  # the new pool's own flavor
    assert set(flavors[1:]) == {("gpufleet-h200-c", "unchanged"), ("gpufleet-h200-b", "unchanged")}
    # the Topology is ensured before the flavor that names it
    assert writes[:2] == [
        ("Topology", GKE_TOPOLOGY.name, "unchanged"),
        ("ResourceFlavor", "gpufleet-h200-c", "created"),
    ]
    assert kube.inner.get("ResourceFlavor", "gpufleet-h200-b") == old  # never edited
    new = kube.inner.get("ResourceFlavor", "gpufleet-h200-c")
    assert new["spec"] == {
        "nodeLabels": {"cloud.google.com/gke-nodepool": "h200-c"},
        "topologyName": GKE_TOPOLOGY.name,
    }
