"""The nightly fabric check's JobSet: pairs pinned to their nodes, the fabric plumbed, NCCL_NET
left for NCCL to choose, the launcher's script, and the requests it refuses."""

from __future__ import annotations

import copy
import re

import pytest

from gpufleet.domain import workloads as w
from gpufleet.domain.fleet import PoolRef
from gpufleet.domain.plumbing import NCCL_LOG_CONTAINER, inspect_pod
from gpufleet.manifests.labels import QUEUE_NAME_LABEL
from gpufleet.manifests.nccl_validation import (
    DEFAULT_NCCL_TESTS_IMAGES,
    NCCL_CONTAINER,
    NCCL_JSON_MARKER,
    render_nccl_validation,
)
from tests.manifests.manifest_helpers import (
    RUN_ID,
    env_of,
    native_pool_label,
    nccl_log_problems,
    pairs_of,
)
from tests.support.schemas import validate_manifest


def test_nccl_validation_is_a_valid_jobset(ref: PoolRef) -> None:
    obj = render_nccl_validation(ref, pairs_of(ref, 2), RUN_ID)
    validate_manifest(obj)
    assert obj["apiVersion"] == "jobset.x-k8s.io/v1alpha2" and obj["kind"] == "JobSet"
    spec = obj["spec"]
    assert spec["suspend"] is False
    assert spec["network"]["enableDNSHostnames"] is True
    assert spec["failurePolicy"] == {"maxRestarts": 0}
    assert spec["successPolicy"] == {"operator": "All"}
    assert spec["ttlSecondsAfterFinished"] > 0
    # validation runs on idle nodes directly, not through Kueue
    assert QUEUE_NAME_LABEL not in obj["metadata"]["labels"]


def test_nccl_pods_get_the_fabric_but_nccl_net_is_not_pinned(ref: PoolRef) -> None:
    obj = render_nccl_validation(ref, pairs_of(ref, 2), RUN_ID)
    for _, _, template in w.workload_pod_templates(obj):
        fabric = inspect_pod(ref.cluster, ref.pool, template)
        assert fabric.rdma_attached, fabric.missing
        assert fabric.missing == ()
        assert fabric.pinned_net is None
        main = template["spec"]["containers"][0]
        assert main["name"] == NCCL_CONTAINER
        assert "NCCL_NET" not in env_of(main)
        assert env_of(main)["NCCL_DEBUG"]["value"] == "INFO"


def test_nccl_devices_are_requested_as_limits_equal_requests(ref: PoolRef) -> None:
    obj = render_nccl_validation(ref, pairs_of(ref, 1), RUN_ID)
    ((_, _, template),) = w.workload_pod_templates(obj)
    resources = template["spec"]["containers"][0]["resources"]
    assert resources["limits"] == resources["requests"]
    assert resources["limits"]["nvidia.com/gpu"] == str(ref.pool.gpu.count)
    if ref.cluster.shape == "eks":
        assert resources["limits"]["vpc.amazonaws.com/efa"] == str(ref.cluster.network.rdma_nics)
        assert resources["limits"]["hugepages-2Mi"] == "5120Mi"
    else:
        annotations = template["metadata"]["annotations"]
        assert "networking.gke.io/interfaces" in annotations


def test_each_pair_is_pinned_to_its_two_nodes_and_only_those(ref: PoolRef) -> None:
    pairs = pairs_of(ref, 3)
    obj = render_nccl_validation(ref, pairs, RUN_ID)
    groups = w.workload_pod_templates(obj)
    assert [g for g, _, _ in groups] == ["pair-0", "pair-1", "pair-2"]
    for i, (_, count, template) in enumerate(groups):
        assert count == 2
        spec = template["spec"]
        assert w.pinned_nodes(template) == list(pairs[i])
        assert w.pair_nodes(template) == pairs[i]
        assert template["metadata"]["annotations"]["gpufleet.io/pair-nodes"] == ",".join(pairs[i])
        assert template["metadata"]["labels"]["gpufleet.io/pair"] == str(i)
        assert spec["nodeSelector"] == {native_pool_label(ref): ref.pool.name}
        anti = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert anti[0]["topologyKey"] == "kubernetes.io/hostname"
        assert anti[0]["labelSelector"]["matchLabels"]["gpufleet.io/pair"] == str(i)
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec[
            "tolerations"
        ]
        # other pairs' nodes appear nowhere in this pair's pod template
        others = {n for j, pair in enumerate(pairs) if j != i for n in pair}
        text = repr(template)
        assert not any(f"'{n}'" in text or f"{n}," in text for n in others)
        job = obj["spec"]["replicatedJobs"][i]
        assert job["replicas"] == 1
        job_spec = job["template"]["spec"]
        assert (job_spec["parallelism"], job_spec["completions"]) == (2, 2)
        assert job_spec["completionMode"] == "Indexed"
        assert job_spec["backoffLimit"] == 0


