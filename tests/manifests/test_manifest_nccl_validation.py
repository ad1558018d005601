"""The nightly fabric check's JobSet: pairs pinned to their nodes, the fabric plumbed, NCCL_NET
left for NCCL to choose, the launcher's script, and the requests it refuses."""

from __future__ import annotations

import copy
import re

import pytest

from gpufleet.domain import workloads as w
from gpufleet.domain.fleet import PoolRef
from gpufleet.domain.health.tiers import (
    DEFAULT_DIAG_TIMEOUT_S,
    DcgmLimits,
    default_limits,
    diag_timeout,
)
from gpufleet.domain.plumbing import NCCL_LOG_CONTAINER, inspect_pod, pod_plumbing
from gpufleet.manifests.gpu_health import (
    DEFAULT_DCGM_IMAGE,
    HEALTH_CONTAINER,
    job_deadline,
    render_gpu_health,
)
from gpufleet.manifests.labels import QUEUE_NAME_LABEL, pvc_name, run_label
from gpufleet.manifests.nccl_validation import (
    DEFAULT_NCCL_TESTS_IMAGES,
    NCCL_CONTAINER,
    NCCL_DEADLINE_SECONDS,
    NCCL_JSON_MARKER,
    NCCL_PEER_WAIT_SECONDS,
    render_nccl_validation,
)
from gpufleet.manifests.storage_validation import (
    DEFAULT_FIO_IMAGE,
    FIO_CONTAINER,
    STORAGE_DEADLINE_SECONDS,
    PoolCheck,
    render_storage_validation,
)
from tests.manifests.manifest_helpers import (
    RUN_ID,
    env_of,
    native_pool_label,
    nccl_log_problems,
    pairs_of,
)
from tests.support.schemas import validate_manifest

DEFAULT_CONTAINER = "kubectl.kubernetes.io/default-container"


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


# --- one pod per node: the GPU health and storage checks as init containers of the pairs -----


def _pods(obj: dict) -> list[dict]:
    return [template for _, _, template in w.workload_pod_templates(obj)]


def _deadlines(obj: dict) -> list[int]:
    return [j["template"]["spec"]["activeDeadlineSeconds"] for j in obj["spec"]["replicatedJobs"]]


def _inits(template: dict) -> list[str]:
    return [c["name"] for c in template["spec"].get("initContainers") or ()]


def _wait(template: dict) -> int:
    return int(env_of(template["spec"]["containers"][0])["GPUFLEET_WAIT_SECONDS"]["value"])


def test_without_the_new_arguments_the_pairs_are_as_before(ref: PoolRef) -> None:
    obj = render_nccl_validation(ref, pairs_of(ref, 2), RUN_ID)
    plain = render_nccl_validation(
        ref, pairs_of(ref, 2), RUN_ID, health_levels=None, pool_check=None, health_image="x/y:1"
    )
    assert obj == plain
    assert _deadlines(obj) == [NCCL_DEADLINE_SECONDS] * 2
    for template in _pods(obj):
        assert _inits(template) == [NCCL_LOG_CONTAINER]
        assert _wait(template) == NCCL_PEER_WAIT_SECONDS
        assert {v["name"] for v in template["spec"]["volumes"]} == {
            "gpufleet-ssh",
            *(v["name"] for v in pod_plumbing(ref.cluster, ref.pool, pin_network=False).volumes),
        }
    # all zero levels: no health step anywhere, the same JobSet
    assert render_nccl_validation(ref, pairs_of(ref, 2), RUN_ID, health_levels=[0, 0]) == obj


def test_each_pair_runs_the_health_check_at_its_level_before_nccl_tests(ref: PoolRef) -> None:
    pairs = pairs_of(ref, 3)
    obj = render_nccl_validation(ref, pairs, RUN_ID, health_levels=[1, 0, 3])
    validate_manifest(obj)
    limits = ref.dcgm_limits
    templates = _pods(obj)
    for i, level in enumerate((1, 0, 3)):
        template = templates[i]
        assert template["metadata"]["annotations"][DEFAULT_CONTAINER] == NCCL_CONTAINER
        if level == 0:
            assert _inits(template) == [NCCL_LOG_CONTAINER]
            assert _deadlines(obj)[i] == NCCL_DEADLINE_SECONDS
            continue
        assert _inits(template) == [HEALTH_CONTAINER, NCCL_LOG_CONTAINER]
        timeout = diag_timeout(limits, level)
        assert _deadlines(obj)[i] == NCCL_DEADLINE_SECONDS + job_deadline(level, timeout)
        assert _wait(template) == NCCL_PEER_WAIT_SECONDS + job_deadline(level, timeout)
        init = template["spec"]["initContainers"][0]
        # exactly the health JobSet's container for that node and level, script and all
        health = render_gpu_health(ref, {pairs[i][0]: level}, RUN_ID, limits=limits)
        (container,) = _pods(health)[0]["spec"]["containers"]
        assert init == container
        assert f"dcgmi diag -r {level} -j" in init["command"][2]
        assert init["command"][2].endswith("\ntrue")  # exits 0: the verdict reads the log
        # the whole node's GPUs, as nccl-tests asks: the pod takes no more than before
        main = template["spec"]["containers"][0]
        gpus = init["resources"]["limits"]["nvidia.com/gpu"]
        assert gpus == main["resources"]["limits"]["nvidia.com/gpu"] == str(ref.pool.gpu.count)
        # the plumbing is the main container's alone
        assert set(init) == {"name", "image", "command", "env", "securityContext", "resources"}
        fabric = inspect_pod(ref.cluster, ref.pool, template)
        assert fabric.missing == () and fabric.gpus == ref.pool.gpu.count
        assert nccl_log_problems(template, NCCL_CONTAINER) == []


