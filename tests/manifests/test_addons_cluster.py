"""Every add-on region onboarding applies, for GKE- and EKS-shaped clusters (sim catalog and the
real-provider examples): each object validates against its schema, groups come in apply order
with the controllers first, everything carries the managed-by label, images are pinned, and
each provider gets its own node add-ons."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from gpufleet.config.addons import ADDONS_DIR_ENV, controller_releases, load_controller_releases
from gpufleet.config.catalog import load_catalog
from gpufleet.domain.fleet import Cluster
from gpufleet.domain.plumbing import gke_interfaces
from gpufleet.domain.workloads import UNVALIDATED_KEY
from gpufleet.manifests.addons import (
    AddonGroup,
    LustreVolumeSource,
    render_cluster_addons,
    render_gke_networks,
)
from gpufleet.manifests.labels import MANAGED_BY, MANAGED_BY_LABEL, VALIDATION_NAMESPACE
from tests.support.schemas import manifest_problems, validate_manifest

ROOT = Path(__file__).resolve().parents[2]
CLUSTERS = {
    "sim-gke": ("include/fleet", "a3u-sim"),
    "sim-eks": ("include/fleet", "p5-sim"),
    "example-gke": ("include/fleet-examples", "train-usc1"),
    "example-eks": ("include/fleet-examples", "train-use1"),
}


def load_cluster(key: str) -> Cluster:
    folder, name = CLUSTERS[key]
    return load_catalog(ROOT / folder).cluster(name)


def sources(cluster: Cluster) -> dict[str, LustreVolumeSource]:
    if cluster.shape == "gke":
        src = LustreVolumeSource("my-project/us-central1-b/lustre-1", "10.90.1.4", "lfs1")
    else:
        src = LustreVolumeSource(
            "fs-0123456789abcdef0", "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com", "abcdefgh"
        )
    return {fs.name: src for fs in cluster.filesystems}


@pytest.fixture(scope="module")
def controllers() -> dict:
    import os

    old = os.environ.get(ADDONS_DIR_ENV)
    os.environ[ADDONS_DIR_ENV] = str(ROOT / "include/addons")
    try:
        return load_controller_releases()
    finally:
        if old is None:
            os.environ.pop(ADDONS_DIR_ENV)
        else:
            os.environ[ADDONS_DIR_ENV] = old


def render(cluster: Cluster, controllers: dict, version: str = "1.36") -> list[AddonGroup]:
    return render_cluster_addons(
        cluster, server_version=version, lustre=sources(cluster), controllers=controllers
    )


def by_group(groups: list[AddonGroup]) -> dict[str, AddonGroup]:
    return {g.name: g for g in groups}


@pytest.mark.parametrize("version", ["1.33", "1.34", "1.36"])
@pytest.mark.parametrize("key", sorted(CLUSTERS))
def test_every_rendered_addon_validates(key: str, version: str, controllers: dict) -> None:
    cluster = load_cluster(key)
    objects = [o for g in render(cluster, controllers, version) for o in g.objects]
    problems = {
        f"{o['kind']} {o['metadata']['name']}": manifest_problems(o)
        for o in objects
        if manifest_problems(o)
    }
    assert problems == {}
    assert all(o["metadata"]["labels"][MANAGED_BY_LABEL] == MANAGED_BY for o in objects)
    kinds = {o["kind"] for o in objects}
    assert {"CustomResourceDefinition", "Deployment", "ResourceFlavor", "LocalQueue"} <= kinds


@pytest.mark.parametrize("key", sorted(CLUSTERS))
def test_groups_come_in_apply_order(key: str, controllers: dict) -> None:
    cluster = load_cluster(key)
    names = [g.name for g in render(cluster, controllers)]
    node = (
        ["gke-networks", "nccl-gib-installer"]
        if cluster.shape == "gke"
        else ["nvidia-device-plugin", "efa-device-plugin", "fsx-csi-driver"]
    )
    assert names == [
        "namespaces",
        "jobset-controller",
        "kueue-controller",
        *node,
        "image-prepull",
        "kueue-queues",
        "lustre-root",
        "lustre-volumes",
        "admission-plumbing",
    ]
    groups = by_group(render(cluster, controllers))
    # inside a release: the namespace, then the CRDs, then what runs
    for name in ("jobset-controller", "kueue-controller"):
        kinds = [o["kind"] for o in groups[name].objects]
        first = kinds.index("Deployment")
        assert kinds[0] == "Namespace" and "CustomResourceDefinition" not in kinds[first:]
    namespaces = [o["metadata"]["name"] for o in groups["namespaces"].objects]
    assert namespaces == [*cluster.namespaces, VALIDATION_NAMESPACE]


@pytest.mark.parametrize("key", sorted(CLUSTERS))
def test_controllers_run_the_pinned_images(key: str, controllers: dict) -> None:
    groups = by_group(render(load_cluster(key), controllers))
    for name, release in controller_releases().items():
        crds = [
            o
            for o in groups[f"{name}-controller"].objects
            if o["kind"] == "CustomResourceDefinition"
        ]
        served = {f"{c['spec']['group']}/{v['name']}" for c in crds for v in c["spec"]["versions"]}
        assert set(release.api_versions) <= served
        (deploy,) = [o for o in groups[f"{name}-controller"].objects if o["kind"] == "Deployment"]
        images = [c["image"] for c in deploy["spec"]["template"]["spec"]["containers"]]
        assert images == [release.image]
        assert release.image.endswith(f":{release.version}")


@pytest.mark.parametrize("key", sorted(CLUSTERS))
def test_every_image_is_pinned(key: str, controllers: dict) -> None:
    images = []
    for group in render(load_cluster(key), controllers):
        for obj in group.objects:
            spec = obj.get("spec") or {}
            pod = ((spec.get("template") or {}).get("spec")) or {}
            for c in [*(pod.get("initContainers") or ()), *(pod.get("containers") or ())]:
                images.append(c["image"])
    assert images
    for image in images:
        name = image.split("@")[0].rsplit("/", 1)[-1]
        assert ":" in name and not name.endswith(":latest"), image


@pytest.mark.parametrize("key", ["sim-gke", "example-gke"])
def test_gke_networks_cover_gvnic_and_every_rdma_nic(key: str) -> None:
    cluster = load_cluster(key)
    objs = render_gke_networks(cluster)
    params = {o["metadata"]["name"]: o["spec"] for o in objs if o["kind"] == "GKENetworkParamSet"}
    gvnic = cluster.network.gvnic
    assert params.pop(gvnic.name) == {
        "vpc": gvnic.name,
        "vpcSubnet": gvnic.name,
        "deviceMode": "NetDevice",
    }
    assert {p["deviceMode"] for p in params.values()} == {"RDMA"}
    # every network a pod attaches exists (the gVNIC one whether or not pods attach it yet)
    attached = {nic["network"] for nic in gke_interfaces(cluster)} - {"default", gvnic.name}
    assert set(params) == attached
    networks = {o["metadata"]["name"] for o in objs if o["kind"] == "Network"}
    assert networks == attached | {gvnic.name}


@pytest.mark.parametrize("key", ["sim-gke", "example-gke"])
def test_gib_installer_runs_on_the_gib_pools(key: str, controllers: dict) -> None:
    cluster = load_cluster(key)
    (ds,) = by_group(render(cluster, controllers))["nccl-gib-installer"].objects
    pod = ds["spec"]["template"]["spec"]
    (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    (expr,) = term["matchExpressions"]
    assert expr["key"] == "cloud.google.com/gke-nodepool"
    assert expr["values"] == [p.name for p in cluster.node_pools if p.transport == "gib"]
    hosts = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]}
    assert hosts["gib"] == "/home/kubernetes/bin/gib"  # where the pods' plumbing mounts it from
    installer = pod["initContainers"][1]
    assert installer["name"] == "nccl-rdma-installer"
    assert "nccl-plugin-gib:" in installer["image"]
    assert pod["tolerations"] == [{"operator": "Exists"}]
    martians = pod["initContainers"][0]["args"][1]
    assert martians.count("log_martians=0") == cluster.network.rdma_nics


@pytest.mark.parametrize("key", sorted(CLUSTERS))
def test_validation_images_are_pre_pulled_on_every_gpu_pool(key: str, controllers: dict) -> None:
    """Issue 35: the nightly's images (nccl-tests for the shape, DCGM, the log sidecar, fio
    with a filesystem) are pulled by a DaemonSet that holds no GPU, on every GPU pool, every
    taint tolerated (quarantined and new nodes are validated too)."""
    from gpufleet.manifests.gpu_health import DEFAULT_DCGM_IMAGE
    from gpufleet.manifests.nccl_validation import nccl_tests_image
    from gpufleet.manifests.storage_validation import DEFAULT_FIO_IMAGE

    cluster = load_cluster(key)
    (ds,) = by_group(render(cluster, controllers))["image-prepull"].objects
    assert ds["kind"] == "DaemonSet" and ds["metadata"]["namespace"] == VALIDATION_NAMESPACE
    pod = ds["spec"]["template"]["spec"]
    images = [c["image"] for c in pod["initContainers"]]
    assert nccl_tests_image(cluster.shape) in images and DEFAULT_DCGM_IMAGE in images
    assert (DEFAULT_FIO_IMAGE in images) == bool(cluster.filesystems)
    assert all(c["command"] == ["true"] for c in pod["initContainers"])
    for c in [*pod["initContainers"], *pod["containers"]]:
        assert "nvidia.com/gpu" not in str(c.get("resources"))
    (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert term["matchExpressions"][0]["values"] == [p.name for p in cluster.node_pools]
    assert pod["tolerations"] == [{"operator": "Exists"}]


@pytest.mark.parametrize("key", ["sim-eks", "example-eks"])
def test_eks_node_addons(key: str, controllers: dict) -> None:
    cluster = load_cluster(key)
    groups = by_group(render(cluster, controllers))
    (efa,) = groups["efa-device-plugin"].objects
    pod = efa["spec"]["template"]["spec"]
    (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert term["matchExpressions"][0]["values"] == sorted(
        {p.machine_type for p in cluster.node_pools}
    )
    # new nodes are tainted until validated: the plugins must run there to advertise devices
    for (ds,) in (groups["efa-device-plugin"].objects, groups["nvidia-device-plugin"].objects):
        keys = {t.get("key") for t in ds["spec"]["template"]["spec"]["tolerations"]}
        assert UNVALIDATED_KEY in keys and "nvidia.com/gpu" in keys
    fsx = {o["kind"]: o for o in groups["fsx-csi-driver"].objects}
    assert fsx["CSIDriver"]["metadata"]["name"] == "fsx.csi.aws.com"
    assert fsx["CSIDriver"]["spec"]["attachRequired"] is False
    sas = {
        o["metadata"]["name"]
        for o in groups["fsx-csi-driver"].objects
        if o["kind"] == "ServiceAccount"
    }
    assert fsx["Deployment"]["spec"]["template"]["spec"]["serviceAccountName"] in sas
    assert fsx["DaemonSet"]["spec"]["template"]["spec"]["serviceAccountName"] in sas
    bound = {
        s["name"]
        for o in groups["fsx-csi-driver"].objects
        if o["kind"] == "ClusterRoleBinding"
        for s in o["subjects"]
    }
    assert bound == sas


@pytest.mark.parametrize("key", sorted(CLUSTERS))
def test_local_queues_in_every_training_namespace(key: str, controllers: dict) -> None:
    cluster = load_cluster(key)
    objs = by_group(render(cluster, controllers))["kueue-queues"].objects
    for pool in cluster.node_pools:
        lqs = [
            o
            for o in objs
            if o["kind"] == "LocalQueue"
            and o["metadata"]["labels"]["gpufleet.io/pool"] == pool.name
        ]
        assert sorted(o["metadata"]["namespace"] for o in lqs) == sorted(cluster.namespaces)
        assert {o["metadata"]["name"] for o in lqs} == {pool.queue_name}
        assert {o["spec"]["clusterQueue"] for o in lqs} == {f"gpufleet-{pool.name}"}


def test_no_namespaces_means_no_local_queues_and_a_note(controllers: dict) -> None:
    cluster = load_cluster("sim-gke").model_copy(
        update={"namespaces": (), "priority_classes": {}}  # classes name training namespaces
    )
    groups = by_group(render(cluster, controllers))
    assert not [o for o in groups["kueue-queues"].objects if o["kind"] == "LocalQueue"]
    assert "no training namespaces" in groups["kueue-queues"].note
    assert groups["admission-plumbing"].objects == []
    assert "no training namespaces" in groups["admission-plumbing"].note


def test_old_server_gets_no_policy_and_a_reason(controllers: dict) -> None:
    group = by_group(render(load_cluster("sim-gke"), controllers, "v1.33.5-gke.1000"))[
        "admission-plumbing"
    ]
    assert group.objects == []
    assert "1.33" in group.note and "launch" in group.note


def test_missing_inputs_are_named(controllers: dict) -> None:
    cluster = load_cluster("sim-eks")
    with pytest.raises(ValueError, match="fsx-p5"):
        render_cluster_addons(cluster, server_version="1.36", lustre={}, controllers=controllers)
    with pytest.raises(ValueError, match="kueue"):
        render_cluster_addons(
            cluster,
            server_version="1.36",
            lustre=sources(cluster),
            controllers={"jobset": controllers["jobset"]},
        )


def test_the_validator_bites_on_addons(controllers: dict) -> None:
    groups = by_group(render(load_cluster("sim-gke"), controllers))
    policy = copy.deepcopy(groups["admission-plumbing"].objects[0])
    policy["spec"]["mutation"] = policy["spec"].pop("mutations")
    with pytest.raises(ValueError, match="mutation"):
        validate_manifest(policy)
    ds = copy.deepcopy(groups["nccl-gib-installer"].objects[0])
    ds["spec"]["template"]["spec"]["hostNetwrok"] = True
    with pytest.raises(ValueError, match="hostNetwrok"):
        validate_manifest(ds)
    pv = copy.deepcopy(groups["lustre-volumes"].objects[0])
    pv["metadata"]["namespace"] = "ml-demo"
    with pytest.raises(ValueError, match="cluster-scoped"):
        validate_manifest(pv)


def test_controllers_load_from_a_source_folder(controllers: dict) -> None:
    """Without loaded releases the entry point reads them from ``controllers_source``."""
    cluster = load_cluster("sim-eks")
    groups = render_cluster_addons(
        cluster,
        server_version="1.36",
        lustre=sources(cluster),
        controllers_source=str(ROOT / "include/addons"),
    )
    assert groups == render(cluster, controllers)
