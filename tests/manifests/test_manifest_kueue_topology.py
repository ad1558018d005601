"""Placement by topology in what onboarding and the launch render (issue 19): the provider's
Kueue ``Topology`` before the flavors that name it, checked against the pinned Kueue release's
own CRDs (schema and CEL rules, immutability included); pools without topology labels left
out; the 64-flavor resource group; and the topology a training job asks for by its size."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from gpufleet.config.addons import addons_dir, load_controller_releases
from gpufleet.domain.fleet import PoolRef
from gpufleet.domain.kueue import (
    PREFERRED_TOPOLOGY,
    REQUIRED_TOPOLOGY,
    pool_topology,
    refused_change,
)
from gpufleet.domain.topology import Place
from gpufleet.domain.workloads import workload_pod_templates
from gpufleet.errors import CatalogError
from gpufleet.manifests.addons import (
    LustreVolumeSource,
    render_cluster_addons,
    render_kueue_objects,
)
from gpufleet.manifests.training import render_training_job
from tests.manifests.manifest_helpers import training_spec
from tests.support.crd_rules import crd_problems
from tests.support.schemas import validate_manifest

ROOT = Path(__file__).resolve().parents[2]


def without_topology(ref: PoolRef) -> PoolRef:
    """The pool on machines without topology labels (plain sockets)."""
    pool = ref.pool.model_copy(update={"transport": "socket", "gdrdma": False})
    cluster = ref.cluster.model_copy(update={"node_pools": (pool,)})
    return PoolRef(region=ref.region, cluster=cluster, pool=pool)


def by_kind(objs: list[dict]) -> dict[str, dict]:
    return {o["kind"]: o for o in objs}


def test_the_topology_and_the_flavor_naming_it_pass_the_pinned_releases_crds(ref: PoolRef):
    objs = render_kueue_objects(ref)
    topology, flavor = by_kind(objs)["Topology"], by_kind(objs)["ResourceFlavor"]
    assert objs[0] is topology  # before the flavor that names it
    expected = pool_topology(ref.cluster, ref.pool)
    assert topology["metadata"]["name"] == expected.name
    assert [lv["nodeLabel"] for lv in topology["spec"]["levels"]] == list(expected.levels)
    assert flavor["spec"]["topologyName"] == expected.name
    for obj in (topology, flavor):
        validate_manifest(obj)  # our closed schema: a misspelt field fails
        assert crd_problems(obj) == []  # the release's: its OpenAPI schema and CEL rules
        assert crd_problems(obj, old=copy.deepcopy(obj)) == []  # a rerun is a valid update


def test_a_pool_without_topology_labels_gets_no_topology(ref: PoolRef):
    objs = render_kueue_objects(without_topology(ref))
    assert [o["kind"] for o in objs] == ["ResourceFlavor", "ClusterQueue", "LocalQueue"]
    flavor = objs[0]
    assert "topologyName" not in flavor["spec"]
    assert crd_problems(flavor) == []


def test_the_crd_checker_bites():
    """The release's rules the checker evaluates refuse what Kueue refuses."""
    from gpufleet.config.catalog import load_catalog

    ref = load_catalog(ROOT / "include" / "fleet").pool("a3u-sim", "h200-a")
    topology, flavor = render_kueue_objects(ref)[:2]
    hostname_first = copy.deepcopy(topology)
    hostname_first["spec"]["levels"].reverse()
    assert any("lowest level" in p for p in crd_problems(hostname_first))
    twice = copy.deepcopy(topology)
    twice["spec"]["levels"].append(twice["spec"]["levels"][0])
    assert any("must be unique" in p for p in crd_problems(twice))
    bad_label = copy.deepcopy(topology)
    bad_label["spec"]["levels"][0]["nodeLabel"] = "no spaces/allowed here"
    assert any(p.startswith("spec.levels[0].nodeLabel") for p in crd_problems(bad_label))
    unlabelled = copy.deepcopy(flavor)
    unlabelled["spec"]["nodeLabels"] = {}
    assert any("at least one nodeLabel" in p for p in crd_problems(unlabelled))