def test_the_health_step_takes_the_image_and_the_models_limits(gke_ref: PoolRef) -> None:
    pairs = pairs_of(gke_ref, 1)
    obj = render_nccl_validation(gke_ref, pairs, RUN_ID, health_levels=[2])
    (init, _) = _pods(obj)[0]["spec"]["initContainers"]
    assert init["image"] == DEFAULT_DCGM_IMAGE
    assert "timeout --kill-after=10 900 dcgmi diag -r 2 -j;" in init["command"][2]
    # the catalog's limits, carried by the pool, set the timeout; dcgm_limits overrides them
    slow = DcgmLimits("H200", timeouts_s={**DEFAULT_DIAG_TIMEOUT_S, 2: 4000})
    ref = gke_ref.model_copy(update={"dcgm": slow})
    faster = DcgmLimits("H200", timeouts_s={**DEFAULT_DIAG_TIMEOUT_S, 2: 1000})
    for kwargs, seconds in (({}, 4000), ({"dcgm_limits": faster}, 1000)):
        obj = render_nccl_validation(
            ref, pairs, RUN_ID, health_levels=[2], health_image="my/dcgm:2", **kwargs
        )
        (init, _) = _pods(obj)[0]["spec"]["initContainers"]
        assert init["image"] == "my/dcgm:2"
        assert f"timeout --kill-after=10 {seconds} dcgmi diag -r 2 -j;" in init["command"][2]
        assert _deadlines(obj) == [NCCL_DEADLINE_SECONDS + job_deadline(2, seconds)]
        health = render_gpu_health(
            ref, {pairs[0][0]: 2}, RUN_ID, limits=kwargs.get("dcgm_limits", slow)
        )
        assert init["command"] == _pods(health)[0]["spec"]["containers"][0]["command"]


def test_the_pool_check_pair_runs_fio_after_the_health_check(ref: PoolRef) -> None:
    pairs = pairs_of(ref, 2)
    check = PoolCheck(pair=1, size_gib_per_node=4, runtime_seconds=60)
    obj = render_nccl_validation(ref, pairs, RUN_ID, health_levels=[1, 2], pool_check=check)
    validate_manifest(obj)
    first, second = _pods(obj)
    assert _inits(first) == [HEALTH_CONTAINER, NCCL_LOG_CONTAINER]
    assert _inits(second) == [HEALTH_CONTAINER, FIO_CONTAINER, NCCL_LOG_CONTAINER]
    assert "lustre" not in {v["name"] for v in first["spec"]["volumes"]}
    timeout = diag_timeout(ref.dcgm_limits, 2)
    assert _deadlines(obj)[1] == (
        NCCL_DEADLINE_SECONDS + job_deadline(2, timeout) + STORAGE_DEADLINE_SECONDS
    )
    assert _deadlines(obj)[0] == NCCL_DEADLINE_SECONDS + job_deadline(
        1, diag_timeout(ref.dcgm_limits, 1)
    )
    fio = second["spec"]["initContainers"][1]
    # the storage Job's container, on the same claim and mount, but its script always exits 0
    job = render_storage_validation(
        ref, list(pairs[1]), RUN_ID, size_gib_per_node=4, runtime_seconds=60
    )
    ((_, _, storage),) = w.workload_pod_templates(job)
    (expected,) = storage["spec"]["containers"]
    assert {k: v for k, v in fio.items() if k != "command"} == {
        k: v for k, v in expected.items() if k != "command"
    }
    assert fio["image"] == DEFAULT_FIO_IMAGE
    volume = next(v for v in second["spec"]["volumes"] if v["name"] == "lustre")
    assert volume == storage["spec"]["volumes"][0]
    assert volume["persistentVolumeClaim"]["claimName"] == pvc_name(ref.filesystem)
    script, base = fio["command"][2], expected["command"][2]
    assert fio["command"][:2] == expected["command"][:2] == ["sh", "-c"]
    # the same fio run; only what makes it exit 0 differs: fio's JSON goes through a file,
    # printed when fio succeeded, and a failure is said on stderr
    head, rest = base.split("\n", 1)
    assert script == (
        f"{head}\n# In the NCCL pair pod: always exits 0; a failure is said on stderr and leaves "
        "no JSON.\n"
        + rest.replace("exit 1; }", "exit 0; }").replace(
            "fio --output-format=json \\",
            "fio --output-format=json --output=/tmp/gpufleet-fio.json \\",
        )
        + '\nrc=$?\nif [ "${rc}" = "0" ] && [ -s /tmp/gpufleet-fio.json ]; then\n'
        "  cat /tmp/gpufleet-fio.json\nelse\n"
        '  echo "[gpufleet] fio failed (exit ${rc}, or no results): no JSON; the NCCL pair goes '
        'on" >&2\nfi\nexit 0'
    )
    workdir = f"{ref.filesystem.mount_path}/.gpufleet-validation/{run_label(RUN_ID)}/"
    assert workdir + "${GPUFLEET_INDEX}" in script
    assert f"--numjobs={ref.pool.gpu.count}" in script
    assert "--runtime=60 " in script


