"""The simulated fleet places a job asking for a topology as Kueue's Topology Aware Scheduling
does (issue 19): every pod in one domain of the level asked for, the domain that fits the gang
most tightly; a required level no domain fits leaves the gang waiting, saying why; a preferred
one goes up a level (and spreads at the top). Sim racks hold 4 hosts
(``backends.sim.topology``): h200-a's 6 nodes are block-1-sb1 (nodes 0-3) and block-1-sb2
(4-5); h200-b's 4 nodes one rack of its reservation's first block."""

from __future__ import annotations

from gpufleet.backends import cluster_backend
from gpufleet.config.catalog import load_catalog
from gpufleet.domain.kueue import GKE_TOPOLOGY, PREFERRED_TOPOLOGY, REQUIRED_TOPOLOGY
from gpufleet.domain.topology import place_of
from gpufleet.domain.workloads import workload_pod_templates, workload_selector
from gpufleet.manifests.training import render_training_job
from tests.manifests.manifest_helpers import training_spec

CLUSTER = "a3u-sim"


def run(pool: str, name: str, nodes: int, ask: dict[str, str] | None):
    """Apply a training JobSet of ``nodes`` asking ``ask`` (None: nothing); its pods."""
    ref = load_catalog().pool(CLUSTER, pool)
    backend = cluster_backend(ref.cluster)
    job = render_training_job(ref, training_spec(name=name, nodes=nodes))
    for _, _, template in workload_pod_templates(job):
        annotations = template["metadata"]["annotations"]
        for key in (REQUIRED_TOPOLOGY, PREFERRED_TOPOLOGY):
            annotations.pop(key, None)
        annotations.update(ask or {})
    backend.apply(job)
    return backend, backend.list_pods("ml-team", workload_selector("JobSet", name))


def racks(backend, pool: str, pods) -> set[str]:
    labels = {n.name: n.labels for n in backend.list_nodes(pool)}
    return {place_of(labels[p.node]).key for p in pods}


def test_a_required_sub_block_puts_the_gang_in_the_tightest_rack(fleet_state):
    backend = cluster_backend(load_catalog().cluster(CLUSTER))
    backend.set_unschedulable(f"{CLUSTER}-h200-a-0", True)  # rack 1 keeps 3 free, rack 2 has 2
    ask = {REQUIRED_TOPOLOGY: GKE_TOPOLOGY.subblock}
    backend, pods = run("h200-a", "two", 2, ask)
    # in node order the pods would take nodes 1 and 2; rack 2 fits the pair exactly
    assert racks(backend, "h200-a", pods) == {"block-1/block-1-sb2"}
    backend, pods = run("h200-a", "three", 3, ask)
    assert racks(backend, "h200-a", pods) == {"block-1/block-1-sb1"}


def test_a_required_sub_block_no_rack_fits_waits_and_says_why(fleet_state):
    _, pods = run("h200-a", "five", 5, {REQUIRED_TOPOLOGY: GKE_TOPOLOGY.subblock})
    assert {p.node for p in pods} == {None}
    assert "waiting for admission (gang of 5)" in pods[0].message
    assert f"no {GKE_TOPOLOGY.subblock} domain has 5 free nodes (the largest has 4" in (
        pods[0].message
    )


def test_a_required_block_holds_a_gang_across_its_racks(fleet_state):
    backend, pods = run("h200-a", "five", 5, {REQUIRED_TOPOLOGY: GKE_TOPOLOGY.block})
    assert None not in {p.node for p in pods}
    assert racks(backend, "h200-a", pods) == {"block-1/block-1-sb1", "block-1/block-1-sb2"}


def test_a_preferred_level_is_kept_when_it_fits(fleet_state):
    backend = cluster_backend(load_catalog().cluster(CLUSTER))
    backend.set_unschedulable(f"{CLUSTER}-h200-a-0", True)
    backend, pods = run("h200-a", "two", 2, {PREFERRED_TOPOLOGY: GKE_TOPOLOGY.subblock})
    assert racks(backend, "h200-a", pods) == {"block-1/block-1-sb2"}


def test_a_preferred_level_no_domain_fits_goes_up_a_level(fleet_state):
    backend, pods = run("h200-a", "five", 5, {PREFERRED_TOPOLOGY: GKE_TOPOLOGY.subblock})
    assert None not in {p.node for p in pods}  # no rack holds 5: its block does
    assert racks(backend, "h200-a", pods) == {"block-1/block-1-sb1", "block-1/block-1-sb2"}


def test_a_level_no_topology_has_is_never_placed(fleet_state):
    _, pods = run("h200-a", "odd", 2, {REQUIRED_TOPOLOGY: "example.com/rack"})
    assert {p.node for p in pods} == {None}
    assert "not a level of the flavor's Topology" in pods[0].message