def _changes(topology: dict, flavor: dict) -> list[tuple[dict, dict]]:
    """(stored, wanted) updates of the two kinds: some Kueue allows, some it refuses."""
    fewer = copy.deepcopy(topology)
    fewer["spec"]["levels"] = fewer["spec"]["levels"][1:]
    relabelled = copy.deepcopy(topology)
    relabelled["metadata"]["labels"] = {"team": "x"}
    plain = copy.deepcopy(flavor)
    del plain["spec"]["topologyName"]
    moved = copy.deepcopy(flavor)
    moved["spec"]["nodeLabels"] = {"cloud.google.com/gke-nodepool": "elsewhere"}
    plain_moved = copy.deepcopy(plain)
    plain_moved["spec"]["nodeLabels"] = moved["spec"]["nodeLabels"]
    return [
        (topology, fewer),
        (topology, relabelled),
        (flavor, moved),
        (flavor, plain),
        (plain, flavor),
        (plain, plain_moved),
        (flavor, copy.deepcopy(flavor)),
    ]


def test_what_gpufleet_refuses_to_edit_is_what_the_release_refuses(ref: PoolRef):
    """``refused_change`` (applied before any write) against the CRD's transition rules."""
    topology, flavor = render_kueue_objects(ref)[:2]
    for stored, wanted in _changes(topology, flavor):
        refused_by_kueue = any("immutable" in p for p in crd_problems(wanted, old=stored))
        assert (refused_change(stored, wanted) is not None) == refused_by_kueue, (stored, wanted)


def test_onboarding_applies_one_topology_before_every_flavor():
    from gpufleet.config.catalog import load_catalog

    cluster = load_catalog(ROOT / "include" / "fleet").cluster("a3u-sim")
    socket = cluster.node_pools[0].model_copy(update={"name": "cpu-pool", "transport": "socket"})
    cluster = cluster.model_copy(update={"node_pools": (*cluster.node_pools, socket)})
    lustre = {
        fs.name: LustreVolumeSource("p/z/lustre", "10.0.0.4", "lfs") for fs in cluster.filesystems
    }
    controllers = load_controller_releases(folder=str(addons_dir()))
    groups = {
        g.name: g
        for g in render_cluster_addons(
            cluster, server_version="1.34", lustre=lustre, controllers=controllers
        )
    }
    objs = groups["kueue-queues"].objects
    kinds = [o["kind"] for o in objs]
    assert kinds.count("Topology") == 1 and kinds[0] == "Topology"
    name = objs[0]["metadata"]["name"]
    flavors = {o["metadata"]["name"]: o["spec"] for o in objs if o["kind"] == "ResourceFlavor"}
    assert len(flavors) == len(cluster.node_pools)  # one flavor per pool
    assert flavors.pop("gpufleet-cpu-pool").get("topologyName") is None
    assert {spec["topologyName"] for spec in flavors.values()} == {name}
    # the Topology's CRD is in the pinned release, applied in an earlier group
    crds = [o["metadata"]["name"] for o in groups["kueue-controller"].objects]
    assert "topologies.kueue.x-k8s.io" in crds


def test_a_cluster_queue_over_64_flavors_is_refused(monkeypatch, gke_ref: PoolRef):
    import gpufleet.manifests.addons.kueue as kueue

    real = kueue.render_template_all

    def many_flavors(template, **context):
        return real(template, **{**context, "flavors": [f"f{i}" for i in range(65)]})

    monkeypatch.setattr(kueue, "render_template_all", many_flavors)
    with pytest.raises(CatalogError, match="would hold 65 flavors .* at most 64"):
        render_kueue_objects(gke_ref)


def _asks(obj: dict) -> list[dict]:
    return [
        {k: v for k, v in template["metadata"]["annotations"].items() if "topology" in k}
        for _, _, template in workload_pod_templates(obj)
    ]


def test_a_training_job_asks_for_a_topology_by_its_size(ref: PoolRef):
    topology = pool_topology(ref.cluster, ref.pool)
    free = [Place("b1", "sb1")] * 4 + [Place("b1", "sb2")] * 2 + [Place("b2", "sb1")] * 3
    cases = {
        4: {REQUIRED_TOPOLOGY: topology.subblock},  # fits one sub-block's free nodes
        5: {REQUIRED_TOPOLOGY: topology.block},  # fits one block's
        7: {PREFERRED_TOPOLOGY: topology.block},  # fits no block: one preferred
    }
    pool = ref.pool.model_copy(update={"nodes": 9})
    big = PoolRef(region=ref.region, cluster=ref.cluster, pool=pool)
    for nodes, expected in cases.items():
        obj = render_training_job(big, training_spec(nodes=nodes), free)
        assert _asks(obj) == [expected], nodes
        validate_manifest(obj)


def test_a_training_job_on_a_pool_without_topology_asks_for_none(ref: PoolRef):
    obj = render_training_job(without_topology(ref), training_spec(), [Place("b1", "sb1")] * 4)
    assert _asks(obj) == [{}]
