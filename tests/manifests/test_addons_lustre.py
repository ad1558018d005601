"""Lustre per namespace: one instance, one static PV per training namespace at the namespace's
own directory, each bound both ways to that namespace's ReadWriteMany PVC; the root in the
validation namespace; a Job creates the directories first."""

from __future__ import annotations

import pytest

from gpufleet.domain.fleet import Cluster
from gpufleet.manifests.addons import (
    LustreVolumeSource,
    lustre_dirs_job_name,
    render_lustre_root,
    render_lustre_volumes,
)
from gpufleet.manifests.labels import VALIDATION_NAMESPACE, pvc_name
from tests.manifests.test_addons_cluster import load_cluster, sources
from tests.support.schemas import validate_manifest

KEYS = ["sim-gke", "sim-eks", "example-gke", "example-eks"]


def pairs(objs: list[dict]) -> list[tuple[dict, dict]]:
    pvs = {o["metadata"]["name"]: o for o in objs if o["kind"] == "PersistentVolume"}
    pvcs = [o for o in objs if o["kind"] == "PersistentVolumeClaim"]
    return [(pvs[c["spec"]["volumeName"]], c) for c in pvcs]


def volumes(cluster: Cluster) -> list[dict]:
    return render_lustre_volumes(cluster, sources(cluster), namespaces=cluster.namespaces)


@pytest.mark.parametrize("key", KEYS)
def test_each_namespace_binds_its_own_volume(key: str) -> None:
    cluster = load_cluster(key)
    objs = volumes(cluster)
    for obj in objs:
        validate_manifest(obj)
    bound = pairs(objs)
    assert len(bound) == len(objs) // 2 == len(cluster.namespaces) * len(cluster.filesystems)
    seen_handles = set()
    for pv, pvc in bound:
        ns = pvc["metadata"]["namespace"]
        # bound both ways: the PV reserves the claim, the claim names the volume
        assert pv["spec"]["claimRef"] == {"namespace": ns, "name": pvc["metadata"]["name"]}
        assert pvc["spec"]["volumeName"] == pv["metadata"]["name"]
        assert pv["spec"]["accessModes"] == pvc["spec"]["accessModes"] == ["ReadWriteMany"]
        assert pv["spec"]["storageClassName"] == pvc["spec"]["storageClassName"] == ""
        assert pv["spec"]["capacity"] == pvc["spec"]["resources"]["requests"]
        assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
        fs = cluster.filesystem(pv["metadata"]["labels"]["gpufleet.io/filesystem"])
        assert pvc["metadata"]["name"] == pvc_name(fs)  # what training and validation mount
        csi = pv["spec"]["csi"]
        attrs = csi["volumeAttributes"]
        source = sources(cluster)[fs.name]
        if cluster.shape == "gke":
            assert csi["driver"] == "lustre.csi.storage.gke.io"
            assert attrs == {
                "ip": source.endpoint,
                "filesystem": source.mount_name,
                "subPath": ns,
            }
        else:
            assert csi["driver"] == "fsx.csi.aws.com"
            assert attrs == {
                "dnsname": source.endpoint,
                "mountname": source.mount_name,
                "subdir": ns,
            }
        assert csi["volumeHandle"] == f"{source.handle}:{ns}"
        seen_handles.add(csi["volumeHandle"])
    # kubelet identifies a CSI volume by driver + handle: one handle per PV
    assert len(seen_handles) == len(bound)
    assert sorted({pvc["metadata"]["namespace"] for _, pvc in bound}) == sorted(cluster.namespaces)


@pytest.mark.parametrize("key", KEYS)
def test_directories_are_created_before_the_volumes_mount_them(key: str) -> None:
    cluster = load_cluster(key)
    objs = render_lustre_root(cluster, sources(cluster), namespaces=cluster.namespaces)
    for obj in objs:
        validate_manifest(obj)
    ((root_pv, root_pvc),) = pairs(objs)
    assert root_pvc["metadata"]["namespace"] == VALIDATION_NAMESPACE
    csi = root_pv["spec"]["csi"]
    assert "subPath" not in csi["volumeAttributes"] and "subdir" not in csi["volumeAttributes"]
    (job,) = [o for o in objs if o["kind"] == "Job"]
    fs = cluster.filesystems[0]
    assert job["metadata"]["name"] == lustre_dirs_job_name(fs)
    pod = job["spec"]["template"]["spec"]
    assert pod["volumes"] == [
        {"name": "lustre", "persistentVolumeClaim": {"claimName": root_pvc["metadata"]["name"]}}
    ]
    script = pod["containers"][0]["command"][-1]
    for ns in cluster.namespaces:
        assert f"mkdir -p /lustre/{ns} " in script
    # every directory a namespace volume mounts is one the Job creates
    for pv, _ in pairs(volumes(cluster)):
        attrs = pv["spec"]["csi"]["volumeAttributes"]
        assert f"/lustre/{attrs.get('subPath') or attrs.get('subdir')} " in script


def test_a_bad_source_is_refused() -> None:
    with pytest.raises(ValueError, match="endpoint"):
        LustreVolumeSource("fs-1", "", "abc")
    cluster = load_cluster("sim-gke")
    with pytest.raises(ValueError, match="lustre-a3u"):
        render_lustre_volumes(cluster, {}, namespaces=cluster.namespaces)
    with pytest.raises(ValueError, match="DNS-1123"):
        render_lustre_volumes(cluster, sources(cluster), namespaces=["Bad_NS"])


def test_a_lustre_nid_endpoint_becomes_the_address() -> None:
    cluster = load_cluster("sim-gke")
    src = LustreVolumeSource("p/us-central1-b/i", "10.90.1.4@tcp", "lfs1")
    pv = render_lustre_volumes(cluster, {"lustre-a3u": src}, namespaces=["ml-demo"])[0]
    assert pv["spec"]["csi"]["volumeAttributes"]["ip"] == "10.90.1.4"
