"""The nightly storage check's Job: one fio pod per chosen node on the pool's Lustre PVC."""

from __future__ import annotations

import pytest

from gpufleet.domain import workloads as w
from gpufleet.domain.fleet import PoolRef
from gpufleet.manifests.labels import pvc_name, run_label
from gpufleet.manifests.storage_validation import (
    DEFAULT_FIO_IMAGE,
    FIO_CONTAINER,
    STORAGE_DEADLINE_SECONDS,
    PoolCheck,
    render_storage_validation,
)
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


def test_the_fio_container_is_unchanged_by_the_shared_script(ref: PoolRef) -> None:
    """The script as it was rendered before it moved into the shared macro
    (include/manifests/_fio_script.j2, which the NCCL pair pods use too): byte for byte."""
    obj = render_storage_validation(ref, ["node-a"], RUN_ID, size_gib_per_node=3)
    ((_, _, template),) = w.workload_pod_templates(obj)
    (container,) = template["spec"]["containers"]
    mount, gpus = ref.filesystem.mount_path, ref.pool.gpu.count
    size = -(-3 * 1024 // gpus)
    assert container["command"] == [
        "sh",
        "-c",
        "# gpufleet Lustre check: fio sequential write, then read of the same files; JSON on "
        "stdout.\n"
        "set -u\n"
        f'dir="{mount}/.gpufleet-validation/{run_label(RUN_ID)}/${{GPUFLEET_INDEX}}"\n'
        'mkdir -p "${dir}" || { echo "[gpufleet] cannot create ${dir} on the Lustre mount" >&2; '
        "exit 1; }\n"
        "trap 'rm -rf \"${dir}\"' EXIT\n"
        'echo "[gpufleet] fio on $(hostname) in ${dir}" >&2\n'
        "fio --output-format=json \\\n"
        "  --directory=\"${dir}\" --filename_format='gpufleet.$jobnum.$filenum' \\\n"
        "  --ioengine=libaio --direct=1 --bs=1M --iodepth=16 \\\n"
        f"  --numjobs={gpus} --size={size}M --fallocate=none \\\n"
        "  --group_reporting --runtime=600 \\\n"
        "  --name=write --rw=write --end_fsync=1 \\\n"
        "  --name=read --rw=read --stonewall",
    ]
    assert container["name"] == FIO_CONTAINER and container["image"] == DEFAULT_FIO_IMAGE
    assert container["resources"] == {
        "requests": {"cpu": "4", "memory": "4Gi"},
        "limits": {"memory": "4Gi"},
    }
    assert obj["spec"]["activeDeadlineSeconds"] == STORAGE_DEADLINE_SECONDS == 1800


def test_the_shared_script_is_not_rendered_on_its_own() -> None:
    """``_fio_script.j2`` holds a macro and settings only: rendering it gives nothing."""
    from gpufleet.manifests.templates import _render_text

    assert _render_text("_fio_script.j2").strip() == ""


def test_pool_check_is_a_frozen_record() -> None:
    check = PoolCheck(pair=1, size_gib_per_node=4, runtime_seconds=60)
    assert (check.pair, check.size_gib_per_node, check.runtime_seconds) == (1, 4, 60)
    assert PoolCheck(0, 4).runtime_seconds is None
    with pytest.raises(AttributeError):
        check.pair = 2  # type: ignore[misc]
