"""Kueue's rules gpufleet follows (issue 19, ``gpufleet.domain.kueue``): which pools have a
Topology and its levels, the topology a job asks for by its size, the objects Kueue will not let
change, and the 64 flavors of a ClusterQueue resource group."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.config.catalog import load_catalog
from gpufleet.domain.kueue import (
    EKS_TOPOLOGY,
    GKE_TOPOLOGY,
    MAX_FLAVORS_PER_RESOURCE_GROUP,
    PREFERRED_TOPOLOGY,
    REQUIRED_TOPOLOGY,
    check_resource_group,
    immutable_spec,
    pool_topology,
    refused_change,
    topology_request,
)
from gpufleet.domain.topology import EKS_LAYERS, GKE_BLOCK, GKE_HOST, GKE_SUBBLOCK, Place
from gpufleet.errors import CatalogError

ROOT = Path(__file__).resolve().parents[2]
HOSTNAME = "kubernetes.io/hostname"


def _ref(cluster: str, pool: str):
    return load_catalog(ROOT / "include" / "fleet").pool(cluster, pool)


@pytest.mark.parametrize(
    ("cluster", "pool", "transport", "expected"),
    [
        ("a3u-sim", "h200-a", "gib", GKE_TOPOLOGY),
        ("a3u-sim", "h200-a", "roce", GKE_TOPOLOGY),
        ("a3u-sim", "h200-a", "tcpxo", None),  # A3 Mega: no topology labels
        ("a3u-sim", "h200-a", "socket", None),
        ("p5-sim", "h100-a", "ofi-efa", EKS_TOPOLOGY),
        ("p5-sim", "h100-a", "socket", None),
    ],
)
def test_a_pool_has_its_providers_topology_only_on_machines_that_carry_the_labels(
    cluster, pool, transport, expected
):
    ref = _ref(cluster, pool)
    assert pool_topology(ref.cluster, ref.pool.model_copy(update={"transport": transport})) == (
        expected
    )


def test_the_levels_are_the_providers_broadest_first_hostname_last():
    assert GKE_TOPOLOGY.levels == (GKE_BLOCK, GKE_SUBBLOCK, GKE_HOST, HOSTNAME)
    assert EKS_TOPOLOGY.levels == (*EKS_LAYERS[:3], HOSTNAME)
    for topology in (GKE_TOPOLOGY, EKS_TOPOLOGY):
        levels = topology.levels
        assert levels.index(topology.block) + 1 == levels.index(topology.subblock)
        assert len(set(levels)) == len(levels) and levels[-1] == HOSTNAME


def test_a_nodes_domain_is_its_labels_down_to_the_level():
    labels = {GKE_BLOCK: "b1", GKE_SUBBLOCK: "sb2", GKE_HOST: "h3", HOSTNAME: "n"}
    assert GKE_TOPOLOGY.domain_of(GKE_BLOCK, labels) == ("b1",)
    assert GKE_TOPOLOGY.domain_of(GKE_SUBBLOCK, labels) == ("b1", "sb2")
    assert GKE_TOPOLOGY.domain_of(GKE_SUBBLOCK, {GKE_SUBBLOCK: "sb2"}) is None


def places(*racks: tuple[str, str, int]) -> list[Place | None]:
    return [Place(block, rack) for block, rack, count in racks for _ in range(count)]


def test_a_job_asks_for_one_sub_block_when_one_holds_its_free_nodes():
    free = places(("b1", "sb1", 4), ("b1", "sb2", 2)) + [None]
    ask = topology_request(GKE_TOPOLOGY, 4, free)
    assert (ask.annotation, ask.level) == (REQUIRED_TOPOLOGY, GKE_SUBBLOCK)
    assert ask.annotations == {REQUIRED_TOPOLOGY: GKE_SUBBLOCK}
    assert "b1/sb1 has 4 free" in ask.reason


def test_a_job_no_sub_block_holds_asks_for_one_block():
    free = places(("b1", "sb1", 3), ("b1", "sb2", 2), ("b2", "sb1", 3))
    ask = topology_request(EKS_TOPOLOGY, 5, free)
    assert (ask.annotation, ask.level) == (REQUIRED_TOPOLOGY, EKS_LAYERS[1])
    assert "b1 has 5 free" in ask.reason


def test_a_job_no_block_holds_prefers_one_block():
    free = places(("b1", "sb1", 3), ("b2", "sb1", 3))
    ask = topology_request(GKE_TOPOLOGY, 4, free)
    assert (ask.annotation, ask.level) == (PREFERRED_TOPOLOGY, GKE_BLOCK)
    assert "the largest has 3" in ask.reason
    # nothing known of the nodes (no labels read): a preference, never a requirement
    assert topology_request(GKE_TOPOLOGY, 1, [None, None]).annotation == PREFERRED_TOPOLOGY


racks = st.lists(
    st.tuples(
        st.sampled_from(["b1", "b2", "b3"]), st.sampled_from(["s1", "s2"]), st.integers(0, 6)
    ),
    max_size=6,
)


@given(racks, st.integers(1, 20))
def test_the_level_asked_is_the_smallest_that_holds_the_job(shape, nodes):
    free = places(*shape)
    ask = topology_request(GKE_TOPOLOGY, nodes, free)
    by_rack: dict[Place, int] = {}
    by_block: dict[str, int] = {}
    for p in free:
        by_rack[p] = by_rack.get(p, 0) + 1
        by_block[p.block] = by_block.get(p.block, 0) + 1
    fits_rack = any(n >= nodes for n in by_rack.values())
    fits_block = any(n >= nodes for n in by_block.values())
    if fits_rack:
        assert ask.annotations == {REQUIRED_TOPOLOGY: GKE_SUBBLOCK}
    elif fits_block:
        assert ask.annotations == {REQUIRED_TOPOLOGY: GKE_BLOCK}
    else:
        assert ask.annotations == {PREFERRED_TOPOLOGY: GKE_BLOCK}


TOPOLOGY = {
    "apiVersion": "kueue.x-k8s.io/v1beta1",
    "kind": "Topology",
    "metadata": {"name": "gpufleet-gke-topology"},
    "spec": {"levels": [{"nodeLabel": level} for level in GKE_TOPOLOGY.levels]},
}
FLAVOR = {
    "apiVersion": "kueue.x-k8s.io/v1beta1",
    "kind": "ResourceFlavor",
    "metadata": {"name": "gpufleet-h200-a"},
    "spec": {
        "nodeLabels": {"cloud.google.com/gke-nodepool": "h200-a"},
        "topologyName": "gpufleet-gke-topology",
    },
}


def _with(obj: dict, **spec) -> dict:
    out = copy.deepcopy(obj)
    for key, value in spec.items():
        if value is None:
            out["spec"].pop(key, None)
        else:
            out["spec"][key] = value
    return out


def test_a_topologys_levels_never_change():
    assert immutable_spec(TOPOLOGY) and refused_change(TOPOLOGY, TOPOLOGY) is None
    other = _with(TOPOLOGY, levels=TOPOLOGY["spec"]["levels"][1:])
    refusal = refused_change(TOPOLOGY, other)
    assert refusal.startswith("Topology gpufleet-gke-topology exists with another spec")
    assert "(spec.levels)" in refusal and "does not edit it" in refusal


def test_a_flavor_naming_a_topology_never_changes_its_spec():
    moved = _with(FLAVOR, nodeLabels={"cloud.google.com/gke-nodepool": "h200-c"})
    refusal = refused_change(FLAVOR, moved)
    assert refusal.startswith("ResourceFlavor gpufleet-h200-a exists with another spec")
    assert "(spec.nodeLabels)" in refusal and "'gpufleet-gke-topology'" in refusal
    # a field the manifest drops is a change too
    assert "(spec.topologyName)" in refused_change(FLAVOR, _with(FLAVOR, topologyName=None))
    assert refused_change(FLAVOR, copy.deepcopy(FLAVOR)) is None


def test_a_flavor_without_a_topology_may_change_as_kueue_allows():
    plain = _with(FLAVOR, topologyName=None)
    assert immutable_spec(plain) is None
    assert refused_change(plain, FLAVOR) is None  # gaining a topology: Kueue allows it
    other_group = {**TOPOLOGY, "apiVersion": "example.com/v1"}
    assert refused_change(other_group, _with(other_group, levels=[])) is None


def test_a_stored_object_without_kind_is_judged_by_the_manifests():
    stored = {"metadata": {"name": "gpufleet-gke-topology"}, "spec": TOPOLOGY["spec"]}
    assert refused_change(stored, _with(TOPOLOGY, levels=[])) is not None


def test_a_resource_group_holds_at_most_64_flavors():
    check_resource_group("cq", 0, [f"f{i}" for i in range(MAX_FLAVORS_PER_RESOURCE_GROUP)])
    with pytest.raises(CatalogError) as err:
        check_resource_group("gpufleet-big", 2, [f"f{i}" for i in range(65)])
    message = str(err.value)
    assert "ClusterQueue gpufleet-big: resource group 2 would hold 65 flavors" in message
    assert "at most 64" in message
