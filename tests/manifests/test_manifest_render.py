"""Rendered manifests: structure, pinning, plumbing and the rules the platform promises."""

from __future__ import annotations

import copy
import re

import pytest

from gpufleet.domain import workloads as w
from gpufleet.domain.fleet import PoolRef
from gpufleet.domain.plumbing import NCCL_LOG_CONTAINER, NCCL_NET_NAMES, gke_interfaces, inspect_pod
from gpufleet.manifests import render as m
from tests.support.schemas import validate_manifest

RUN_ID = "scheduled__2025-06-01T02:00:00+00:00"
DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


def nodes_of(ref: PoolRef, count: int) -> list[str]:
    return [f"{ref.pool.name}-node-{i}" for i in range(count)]


def pairs_of(ref: PoolRef, count: int) -> list[tuple[str, str]]:
    nodes = nodes_of(ref, 2 * count)
    return [(nodes[2 * i], nodes[2 * i + 1]) for i in range(count)]


def env_of(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container.get("env", [])}


def training_spec(**overrides) -> m.TrainingJobSpec:
    fields = dict(
        name="qwen-ft",
        namespace="ml-team",
        image="registry.example.com/qwen-ft:1.4",
        command=["torchrun", "train.py", "--fsdp"],
        nodes=2,
        gpus_per_node=8,
        priority_class="training-high",
        env={"HF_HOME": "/mnt/cache", "WANDB_MODE": "offline"},
        run_id="manual__2025-06-01T09:30:00+00:00",
    )
    fields.update(overrides)
    return m.TrainingJobSpec(**fields)


def native_pool_label(ref: PoolRef) -> str:
    return (
        "cloud.google.com/gke-nodepool"
        if ref.cluster.shape == "gke"
        else "eks.amazonaws.com/nodegroup"
    )


# --- nccl-tests pairs -------------------------------------------------------------------------


def test_nccl_validation_is_a_valid_jobset(ref: PoolRef) -> None:
    obj = m.render_nccl_validation(ref, pairs_of(ref, 2), RUN_ID)
    validate_manifest(obj)
    assert obj["apiVersion"] == "jobset.x-k8s.io/v1alpha2" and obj["kind"] == "JobSet"
    spec = obj["spec"]
    assert spec["suspend"] is False
    assert spec["network"]["enableDNSHostnames"] is True
    assert spec["failurePolicy"] == {"maxRestarts": 0}
    assert spec["successPolicy"] == {"operator": "All"}
    assert spec["ttlSecondsAfterFinished"] > 0
    # validation runs on idle nodes directly, not through Kueue
    assert m.QUEUE_NAME_LABEL not in obj["metadata"]["labels"]


def test_nccl_pods_get_the_fabric_but_nccl_net_is_not_pinned(ref: PoolRef) -> None:
    obj = m.render_nccl_validation(ref, pairs_of(ref, 2), RUN_ID)
    for _, _, template in w.workload_pod_templates(obj):
        fabric = inspect_pod(ref.cluster, ref.pool, template)
        assert fabric.rdma_attached, fabric.missing
        assert fabric.plugin_present, fabric.missing
        assert fabric.missing == ()
        assert fabric.pinned_net is None
        main = template["spec"]["containers"][0]
        assert main["name"] == m.NCCL_CONTAINER
        assert "NCCL_NET" not in env_of(main)
        assert env_of(main)["NCCL_DEBUG"]["value"] == "INFO"