def test_the_pool_check_alone_adds_only_fio(gke_ref: PoolRef) -> None:
    obj = render_nccl_validation(
        gke_ref, pairs_of(gke_ref, 2), RUN_ID, pool_check=PoolCheck(0, 16, None)
    )
    validate_manifest(obj)
    first, second = _pods(obj)
    assert _inits(first) == [FIO_CONTAINER, NCCL_LOG_CONTAINER]
    assert _inits(second) == [NCCL_LOG_CONTAINER]
    assert _deadlines(obj) == [
        NCCL_DEADLINE_SECONDS + STORAGE_DEADLINE_SECONDS,
        NCCL_DEADLINE_SECONDS,
    ]
    assert _wait(first) == NCCL_PEER_WAIT_SECONDS + STORAGE_DEADLINE_SECONDS
    assert "--runtime=600 " in first["spec"]["initContainers"][0]["command"][2]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"health_levels": [1]}, "health_levels gives 1 levels for 2 pairs"),
        ({"health_levels": [1, 1, 1]}, "health_levels gives 3 levels for 2 pairs"),
        ({"health_levels": "12"}, "health_levels gives a string"),
        ({"health_levels": [1, 5]}, "health_levels[1]: a dcgmi diag level 1 to 4, or 0"),
        ({"health_levels": [-1, 1]}, "health_levels[0]: a dcgmi diag level 1 to 4, or 0"),
        ({"health_levels": [True, 1]}, "health_levels[0]: a dcgmi diag level 1 to 4, or 0"),
        ({"health_levels": [1, "2"]}, "health_levels[1]: a dcgmi diag level 1 to 4, or 0"),
        ({"health_levels": [1, 2.0]}, "health_levels[1]: a dcgmi diag level 1 to 4, or 0"),
        (
            {"health_levels": [0, 2], "dcgm_limits": default_limits("B200")},
            "health_levels[1]: level 2 is above B200's highest dcgmi diag level 1",
        ),
        ({"pool_check": PoolCheck(2, 4)}, "pool_check.pair 2 is not a pair index: give 0 to 1"),
        ({"pool_check": PoolCheck(-1, 4)}, "pool_check.pair -1 is not a pair index"),
        ({"pool_check": PoolCheck(True, 4)}, "pool_check.pair True is not a pair index"),
        ({"pool_check": PoolCheck(0, 0)}, "size_gib_per_node must be a positive integer"),
        ({"pool_check": PoolCheck(0, 4, 601)}, "runtime_seconds must be an integer from 1 to 600"),
        ({"pool_check": (0, 4, None)}, "pool_check must be a PoolCheck, not tuple"),
    ],
)
def test_bad_health_and_pool_check_arguments_are_refused(
    gke_ref: PoolRef, kwargs: dict, message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        render_nccl_validation(gke_ref, pairs_of(gke_ref, 2), RUN_ID, **kwargs)


def test_a_pool_check_needs_the_pools_filesystem(gke_ref: PoolRef) -> None:
    pool = gke_ref.pool.model_copy(update={"filesystem": None})
    ref = PoolRef(region=gke_ref.region, cluster=gke_ref.cluster, pool=pool)
    render_nccl_validation(ref, pairs_of(ref, 1), RUN_ID, health_levels=[1])  # health alone: fine
    with pytest.raises(ValueError, match="has no filesystem"):
        render_nccl_validation(ref, pairs_of(ref, 1), RUN_ID, pool_check=PoolCheck(0, 4))
