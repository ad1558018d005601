"""The Kubernetes objects gpufleet renders: validation workloads, training jobs, add-on objects.

Pure domain code (no Airflow). Templates are data (``include/manifests/*.yaml.j2``, Jinja2 with
``StrictUndefined``); each is rendered and safe-loaded (YAML) to a dict, and the RDMA/NCCL
plumbing is injected afterwards from :mod:`gpufleet.domain.plumbing`, so the templates stay
provider-neutral and there is one place that knows what a pod needs on GKE or EKS.

What is rendered
- ``render_nccl_validation``: a JobSet of 2-node nccl-tests pairs (``pair-<i>``), NCCL_NET
  *not* pinned (validation observes what NCCL picks). It carries no Kueue label: validation
  runs on idle nodes the pair planner picked by name, pinned by node affinity, while no
  training job holds them; queueing it behind training quota would delay or starve the nightly
  check and Kueue's flavor assignment cannot express "exactly these two nodes".
- ``render_storage_validation``: an Indexed Job running fio on chosen nodes against the
  pool's Lustre PVC.
- ``render_training_job``: a JobSet gang-admitted by Kueue (``kueue.x-k8s.io/queue-name``),
  NCCL_NET pinned, Lustre mounted at ``<namespace>/<job>``. It is created suspended; Kueue
  unsuspends it on admission (without Kueue it never starts: fail-closed).
- ``render_kueue_objects`` / ``render_gke_networks`` / ``render_ssh_secret``: objects that
  onboarding applies once (Kueue flavor + queues per pool, GKE RDMA Network objects, the
  ssh key Secret the nccl-tests pairs use between their two pods).

Labels: every workload object and pod carries ``app.kubernetes.io/managed-by: gpufleet``,
``gpufleet.io/workload: validation|training`` and ``gpufleet.io/run: <run label>``; pods also
``gpufleet.io/pool: <pool>``. Add-on objects carry the managed-by label and their pool or
cluster. ``run_label(run_id)`` turns any run id (Airflow's contain ``:`` and ``+``) into a
valid label value; the raw id is kept in the ``gpufleet.io/run-id`` annotation.

Naming rule (JobSet pod names must stay <= 63 characters): JobSet pods are named
``<jobset>-<replicatedJob>-<job index>-<pod index>-<5 random>``, so a JobSet name is at most
40 characters (``MAX_JOBSET_NAME``), which leaves room for ``-pair-9999-0-1-xxxxx`` and
``-workers-0-9999-xxxxx``. Validation names are ``<check>-<pool, truncated>-<8 hex of
sha256(run_id)>`` (``workload_name``): deterministic, so re-running a task converges on the
same object instead of creating a second one; a second pass in the same DAG run passes a
distinct run id (e.g. ``f"{run_id}.localize"``). Training job names are the user's and are
refused if longer than 40 characters or not a DNS-1035 label (JobSet needs both).

Images (overridable per call): ``DEFAULT_NCCL_TESTS_IMAGES`` holds, per provider shape, a
public image with MPI-built nccl-tests (GKE: Google's gIB diagnostic image, the one GKE's
A3 Ultra NCCL test guide runs; EKS: AWS's nccl-tests image with EFA + aws-ofi-nccl);
``DEFAULT_FIO_IMAGE`` a small fio image. Tags are pinned; override them with ``image=``. The
nccl-tests pods also need the ``gpufleet-nccl-ssh`` Secret in their namespace
(``render_ssh_secret``): mpirun reaches the peer pod over ssh.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import jinja2
import yaml

from gpufleet.config.paths import include_dir
from gpufleet.domain.fleet import Cluster, Filesystem, NodePool, PoolRef
from gpufleet.domain.names import DNS1035_LABEL, DNS1123_LABEL, DNS1123_SUBDOMAIN, LABEL_VALUE
from gpufleet.domain.plumbing import PodPlumbing, apply_plumbing, is_platform_env, pod_plumbing
from gpufleet.domain.workloads import (
    POOL_LABEL,
    WORKLOAD_LABEL,
    pool_label_key,
    workload_pod_templates,
)

# --- labels, names, constants -----------------------------------------------------------------

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "gpufleet"
RUN_LABEL = "gpufleet.io/run"
RUN_ID_ANNOTATION = "gpufleet.io/run-id"
CLUSTER_ANNOTATION = "gpufleet.io/cluster"
CHECK_LABEL = "gpufleet.io/check"  # nccl | storage (validation workloads)
PAIR_LABEL = "gpufleet.io/pair"
STORAGE_NODES_ANNOTATION = "gpufleet.io/storage-nodes"
JOB_LABEL = "gpufleet.io/job"  # training job name, on the JobSet and its pods
CLUSTER_LABEL = "gpufleet.io/cluster"
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"

VALIDATION_NAMESPACE = "gpufleet-validation"
TRAINING_NAMESPACE = "default"  # where render_kueue_objects puts the LocalQueue by default
NCCL_SSH_SECRET = "gpufleet-nccl-ssh"
NCCL_JSON_MARKER = "=== gpufleet nccl-tests json ==="
NCCL_CONTAINER = "nccl-tests"
FIO_CONTAINER = "fio"
TRAINER_CONTAINER = "trainer"
TRAINING_REPLICATED_JOB = "workers"

MAX_JOBSET_NAME = 40
VALIDATION_TTL_SECONDS = 6 * 3600  # long enough for the DAG to read the pods' logs
TRAINING_TTL_SECONDS = 24 * 3600
NCCL_DEADLINE_SECONDS = 1800  # per pair Job: image pull + ssh + an 8 GiB sweep
STORAGE_DEADLINE_SECONDS = 1800
NCCL_SSH_PORT = 2222
NCCL_PEER_WAIT_SECONDS = 900
FIO_IODEPTH = 16
FIO_RUNTIME_SECONDS = 600

COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "alltoall",
    "broadcast",
    "reduce",
    "sendrecv",
)

# nccl-tests images, per provider shape (tags pinned; override with image=...).
DEFAULT_NCCL_TESTS_IMAGE_GKE = (
    "us-docker.pkg.dev/gce-ai-infra/gpudirect-gib/nccl-plugin-gib-diagnostic:v1.0.6"
)
DEFAULT_NCCL_TESTS_IMAGE_EKS = (
    "public.ecr.aws/hpc-cloud/nccl-tests:cuda12.8.1-efa1.43.2-ofiv1.16.3-ncclv2.27.7-1-testsv2.16.9"
)
DEFAULT_NCCL_TESTS_IMAGES = {
    "gke": DEFAULT_NCCL_TESTS_IMAGE_GKE,
    "eks": DEFAULT_NCCL_TESTS_IMAGE_EKS,
}
# where each default image keeps the *_perf binaries, and its own MPI/NCCL libraries (appended
# after the platform's LD_LIBRARY_PATH, which replaces the image's)
NCCL_TESTS_DIRS = {"gke": "/third_party/nccl-tests/build", "eks": "/opt/nccl-tests/build"}
NCCL_TESTS_IMAGE_LIBS = {
    "gke": "",
    "eks": "/opt/amazon/openmpi/lib:/opt/nccl/build/lib:/opt/aws-ofi-nccl/install/lib",
}
DEFAULT_FIO_IMAGE = "docker.io/ljishen/fio:3.36"

# env a training job gets from the JobSet (and so may not set itself)
RENDEZVOUS_ENV = frozenset({"MASTER_ADDR", "MASTER_PORT", "NNODES", "NODE_RANK", "GPUS_PER_NODE"})

try:  # libyaml's loader is several times faster on large JobSets
    _YamlLoader: Any = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - libyaml missing
    _YamlLoader = yaml.SafeLoader

_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_SAFE_PATH = re.compile(r"^/[A-Za-z0-9._/-]*$")


def _short_hash(text: str, length: int = 8) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def run_label(run_id: str) -> str:
    """A valid label value (<= 63 chars) for ``run_id``: itself if valid, else a cleaned
    prefix plus 8 hex of its sha256 (``manual__2025-01-01T00:00:00+00:00`` ->
    ``manual__2025-01-01T00-00-00-00-00-<hash>``)."""
    if not isinstance(run_id, str) or not run_id:
        raise ValueError("run_id must be a non-empty string")
    if len(run_id) <= 63 and LABEL_VALUE.match(run_id):
        return run_id
    clean = re.sub(r"[^A-Za-z0-9_.-]+", "-", run_id)[:54].strip("-_.")
    digest = _short_hash(run_id)
    return f"{clean}-{digest}" if clean else digest


def workload_name(check: str, pool: str, run_id: str) -> str:
    """``<check>-<pool>-<8 hex of sha256(run_id)>``, the pool truncated so the name is at most
    ``MAX_JOBSET_NAME`` (40) characters; a DNS-1035 label because ``check`` starts with a
    letter. Deterministic: the same run renders the same name."""
    if not DNS1035_LABEL.match(check):
        raise ValueError(f"check prefix {check!r} must be a DNS-1035 label")
    if not isinstance(run_id, str) or not run_id:
        raise ValueError("run_id must be a non-empty string")
    digest = _short_hash(run_id)
    budget = MAX_JOBSET_NAME - len(check) - len(digest) - 2
    if budget < 1:
        raise ValueError(f"check prefix {check!r} is too long for a {MAX_JOBSET_NAME}-char name")
    stem = pool[:budget].strip("-")
    return f"{check}-{stem}-{digest}" if stem else f"{check}-{digest}"


def pvc_name(fs: Filesystem | str) -> str:
    """The PersistentVolumeClaim a filesystem is mounted through: ``<filesystem>-pvc``.

    Onboarding creates one PVC of this name in every namespace that mounts the filesystem
    (the validation namespace and each training namespace)."""
    name = fs if isinstance(fs, str) else fs.name
    return f"{name}-pvc"


def nccl_tests_image(shape: str) -> str:
    """The default nccl-tests image for a provider shape (``gke`` or ``eks``)."""
    try:
        return DEFAULT_NCCL_TESTS_IMAGES[shape]
    except KeyError:
        raise ValueError(f"no nccl-tests image for shape {shape!r} (gke, eks)") from None


def _base_labels(workload: str, run: str, pool: NodePool | None = None) -> dict[str, str]:
    labels = {MANAGED_BY_LABEL: MANAGED_BY, WORKLOAD_LABEL: workload, RUN_LABEL: run}
    if pool is not None:
        labels[POOL_LABEL] = pool.name
    return labels


def _check_namespace(namespace: str) -> None:
    if not isinstance(namespace, str) or len(namespace) > 63 or not DNS1123_LABEL.match(namespace):
        raise ValueError(
            f"namespace {namespace!r} is not a DNS-1123 label (lowercase letters, digits and '-', "
            "at most 63 characters)"
        )


def _check_node_name(node: Any, what: str) -> str:
    if not isinstance(node, str) or len(node) > 253 or not DNS1123_SUBDOMAIN.match(node):
        raise ValueError(f"{what}: {node!r} is not a valid node name (a DNS-1123 subdomain)")
    return node


# --- rendering --------------------------------------------------------------------------------


@lru_cache(maxsize=4)
def _environment(directory: str) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(directory),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
    )
    # JSON is YAML: any value emitted through `j` is one well-formed scalar/flow node
    env.filters["j"] = json.dumps
    return env


def _render_text(template: str, **context: Any) -> str:
    env = _environment(str(include_dir() / "manifests"))
    try:
        return env.get_template(template).render(**context)
    except jinja2.TemplateNotFound:
        raise FileNotFoundError(
            f"manifest template {template!r} not found in {include_dir() / 'manifests'}"
        ) from None


def render_template(template: str, **context: Any) -> dict[str, Any]:
    """Render one ``include/manifests`` template holding one object and load it."""
    obj = yaml.load(_render_text(template, **context), Loader=_YamlLoader)
    if not isinstance(obj, dict):
        raise ValueError(f"template {template!r} did not render to one object")
    return obj


def render_template_all(template: str, **context: Any) -> list[dict[str, Any]]:
    """Render a multi-document template and load every object in it."""
    docs = yaml.load_all(_render_text(template, **context), Loader=_YamlLoader)
    return [d for d in docs if d is not None]


# --- 1. nccl-tests pairs ----------------------------------------------------------------------


def _check_pairs(pairs: Sequence[Sequence[str]]) -> list[tuple[str, str]]:
    if not pairs:
        raise ValueError("pairs is empty: give at least one (node, node) pair")
    out: list[tuple[str, str]] = []
    seen: dict[str, int] = {}
    for i, pair in enumerate(pairs):
        if isinstance(pair, str) or len(pair) != 2:
            raise ValueError(f"pairs[{i}]: expected two node names, got {pair!r}")
        a = _check_node_name(pair[0], f"pairs[{i}][0]")
        b = _check_node_name(pair[1], f"pairs[{i}][1]")
        if a == b:
            raise ValueError(f"pairs[{i}]: a node cannot pair with itself ({a!r})")
        for node in (a, b):
            if node in seen:
                raise ValueError(
                    f"pairs[{i}]: node {node!r} is already in pairs[{seen[node]}]; every pod takes "
                    "all of a node's GPUs, so a node may appear in one pair per JobSet (render a "
                    "second JobSet for a second pass)"
                )
            seen[node] = i
        out.append((a, b))
    return out


def render_nccl_validation(
    ref: PoolRef,
    pairs: Sequence[Sequence[str]],
    run_id: str,
    *,
    namespace: str = VALIDATION_NAMESPACE,
    collective: str = "all_reduce",
    min_bytes: int = 8,
    max_bytes: int = 8 * 2**30,
    image: str | None = None,
    tests_dir: str | None = None,
    ssh_secret: str = NCCL_SSH_SECRET,
) -> dict[str, Any]:
    """A JobSet running ``<collective>_perf`` on every (node, node) pair of ``ref``'s pool.

    One replicatedJob ``pair-<i>`` per pair (``i`` = index in ``pairs``): 2 pods pinned to the
    pool and to the pair's nodes, one per node. Pod 0 launches mpirun over both pods
    (``gpus_per_node`` ranks each), prints the nccl-tests text on stdout, then
    ``NCCL_JSON_MARKER`` and the ``-J`` JSON. NCCL_NET is not pinned. ``image`` defaults to
    the shape's ``DEFAULT_NCCL_TESTS_IMAGES`` entry; ``tests_dir`` to where that image keeps
    the binaries (the script also looks on PATH). The pods need the ``ssh_secret`` Secret in
    ``namespace`` (``render_ssh_secret``).
    """
    cluster, pool = ref.cluster, ref.pool
    _check_namespace(namespace)
    if collective not in COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r} (known: {', '.join(COLLECTIVES)})")
    if isinstance(min_bytes, bool) or isinstance(max_bytes, bool):
        raise ValueError("min_bytes and max_bytes must be integers")
    if not (
        isinstance(min_bytes, int) and isinstance(max_bytes, int) and 1 <= min_bytes <= max_bytes
    ):
        raise ValueError(
            f"message sizes must satisfy 1 <= min_bytes <= max_bytes (got {min_bytes!r}, "
            f"{max_bytes!r})"
        )
    checked = _check_pairs(pairs)
    shape = cluster.shape
    default_image = nccl_tests_image(shape)
    image = image or default_image
    name = workload_name("nccl", pool.name, run_id)
    run = run_label(run_id)
    labels = {**_base_labels("validation", run, pool), CHECK_LABEL: "nccl"}
    plumbing = pod_plumbing(cluster, pool, pin_network=False)
    pair_ctx = []
    for i, (a, b) in enumerate(checked):
        rjob = f"pair-{i}"
        pair_ctx.append(
            {
                "rjob": rjob,
                "nodes": [a, b],
                "labels": {**labels, PAIR_LABEL: str(i)},
                # JobSet DNS (enableDNSHostnames): <jobset>-<rjob>-<job index>-<pod index>.<jobset>
                "launcher": f"{name}-{rjob}-0-0.{name}",
                "worker": f"{name}-{rjob}-0-1.{name}",
            }
        )
    obj = render_template(
        "nccl-validation.yaml.j2",
        name=name,
        namespace=namespace,
        labels=labels,
        annotations={RUN_ID_ANNOTATION: run_id, CLUSTER_ANNOTATION: cluster.name},
        ttl_seconds=VALIDATION_TTL_SECONDS,
        active_deadline_seconds=NCCL_DEADLINE_SECONDS,
        pairs=pair_ctx,
        node_selector={pool_label_key(cluster): pool.name},
        image=image,
        tests_dir=tests_dir or NCCL_TESTS_DIRS[shape],
        # the default image's own MPI/NCCL libraries; a custom image brings its own setup
        image_libs=NCCL_TESTS_IMAGE_LIBS[shape] if image == default_image else "",
        gpus_per_node=pool.gpu.count,
        collective=collective,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        mpi_exports=sorted(plumbing.env),
        ssh_port=NCCL_SSH_PORT,
        ssh_secret=ssh_secret,
        wait_seconds=NCCL_PEER_WAIT_SECONDS,
        json_marker=NCCL_JSON_MARKER,
    )
    for _, _, template in workload_pod_templates(obj):
        apply_plumbing(template, plumbing, container=NCCL_CONTAINER)
    return obj


# --- 2. Lustre throughput ---------------------------------------------------------------------


def render_storage_validation(
    ref: PoolRef,
    nodes: Sequence[str],
    run_id: str,
    *,
    namespace: str = VALIDATION_NAMESPACE,
    size_gib_per_node: int = 16,
    image: str = DEFAULT_FIO_IMAGE,
) -> dict[str, Any]:
    """An Indexed Job running fio on each of ``nodes`` against the pool's Lustre PVC.

    One pod per node; each writes then reads ``size_gib_per_node`` GiB in one fio job per GPU
    (direct I/O, 1 MiB blocks) under ``<mount>/.gpufleet-validation/<run label>/<index>/``
    and removes it on exit. stdout is fio's JSON (``--output-format=json``).
    """
    cluster, pool = ref.cluster, ref.pool
    _check_namespace(namespace)
    fs = ref.filesystem
    if fs is None:
        raise ValueError(f"pool {ref.key} has no filesystem in the catalog: nothing to validate")
    if not _SAFE_PATH.match(fs.mount_path):
        raise ValueError(
            f"filesystem {fs.name!r}: mount_path {fs.mount_path!r} has unsafe characters"
        )
    if not nodes or isinstance(nodes, str):
        raise ValueError("nodes is empty: give the node names to run fio on")
    checked = [_check_node_name(n, f"nodes[{i}]") for i, n in enumerate(nodes)]
    dupes = sorted({n for n in checked if checked.count(n) > 1})
    if dupes:
        raise ValueError(f"nodes lists {', '.join(dupes)} more than once (one fio pod per node)")
    if (
        isinstance(size_gib_per_node, bool)
        or not isinstance(size_gib_per_node, int)
        or size_gib_per_node < 1
    ):
        raise ValueError(
            f"size_gib_per_node must be a positive integer (got {size_gib_per_node!r})"
        )
    numjobs = pool.gpu.count
    name = workload_name("fio", pool.name, run_id)
    run = run_label(run_id)
    labels = {**_base_labels("validation", run, pool), CHECK_LABEL: "storage"}
    return render_template(
        "storage-validation.yaml.j2",
        name=name,
        namespace=namespace,
        labels=labels,
        pod_labels=labels,
        annotations={RUN_ID_ANNOTATION: run_id, CLUSTER_ANNOTATION: cluster.name},
        ttl_seconds=VALIDATION_TTL_SECONDS,
        active_deadline_seconds=STORAGE_DEADLINE_SECONDS,
        nodes=checked,
        node_selector={pool_label_key(cluster): pool.name},
        image=image,
        mount_path=fs.mount_path,
        claim_name=pvc_name(fs),
        run_label=run,
        numjobs=numjobs,
        iodepth=FIO_IODEPTH,
        size_mib_per_job=math.ceil(size_gib_per_node * 1024 / numjobs),
        runtime_seconds=FIO_RUNTIME_SECONDS,
    )


# --- 3. training ------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainingJobSpec:
    """What an ML team asks for; the platform adds placement, fabric, storage and rendezvous.

    ``name`` becomes the JobSet name (DNS-1035 label, at most 40 characters). ``env`` may not
    set platform-owned keys (NCCL_NET, NCCL_DEBUG*, LD_LIBRARY_PATH, FI_*, anything the pool's
    plumbing sets, and the rendezvous variables). ``run_id`` (e.g. the launching DAG run) goes
    into the ``gpufleet.io/run`` label; without it the job name is used.
    """

    name: str
    namespace: str
    image: str
    command: list[str]
    nodes: int
    gpus_per_node: int
    priority_class: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    run_id: str | None = None
    master_port: int = 29500
    max_restarts: int = 0


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _training_problems(ref: PoolRef, spec: TrainingJobSpec, plumbing: PodPlumbing) -> list[str]:
    pool = ref.pool
    problems: list[str] = []
    if not isinstance(spec.name, str) or not DNS1035_LABEL.match(spec.name):
        problems.append(
            f"name {spec.name!r} is not a DNS-1035 label (lowercase letters, digits and '-', "
            "starting with a letter)"
        )
    elif len(spec.name) > MAX_JOBSET_NAME:
        problems.append(
            f"name {spec.name!r} is {len(spec.name)} characters; at most {MAX_JOBSET_NAME} keep "
            "the JobSet's pod names within 63 characters"
        )
    if (
        not isinstance(spec.namespace, str)
        or len(spec.namespace) > 63
        or not DNS1123_LABEL.match(spec.namespace)
    ):
        problems.append(f"namespace {spec.namespace!r} is not a DNS-1123 label")
    if (
        not isinstance(spec.image, str)
        or not spec.image.strip()
        or any(c.isspace() for c in spec.image)
    ):
        problems.append(f"image {spec.image!r} is not an image reference")
    if (
        isinstance(spec.command, str)
        or not isinstance(spec.command, Sequence)
        or not spec.command
        or not all(isinstance(w, str) for w in spec.command)
    ):
        problems.append("command must be a non-empty list of strings (the container's argv)")
    if not _is_int(spec.nodes) or spec.nodes < 1:
        problems.append(f"nodes must be a positive integer (got {spec.nodes!r})")
    elif spec.nodes > pool.nodes:
        problems.append(f"nodes {spec.nodes} exceeds pool {ref.key}'s {pool.nodes} nodes")
    if not _is_int(spec.gpus_per_node) or spec.gpus_per_node < 1:
        problems.append(f"gpus_per_node must be a positive integer (got {spec.gpus_per_node!r})")
    elif spec.gpus_per_node > pool.gpu.count:
        problems.append(
            f"gpus_per_node {spec.gpus_per_node} exceeds the {pool.gpu.count} "
            f"{pool.gpu.model} GPUs of a {pool.machine_type} node in pool {ref.key}"
        )
    if spec.priority_class is not None and (
        not isinstance(spec.priority_class, str)
        or len(spec.priority_class) > 253
        or not DNS1123_SUBDOMAIN.match(spec.priority_class)
    ):
        problems.append(f"priority_class {spec.priority_class!r} is not a valid PriorityClass name")
    if not _is_int(spec.master_port) or not 1 <= spec.master_port <= 65535:
        problems.append(f"master_port must be a port number (got {spec.master_port!r})")
    if not _is_int(spec.max_restarts) or spec.max_restarts < 0:
        problems.append(f"max_restarts must be >= 0 (got {spec.max_restarts!r})")
    if spec.run_id is not None and (not isinstance(spec.run_id, str) or not spec.run_id):
        problems.append("run_id must be a non-empty string when given")
    if not isinstance(spec.env, Mapping):
        problems.append("env must be a mapping of names to string values")
        return problems
    for key, value in spec.env.items():
        if not isinstance(key, str) or not _ENV_NAME.match(key):
            problems.append(f"env name {key!r} is not a valid environment variable name")
            continue
        if not isinstance(value, str):
            problems.append(f"env {key}: value must be a string (got {type(value).__name__})")
        if key in RENDEZVOUS_ENV:
            problems.append(
                f"env {key} is set by the platform from the JobSet (rendezvous) and cannot be "
                "overridden; remove it from env"
            )
        elif is_platform_env(key, plumbing):
            problems.append(
                f"env {key} is platform-owned (RDMA/NCCL plumbing: NCCL_NET, NCCL_DEBUG*, "
                "LD_LIBRARY_PATH, FI_* and the pool's NCCL tuning) and cannot be overridden by "
                "a training job; remove it from env"
            )
    return problems


def render_training_job(ref: PoolRef, spec: TrainingJobSpec) -> dict[str, Any]:
    """A Kueue-gang-admitted JobSet of ``spec.nodes`` workers on ``ref``'s pool.

    One replicatedJob ``workers`` (Indexed, one pod per node), NCCL_NET pinned to the pool's
    network, the nccl-log sidecar, the pool's Lustre PVC at its mount path with
    ``subPath: <namespace>/<name>``, and ``MASTER_ADDR`` (pod 0's DNS name), ``MASTER_PORT``,
    ``NNODES``, ``NODE_RANK`` (the completion index), ``GPUS_PER_NODE``. Raises ValueError
    listing every problem with the request.
    """
    cluster, pool = ref.cluster, ref.pool
    plumbing = pod_plumbing(cluster, pool, pin_network=True)
    problems = _training_problems(ref, spec, plumbing)
    if problems:
        raise ValueError(
            f"training job {spec.name!r} on {ref.key} is not valid:\n- " + "\n- ".join(problems)
        )
    run = run_label(spec.run_id or spec.name)
    base = {**_base_labels("training", run, pool), JOB_LABEL: spec.name}
    fs = ref.filesystem
    lustre = None
    if fs is not None:
        lustre = {
            "mount_path": fs.mount_path,
            "sub_path": f"{spec.namespace}/{spec.name}",
            "claim_name": pvc_name(fs),
        }
    annotations = {CLUSTER_ANNOTATION: cluster.name}
    if spec.run_id:
        annotations[RUN_ID_ANNOTATION] = spec.run_id
    rjob = TRAINING_REPLICATED_JOB
    obj = render_template(
        "training-jobset.yaml.j2",
        name=spec.name,
        namespace=spec.namespace,
        labels={**base, QUEUE_NAME_LABEL: pool.queue_name},
        pod_labels=base,
        annotations=annotations,
        ttl_seconds=TRAINING_TTL_SECONDS,
        max_restarts=spec.max_restarts,
        rjob=rjob,
        nodes=spec.nodes,
        gpus_per_node=spec.gpus_per_node,
        priority_class=spec.priority_class,
        node_selector={pool_label_key(cluster): pool.name},
        image=spec.image,
        command=list(spec.command),
        user_env=sorted(spec.env.items()),
        master_addr=f"{spec.name}-{rjob}-0-0.{spec.name}",
        master_port=spec.master_port,
        lustre=lustre,
    )
    for _, _, template in workload_pod_templates(obj):
        apply_plumbing(template, plumbing, container=TRAINER_CONTAINER)
        resources = template["spec"]["containers"][0]["resources"]
        for kind in ("limits", "requests"):
            resources[kind]["nvidia.com/gpu"] = str(spec.gpus_per_node)
    return obj


# --- add-on objects (onboarding) --------------------------------------------------------------


def _scale_quantity(quantity: str, factor: int) -> str:
    m = re.fullmatch(r"(\d+)([A-Za-z]*)", str(quantity))
    if not m:
        raise ValueError(f"cannot scale quantity {quantity!r}")
    return f"{int(m.group(1)) * factor}{m.group(2)}"


def kueue_names(pool: NodePool) -> dict[str, str]:
    """Names of a pool's Kueue objects: ResourceFlavor, ClusterQueue, LocalQueue."""
    return {
        "flavor": f"gpufleet-{pool.name}",
        "cluster_queue": f"gpufleet-{pool.name}",
        "local_queue": pool.queue_name,
    }


def render_kueue_objects(ref: PoolRef, namespace: str = TRAINING_NAMESPACE) -> list[dict[str, Any]]:
    """ResourceFlavor (the pool by its native node label), ClusterQueue (GPU quota = nodes x
    GPUs per node) and LocalQueue ``<pool.queue_name>`` in ``namespace``, for gang admission
    of training JobSets onto the pool."""
    cluster, pool = ref.cluster, ref.pool
    _check_namespace(namespace)
    per_pod = pod_plumbing(cluster, pool, pin_network=True).limits
    # cpu and memory are covered with a budget that never binds (the scheduler enforces node
    # capacity); Kueue refuses workloads requesting resources their ClusterQueue leaves out.
    quotas: dict[str, str] = {"cpu": str(pool.nodes * 1000), "memory": f"{pool.nodes * 16}Ti"}
    quotas["nvidia.com/gpu"] = str(pool.nodes * pool.gpu.count)
    for resource, value in sorted(per_pod.items()):
        if resource not in quotas:
            quotas[resource] = _scale_quantity(value, pool.nodes)
    names = kueue_names(pool)
    return render_template_all(
        "kueue-pool.yaml.j2",
        labels={MANAGED_BY_LABEL: MANAGED_BY, POOL_LABEL: pool.name},
        node_labels={pool_label_key(cluster): pool.name},
        quotas=list(quotas.items()),
        namespace=namespace,
        **names,
    )


def render_gke_networks(cluster: Cluster) -> list[dict[str, Any]]:
    """One GKENetworkParamSet (deviceMode RDMA) + Network (type Device) per RDMA subnet.

    Named after the subnets, which is what the pods' ``networking.gke.io/interfaces``
    annotation (``gpufleet.domain.plumbing.gke_interfaces``) refers to. GKE shape only: EKS exposes
    EFA through the device plugin and needs no network objects.
    """
    if cluster.shape != "gke":
        raise ValueError(
            f"cluster {cluster.name!r} has the {cluster.shape} shape; GKE network objects only "
            "apply to gke clusters (EKS attaches EFA through the EFA device plugin)"
        )
    subnets = [s.name for s in cluster.network.subnets[: cluster.network.rdma_nics]]
    return render_template_all(
        "gke-rdma-networks.yaml.j2",
        labels={MANAGED_BY_LABEL: MANAGED_BY, CLUSTER_LABEL: cluster.name},
        vpc=cluster.network.name,
        subnets=subnets,
    )


def render_ssh_secret(
    namespace: str = VALIDATION_NAMESPACE, *, name: str = NCCL_SSH_SECRET
) -> dict[str, Any]:
    """A ``kubernetes.io/ssh-auth`` Secret with a fresh ed25519 key for the nccl-tests pairs.

    The two pods of a pair mount it: each authorises the key's public half and the launcher
    uses it to start ranks on its peer (mpirun over ssh). Apply it once per validation
    namespace with create-if-absent semantics (a new key each call; an existing Secret is
    kept). It holds a private key: apply it directly, never pass it through XCom or logs.
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    _check_namespace(namespace)
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    ).decode()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {MANAGED_BY_LABEL: MANAGED_BY},
        },
        "type": "kubernetes.io/ssh-auth",
        "stringData": {"ssh-privatekey": private},
    }