def test_nccl_devices_are_requested_as_limits_equal_requests(ref: PoolRef) -> None:
    obj = m.render_nccl_validation(ref, pairs_of(ref, 1), RUN_ID)
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
    obj = m.render_nccl_validation(ref, pairs, RUN_ID)
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
    obj = m.render_nccl_validation(
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
        assert f'echo "{m.NCCL_JSON_MARKER}"' in script
        assert "NCCL_NET" not in script


def test_nccl_log_sidecar_is_a_native_sidecar(ref: PoolRef) -> None:
    obj = m.render_nccl_validation(ref, pairs_of(ref, 1), RUN_ID)
    ((_, _, template),) = w.workload_pod_templates(obj)
    sidecars = [c for c in template["spec"]["initContainers"] if c["name"] == NCCL_LOG_CONTAINER]
    assert len(sidecars) == 1 and sidecars[0]["restartPolicy"] == "Always"
    volumes = {v["name"] for v in template["spec"]["volumes"]}
    assert {"nccl-logs", "gpufleet-ssh"} <= volumes


def test_nccl_default_image_follows_the_shape_and_can_be_overridden(ref: PoolRef) -> None:
    obj = m.render_nccl_validation(ref, pairs_of(ref, 1), RUN_ID)
    ((_, _, template),) = w.workload_pod_templates(obj)
    image = template["spec"]["containers"][0]["image"]
    assert image == m.DEFAULT_NCCL_TESTS_IMAGES[ref.cluster.shape]
    assert ":" in image.rsplit("/", 1)[1] and not image.endswith(":latest")  # pinned tag
    custom = m.render_nccl_validation(ref, pairs_of(ref, 1), RUN_ID, image="my/nccl:2")
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
        m.render_nccl_validation(gke_ref, pairs, RUN_ID)


def test_bad_nccl_parameters_are_refused(gke_ref: PoolRef) -> None:
    with pytest.raises(ValueError, match="collective"):
        m.render_nccl_validation(gke_ref, [("a", "b")], RUN_ID, collective="all_reduse")
    with pytest.raises(ValueError, match="min_bytes <= max_bytes"):
        m.render_nccl_validation(gke_ref, [("a", "b")], RUN_ID, min_bytes=2**20, max_bytes=8)


# --- names and labels -------------------------------------------------------------------------


def test_jobset_names_stay_short_for_a_long_pool_name(gke_ref: PoolRef) -> None:
    long_pool = gke_ref.pool.model_copy(update={"name": "p" + "-abcdefgh" * 7})  # 64 -> 57 chars
    long_pool = long_pool.model_copy(update={"name": long_pool.name[:63]})
    ref = PoolRef(region=gke_ref.region, cluster=gke_ref.cluster, pool=long_pool)
    pairs = [(f"n{i}a", f"n{i}b") for i in range(12)]  # up to pair-11
    obj = m.render_nccl_validation(ref, pairs, RUN_ID)
    name = obj["metadata"]["name"]
    assert len(name) <= m.MAX_JOBSET_NAME and DNS1035.match(name)
    assert name.startswith("nccl-p-abcdefgh")
    # JobSet pod names: <jobset>-<rjob>-<job index>-<pod index>-<5 random>
    longest_pod = f"{name}-pair-11-0-1-abcde"
    assert len(longest_pod) <= 63
    validate_manifest(obj)  # includes JobSet's generated-name rule
    storage = m.render_storage_validation(ref, ["n0", "n1"], RUN_ID)
    assert len(storage["metadata"]["name"]) <= m.MAX_JOBSET_NAME
    validate_manifest(storage)


def test_names_are_deterministic_per_run_and_differ_between_runs(gke_ref: PoolRef) -> None:
    a = m.render_nccl_validation(gke_ref, [("x", "y")], RUN_ID)
    b = m.render_nccl_validation(gke_ref, [("x", "y")], RUN_ID)
    c = m.render_nccl_validation(gke_ref, [("x", "y")], RUN_ID + ".localize")
    assert a == b
    assert a["metadata"]["name"] != c["metadata"]["name"]
    nccl = a["metadata"]["name"]
    fio = m.render_storage_validation(gke_ref, ["x"], RUN_ID)["metadata"]["name"]
    assert nccl != fio


def test_run_label_turns_any_run_id_into_a_label_value() -> None:
    label = m.run_label(RUN_ID)
    assert LABEL_VALUE.match(label) and len(label) <= 63
    assert label != m.run_label("scheduled__2025-06-01T02:00:00+00:01")
    assert m.run_label("nightly-42") == "nightly-42"  # already valid: unchanged
    assert len(m.run_label("x" * 200)) <= 63
    with pytest.raises(ValueError):
        m.run_label("")


def test_every_object_and_pod_carries_the_platform_labels(ref: PoolRef) -> None:
    objs = {
        "validation": [
            m.render_nccl_validation(ref, pairs_of(ref, 2), RUN_ID),
            m.render_storage_validation(ref, nodes_of(ref, 3), RUN_ID),
        ],
        "training": [m.render_training_job(ref, training_spec())],
    }
    for workload, manifests in objs.items():
        for obj in manifests:
            labels = obj["metadata"]["labels"]
            assert labels["app.kubernetes.io/managed-by"] == "gpufleet"
            assert labels["gpufleet.io/workload"] == workload
            run = labels["gpufleet.io/run"]
            assert LABEL_VALUE.match(run)
            for _, _, template in w.workload_pod_templates(obj):
                pod_labels = template["metadata"]["labels"]
                assert pod_labels["app.kubernetes.io/managed-by"] == "gpufleet"
                assert pod_labels["gpufleet.io/workload"] == workload
                assert pod_labels["gpufleet.io/run"] == run
                assert pod_labels["gpufleet.io/pool"] == ref.pool.name


# --- Lustre -----------------------------------------------------------------------------------


def test_storage_validation_pins_fio_pods_to_nodes_on_the_pool_pvc(ref: PoolRef) -> None:
    nodes = nodes_of(ref, 3)
    obj = m.render_storage_validation(ref, nodes, RUN_ID)
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
    assert m.pvc_name(fs) == f"{fs.name}-pvc" == m.pvc_name(fs.name)
    (volume,) = pod["volumes"]
    assert volume["persistentVolumeClaim"]["claimName"] == m.pvc_name(fs)
    (mount,) = pod["containers"][0]["volumeMounts"]
    assert (mount["name"], mount["mountPath"]) == (volume["name"], fs.mount_path)
    assert "subPath" not in mount
    script = pod["containers"][0]["command"][2]
    workdir = f"{fs.mount_path}/.gpufleet-validation/{m.run_label(RUN_ID)}/${{GPUFLEET_INDEX}}"
    assert f'dir="{workdir}"' in script
    assert "trap 'rm -rf \"${dir}\"' EXIT" in script
    assert "--output-format=json" in script and "--direct=1" in script and "--bs=1M" in script
    assert f"--numjobs={ref.pool.gpu.count}" in script
    assert script.index("--rw=write") < script.index("--rw=read") < script.index("--stonewall")


def test_storage_validation_refuses_a_pool_without_filesystem(gke_ref: PoolRef) -> None:
    pool = gke_ref.pool.model_copy(update={"filesystem": None})
    ref = PoolRef(region=gke_ref.region, cluster=gke_ref.cluster, pool=pool)
    with pytest.raises(ValueError, match="no filesystem"):
        m.render_storage_validation(ref, ["a"], RUN_ID)
    with pytest.raises(ValueError, match="more than once"):
        m.render_storage_validation(gke_ref, ["a", "a"], RUN_ID)


# --- training ---------------------------------------------------------------------------------


def test_training_job_is_gang_admitted_pinned_and_plumbed(ref: PoolRef) -> None:
    spec = training_spec()
    obj = m.render_training_job(ref, spec)
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
    assert fabric.rdma_attached and fabric.plugin_present and fabric.missing == ()
    assert fabric.pinned_net == NCCL_NET_NAMES[ref.pool.transport]
    pod = template["spec"]
    assert pod["nodeSelector"] == {native_pool_label(ref): ref.pool.name}
    assert pod["priorityClassName"] == "training-high"
    main = pod["containers"][0]
    assert main["image"] == spec.image and main["command"] == spec.command
    sidecar = [c for c in pod["initContainers"] if c["name"] == NCCL_LOG_CONTAINER]
    assert sidecar and sidecar[0]["restartPolicy"] == "Always"


def test_training_mounts_the_lustre_pvc_at_namespace_and_job(ref: PoolRef) -> None:
    obj = m.render_training_job(ref, training_spec())
    ((_, _, template),) = w.workload_pod_templates(obj)
    fs = ref.filesystem
    volumes = {v["name"]: v for v in template["spec"]["volumes"]}
    main = template["spec"]["containers"][0]
    mount = next(mt for mt in main["volumeMounts"] if mt["mountPath"] == fs.mount_path)
    assert mount["subPath"] == "ml-team/qwen-ft"
    assert volumes[mount["name"]]["persistentVolumeClaim"]["claimName"] == m.pvc_name(fs)


def test_training_env_has_rendezvous_and_user_env(ref: PoolRef) -> None:
    obj = m.render_training_job(ref, training_spec(nodes=2, gpus_per_node=4))
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
        m.render_training_job(ref, training_spec(env={"OK": "1", key: "Socket"}))


def test_user_env_may_not_override_pool_tuning_or_rendezvous(gke_ref: PoolRef) -> None:
    with pytest.raises(ValueError, match="env NCCL_IB_TC is platform-owned"):
        m.render_training_job(gke_ref, training_spec(env={"NCCL_IB_TC": "0"}))
    with pytest.raises(ValueError, match="env MASTER_ADDR is set by the platform"):
        m.render_training_job(gke_ref, training_spec(env={"MASTER_ADDR": "10.0.0.1"}))


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
        m.render_training_job(gke_ref, bad)
    text = str(err.value)
    assert "is 41 characters; at most 40" in text
    assert "namespace 'ML_Team'" in text
    assert f"nodes {pool.nodes + 1} exceeds" in text
    assert f"gpus_per_node {pool.gpu.count + 1} exceeds" in text
    assert "command must be a non-empty list" in text
    with pytest.raises(ValueError, match="DNS-1035"):
        m.render_training_job(gke_ref, training_spec(name="9lives"))
    with pytest.raises(ValueError, match="nodes must be a positive integer"):
        m.render_training_job(gke_ref, training_spec(nodes=0))


# --- read-back helpers ------------------------------------------------------------------------


def test_read_back_helpers(gke_ref: PoolRef) -> None:
    assert w.pair_nodes({"metadata": {}}) is None
    assert w.pair_nodes({"metadata": {"annotations": {"gpufleet.io/pair-nodes": "a"}}}) is None
    assert w.pinned_nodes({"spec": {}}) is None
    with pytest.raises(ValueError, match="not a Job or JobSet"):
        w.workload_pod_templates({"kind": "Deployment", "spec": {}})
    obj = m.render_nccl_validation(gke_ref, [("a", "b")], RUN_ID)
    clone = copy.deepcopy(obj)
    clone["spec"]["replicatedJobs"][0]["replicas"] = 3
    assert w.workload_pod_templates(clone)[0][1] == 6


# --- add-on objects ---------------------------------------------------------------------------


def test_kueue_objects_pin_the_pool_and_quota_its_gpus(ref: PoolRef) -> None:
    objs = m.render_kueue_objects(ref, namespace="ml-team")
    for obj in objs:
        validate_manifest(obj)
    flavor, cq, lq = objs
    assert [o["kind"] for o in objs] == ["ResourceFlavor", "ClusterQueue", "LocalQueue"]
    assert flavor["spec"]["nodeLabels"] == {native_pool_label(ref): ref.pool.name}
    (group,) = cq["spec"]["resourceGroups"]
    (quota,) = group["flavors"]
    assert quota["name"] == flavor["metadata"]["name"]
    quotas = {r["name"]: r["nominalQuota"] for r in quota["resources"]}
    assert quotas["nvidia.com/gpu"] == str(ref.pool.nodes * ref.pool.gpu.count)
    assert group["coveredResources"] == [r["name"] for r in quota["resources"]]
    # every resource a plumbed training pod requests is covered, or Kueue would refuse it
    obj = m.render_training_job(ref, training_spec(namespace="ml-team"))
    for _, _, template in w.workload_pod_templates(obj):
        for container in template["spec"]["containers"] + template["spec"]["initContainers"]:
            assert set(container["resources"].get("requests", {})) <= set(quotas)
    assert lq["metadata"] == {
        "name": ref.pool.queue_name,
        "namespace": "ml-team",
        "labels": lq["metadata"]["labels"],
    }
    assert lq["spec"]["clusterQueue"] == cq["metadata"]["name"]
    assert obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == lq["metadata"]["name"]


def test_gke_networks_match_the_interfaces_pods_attach(ref: PoolRef) -> None:
    if ref.cluster.shape != "gke":
        with pytest.raises(ValueError, match="gke"):
            m.render_gke_networks(ref.cluster)
        return
    objs = m.render_gke_networks(ref.cluster)
    for obj in objs:
        validate_manifest(obj)
    params = [o for o in objs if o["kind"] == "GKENetworkParamSet"]
    networks = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Network"}
    assert len(params) == len(networks) == ref.cluster.network.rdma_nics
    for param in params:
        assert param["spec"]["deviceMode"] == "RDMA"
        assert param["spec"]["vpc"] == ref.cluster.network.name
        net = networks[param["metadata"]["name"]]
        assert net["spec"]["type"] == "Device"
        assert net["spec"]["parametersRef"] == {
            "group": "networking.gke.io",
            "kind": "GKENetworkParamSet",
            "name": param["metadata"]["name"],
        }
    attached = {nic["network"] for nic in gke_interfaces(ref.cluster)} - {"default"}
    assert attached == set(networks)


def test_ssh_secret_for_the_pairs(gke_ref: PoolRef) -> None:
    secret = m.render_ssh_secret()
    validate_manifest(secret)
    assert secret["type"] == "kubernetes.io/ssh-auth"
    assert secret["metadata"]["namespace"] == m.VALIDATION_NAMESPACE
    key = secret["stringData"]["ssh-privatekey"]
    assert key.startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
    assert m.render_ssh_secret()["stringData"]["ssh-privatekey"] != key  # fresh each time
    obj = m.render_nccl_validation(gke_ref, [("a", "b")], RUN_ID)
    ((_, _, template),) = w.workload_pod_templates(obj)
    secrets = [v["secret"]["secretName"] for v in template["spec"]["volumes"] if "secret" in v]
    assert secrets == [secret["metadata"]["name"]]