def test_nccl_launcher_runs_the_collective_over_the_jobset_dns(ref: PoolRef) -> None:
    obj = render_nccl_validation(
        ref, pairs_of(ref, 2), RUN_ID, collective="all_gather", min_bytes=1024, max_bytes=2**33
    )
    name = obj["metadata"]["name"]
    for i, (_, _, template) in enumerate(w.workload_pod_templates(obj)):
        main = template["spec"]["containers"][0]
        env = env_of(main)
        assert env["GPUFLEET_LAUNCHER"]["value"] == f"{name}-pair-{i}-0-0.{name}"
        assert env["GPUFLEET_WORKER"]["value"] == f"{name}-pair-{i}-0-1.{name}"
        assert env["GPUFLEET_GPUS_PER_NODE"]["value"] == str(ref.pool.gpu.count)
        assert env["GPUFLEET_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"] == (
            "metadata.annotations['batch.kubernetes.io/job-completion-index']"
        )
        # every NCCL/fabric variable the plumbing set is forwarded to the remote ranks
        exported = set(env["GPUFLEET_MPI_EXPORTS"]["value"].split())
        assert {"NCCL_DEBUG", "NCCL_DEBUG_FILE", "LD_LIBRARY_PATH"} <= exported
        assert main["command"][:2] == ["bash", "-c"]
        script = main["command"][2]
        assert "mpirun" in script and "np $(( 2 * GPUFLEET_GPUS_PER_NODE ))" in script
        assert 'bin="${GPUFLEET_TESTS_DIR}/all_gather_perf"' in script
        assert (
            '"${bin}" -b 1024 -e 8589934592 -f 2 -g 1 -c 1 -n 20 -w 5 -J /tmp/nccl.json' in script
        )
        assert f'echo "{NCCL_JSON_MARKER}"' in script
        assert "NCCL_NET" not in script


def test_nccl_log_sidecar_is_a_native_sidecar(ref: PoolRef) -> None:
    obj = render_nccl_validation(ref, pairs_of(ref, 1), RUN_ID)
    ((_, _, template),) = w.workload_pod_templates(obj)
    sidecars = [c for c in template["spec"]["initContainers"] if c["name"] == NCCL_LOG_CONTAINER]
    assert len(sidecars) == 1 and sidecars[0]["restartPolicy"] == "Always"
    # NCCL's INFO lines (the transport it picked) reach the log the DAG reads
    assert nccl_log_problems(template, NCCL_CONTAINER) == []
    volumes = {v["name"] for v in template["spec"]["volumes"]}
    assert {"nccl-logs", "gpufleet-ssh"} <= volumes


def test_nccl_default_image_follows_the_shape_and_can_be_overridden(ref: PoolRef) -> None:
    obj = render_nccl_validation(ref, pairs_of(ref, 1), RUN_ID)
    ((_, _, template),) = w.workload_pod_templates(obj)
    image = template["spec"]["containers"][0]["image"]
    assert image == DEFAULT_NCCL_TESTS_IMAGES[ref.cluster.shape]
    assert ":" in image.rsplit("/", 1)[1] and not image.endswith(":latest")  # pinned tag
    custom = render_nccl_validation(ref, pairs_of(ref, 1), RUN_ID, image="my/nccl:2")
    ((_, _, template),) = w.workload_pod_templates(custom)
    assert template["spec"]["containers"][0]["image"] == "my/nccl:2"


@pytest.mark.parametrize(
    "pairs, message",
    [
        ([], "empty"),
        ([("a", "a")], "itself"),
        ([("a", "b"), ("c", "a")], "already in pairs[0]"),
        ([("a", "b", "c")], "two node names"),
        ([("a", "Bad_Node")], "not a valid node name"),
    ],
)
def test_bad_pairs_are_refused(gke_ref: PoolRef, pairs, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        render_nccl_validation(gke_ref, pairs, RUN_ID)


def test_bad_nccl_parameters_are_refused(gke_ref: PoolRef) -> None:
    with pytest.raises(ValueError, match="collective"):
        render_nccl_validation(gke_ref, [("a", "b")], RUN_ID, collective="all_reduse")
    with pytest.raises(ValueError, match="min_bytes <= max_bytes"):
        render_nccl_validation(gke_ref, [("a", "b")], RUN_ID, min_bytes=2**20, max_bytes=8)


def test_read_back_helpers(gke_ref: PoolRef) -> None:
    assert w.pair_nodes({"metadata": {}}) is None
    assert w.pair_nodes({"metadata": {"annotations": {"gpufleet.io/pair-nodes": "a"}}}) is None
    assert w.pinned_nodes({"spec": {}}) is None
    with pytest.raises(ValueError, match="not a Job or JobSet"):
        w.workload_pod_templates({"kind": "Deployment", "spec": {}})
    obj = render_nccl_validation(gke_ref, [("a", "b")], RUN_ID)
    clone = copy.deepcopy(obj)
    clone["spec"]["replicatedJobs"][0]["replicas"] = 3
    assert w.workload_pod_templates(clone)[0][1] == 6
