"""The nightly storage check's Job: one fio pod per chosen node on the pool's Lustre PVC."""

from __future__ import annotations

import pytest

from gpufleet.domain import workloads as w
from gpufleet.domain.fleet import PoolRef
from gpufleet.manifests.labels import pvc_name, run_label
from gpufleet.manifests.storage_validation import render_storage_validation
from tests.manifests.manifest_helpers import RUN_ID, native_pool_label, nodes_of
from tests.support.schemas import validate_manifest


def test_storage_validation_pins_fio_pods_to_nodes_on_the_pool_pvc(ref: PoolRef) -> None:
    nodes = nodes_of(ref, 3)
    obj = render_storage_validation(ref, nodes, RUN_ID)
    validate_manifest(obj)
    assert (obj["apiVersion"], obj["kind"]) == ("batch/v1", "Job")
    spec = obj["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["parallelism"] == spec["completions"] == 3
    ((group, count, template),) = w.workload_pod_templates(obj)
    assert (group, count) == (obj["metadata"]["name"], 3)
    assert w.pinned_nodes(template) == nodes
    pod = template["spec"]
    assert pod["nodeSelector"] == {native_pool_label(ref): ref.pool.name}
    anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["topologyKey"] == "kubernetes.io/hostname"
    fs = ref.filesystem
    assert pvc_name(fs) == f"{fs.name}-pvc" == pvc_name(fs.name)
    (volume,) = pod["volumes"]
    assert volume["persistentVolumeClaim"]["claimName"] == pvc_name(fs)
    (mount,) = pod["containers"][0]["volumeMounts"]
    assert (mount["name"], mount["mountPath"]) == (volume["name"], fs.mount_path)
    assert "subPath" not in mount
    script = pod["containers"][0]["command"][2]
    workdir = f"{fs.mount_path}/.gpufleet-validation/{run_label(RUN_ID)}/${{GPUFLEET_INDEX}}"
    assert f'dir="{workdir}"' in script
    assert "trap 'rm -rf \"${dir}\"' EXIT" in script
    assert "--output-format=json" in script and "--direct=1" in script and "--bs=1M" in script
    assert f"--numjobs={ref.pool.gpu.count}" in script
    assert script.index("--rw=write") < script.index("--rw=read") < script.index("--stonewall")


def test_storage_validation_refuses_a_pool_without_filesystem(gke_ref: PoolRef) -> None:
    pool = gke_ref.pool.model_copy(update={"filesystem": None})
    ref = PoolRef(region=gke_ref.region, cluster=gke_ref.cluster, pool=pool)
    with pytest.raises(ValueError, match="no filesystem"):
        render_storage_validation(ref, ["a"], RUN_ID)
    with pytest.raises(ValueError, match="more than once"):
        render_storage_validation(gke_ref, ["a", "a"], RUN_ID)
