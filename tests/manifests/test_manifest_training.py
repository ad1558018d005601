"""Training JobSets: gang-admitted by Kueue, pinned to the pool, plumbed with NCCL_NET pinned
and NCCL's INFO log streamed by the sidecar, Lustre mounted, the request checked."""

from __future__ import annotations

import pytest

from gpufleet.domain import workloads as w
from gpufleet.domain.fleet import PoolRef
from gpufleet.domain.plumbing import NCCL_LOG_CONTAINER, NCCL_NET_NAMES, inspect_pod
from gpufleet.manifests.labels import pvc_name
from gpufleet.manifests.training import TRAINER_CONTAINER, render_training_job
from tests.manifests.manifest_helpers import (
    env_of,
    native_pool_label,
    nccl_log_problems,
    training_spec,
)
from tests.support.schemas import validate_manifest


def test_training_job_is_gang_admitted_pinned_and_plumbed(ref: PoolRef) -> None:
    spec = training_spec()
    obj = render_training_job(ref, spec)
    validate_manifest(obj)
    assert obj["metadata"]["name"] == "qwen-ft" and obj["metadata"]["namespace"] == "ml-team"
    assert obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == ref.pool.queue_name
    assert obj["spec"]["suspend"] is True  # Kueue unsuspends on admission
    ((group, count, template),) = w.workload_pod_templates(obj)
    assert (group, count) == ("workers", 2)
    job_spec = obj["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert job_spec["parallelism"] == job_spec["completions"] == 2
    assert job_spec["completionMode"] == "Indexed"
    fabric = inspect_pod(ref.cluster, ref.pool, template)
    assert fabric.rdma_attached and fabric.missing == ()
    assert fabric.pinned_net == NCCL_NET_NAMES[ref.pool.transport]
    pod = template["spec"]
    assert pod["nodeSelector"] == {native_pool_label(ref): ref.pool.name}
    assert pod["priorityClassName"] == "training-high"
    main = pod["containers"][0]
    assert main["image"] == spec.image and main["command"] == spec.command
    sidecar = [c for c in pod["initContainers"] if c["name"] == NCCL_LOG_CONTAINER]
    assert sidecar and sidecar[0]["restartPolicy"] == "Always"


def test_training_pods_log_nccl_info_through_the_sidecar(ref: PoolRef) -> None:
    """The launch confirms the transport from NCCL's INFO log (``NCCL INFO Using network``),
    which exists only if the trainer sets NCCL_DEBUG=INFO with a debug file the nccl-log
    sidecar streams; a job without them could never be confirmed on its fabric."""
    obj = render_training_job(ref, training_spec())
    for _, _, template in w.workload_pod_templates(obj):
        main = template["spec"]["containers"][0]
        assert main["name"] == TRAINER_CONTAINER  # the container NCCL runs in is the plumbed one
        env = env_of(main)
        assert env["NCCL_DEBUG"]["value"] == "INFO"
        assert env["NCCL_DEBUG_FILE"]["value"]
        inits = template["spec"]["initContainers"]
        assert [c["name"] for c in inits].count(NCCL_LOG_CONTAINER) == 1
        assert nccl_log_problems(template, TRAINER_CONTAINER) == []


def test_training_mounts_the_lustre_pvc_at_the_job_directory(ref: PoolRef) -> None:
    """The namespace's volume is rooted at its own directory (onboarding's PV): the job gets
    ``subPath: <job>`` below it, so two namespaces never share a path."""
    obj = render_training_job(ref, training_spec())
    ((_, _, template),) = w.workload_pod_templates(obj)
    fs = ref.filesystem
    volumes = {v["name"]: v for v in template["spec"]["volumes"]}
    main = template["spec"]["containers"][0]
    mount = next(mt for mt in main["volumeMounts"] if mt["mountPath"] == fs.mount_path)
    assert mount["subPath"] == "qwen-ft"
    assert volumes[mount["name"]]["persistentVolumeClaim"]["claimName"] == pvc_name(fs)


def test_training_env_has_rendezvous_and_user_env(ref: PoolRef) -> None:
    obj = render_training_job(ref, training_spec(nodes=2, gpus_per_node=4))
    ((_, _, template),) = w.workload_pod_templates(obj)
    main = template["spec"]["containers"][0]
    env = env_of(main)
    assert env["MASTER_ADDR"]["value"] == "qwen-ft-workers-0-0.qwen-ft"
    assert env["MASTER_PORT"]["value"] == "29500"
    assert env["NNODES"]["value"] == "2"
    assert env["GPUS_PER_NODE"]["value"] == "4"
    assert env["NODE_RANK"]["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    )
    assert env["HF_HOME"]["value"] == "/mnt/cache"
    assert main["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert main["resources"]["requests"]["nvidia.com/gpu"] == "4"
    assert len(env) == len(main["env"])  # no name twice


@pytest.mark.parametrize(
    "key", ["NCCL_NET", "NCCL_DEBUG", "NCCL_DEBUG_FILE", "LD_LIBRARY_PATH", "FI_PROVIDER"]
)
def test_user_env_may_not_override_platform_keys(ref: PoolRef, key: str) -> None:
    with pytest.raises(ValueError, match=rf"env {key} is platform-owned"):
        render_training_job(ref, training_spec(env={"OK": "1", key: "Socket"}))


def test_user_env_may_not_override_pool_tuning_or_rendezvous(gke_ref: PoolRef) -> None:
    with pytest.raises(ValueError, match="env NCCL_IB_TC is platform-owned"):
        render_training_job(gke_ref, training_spec(env={"NCCL_IB_TC": "0"}))
    with pytest.raises(ValueError, match="env MASTER_ADDR is set by the platform"):
        render_training_job(gke_ref, training_spec(env={"MASTER_ADDR": "10.0.0.1"}))


def test_training_input_is_validated_with_every_problem_listed(gke_ref: PoolRef) -> None:
    pool = gke_ref.pool
    bad = training_spec(
        name="a" * 41,
        namespace="ML_Team",
        nodes=pool.nodes + 1,
        gpus_per_node=pool.gpu.count + 1,
        command=[],
    )
    with pytest.raises(ValueError) as err:
        render_training_job(gke_ref, bad)
    text = str(err.value)
    assert "is 41 characters; at most 40" in text
    assert "namespace 'ML_Team'" in text
    assert f"nodes {pool.nodes + 1} exceeds" in text
    assert f"gpus_per_node {pool.gpu.count + 1} exceeds" in text
    assert "command must be a non-empty list" in text
    with pytest.raises(ValueError, match="DNS-1035"):
        render_training_job(gke_ref, training_spec(name="9lives"))
    with pytest.raises(ValueError, match="nodes must be a positive integer"):
        render_training_job(gke_ref, training_spec(nodes=0))


def test_a_training_job_keeps_off_the_nodes_it_is_told_to_avoid(ref: PoolRef) -> None:
    """``avoid``: every pod is kept off the named nodes by a required hostname ``NotIn`` (the
    schema holds), added to each term of the pod's own node affinity, none without."""
    obj = render_training_job(ref, training_spec(), avoid=["n3", "n1", "n3"])
    validate_manifest(obj)
    ((_, _, template),) = w.workload_pod_templates(obj)
    assert w.avoided_nodes(template) == {"n1", "n3"}
    required = template["spec"]["affinity"]["nodeAffinity"]
    terms = required["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    expr = {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["n1", "n3"]}
    assert terms == [{"matchExpressions": [expr]}]
    assert w.pinned_nodes(template) is None  # kept off some, pinned to none
    plain = render_training_job(ref, training_spec())
    ((_, _, template),) = w.workload_pod_templates(plain)
    assert w.avoided_nodes(template) == set()
    assert "nodeAffinity" not in template["spec"]["affinity"]
    pin = {"key": "kubernetes.io/hostname", "operator": "In", "values": ["a", "b"]}
    terms = [{"matchExpressions": [pin]}, {"matchFields": []}]
    required = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
    w.avoid_nodes({"spec": {"affinity": {"nodeAffinity": required}}}, ["b"])
    for term in terms:  # ANDed into every term (the terms are alternatives)
        assert term["matchExpressions"][-1] == {**pin, "operator": "NotIn", "values": ["b"]}
