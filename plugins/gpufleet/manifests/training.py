"""A training job as the platform launches it: a Kueue-gang-admitted JobSet on one pool.

Design: docs/design/manifests.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpufleet.domain.fleet import PoolRef
from gpufleet.domain.kueue import TopologyRequest, pool_topology, topology_request
from gpufleet.domain.launch_inputs import (
    command_problems,
    env_problems,
    image_problem,
    priority_class_problem,
)
from gpufleet.domain.names import DNS1035_LABEL, DNS1123_LABEL
from gpufleet.domain.plumbing import PodPlumbing, apply_plumbing, is_platform_env, pod_plumbing
from gpufleet.domain.topology import Place
from gpufleet.domain.workloads import avoid_nodes, pool_label_key, workload_pod_templates
from gpufleet.manifests.labels import (
    CLUSTER_ANNOTATION,
    JOB_LABEL,
    MAX_JOBSET_NAME,
    QUEUE_NAME_LABEL,
    RUN_ID_ANNOTATION,
    base_labels,
    pvc_name,
    run_label,
)
from gpufleet.manifests.templates import render_template

TRAINER_CONTAINER = "trainer"
TRAINING_REPLICATED_JOB = "workers"
TRAINING_TTL_SECONDS = 24 * 3600


@dataclass(frozen=True)
class TrainingJobSpec:
    """What an ML team asks for; the platform adds placement, fabric, storage and rendezvous.

    ``name`` becomes the JobSet name (DNS-1035 label, at most 40 characters). ``image`` is an
    OCI image reference, ``command`` and ``env`` are bounded, and ``env`` may not set
    platform-owned keys (NCCL_NET, NCCL_DEBUG*, LD_LIBRARY_PATH, FI_*, anything the pool's
    plumbing sets, and the rendezvous variables): ``gpufleet.domain.launch_inputs``, the launch
    request's own rules. ``priority_class`` is a PriorityClass name, never ``system-*`` (which
    ones a namespace may take, the launch request checks against the catalog).
    ``run_id`` (e.g. the launching DAG run) goes into the ``gpufleet.io/run`` label; without it
    the job name is used.
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
    if not isinstance(spec.name, str) or not DNS1035_LABEL.fullmatch(spec.name):
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
        or not DNS1123_LABEL.fullmatch(spec.namespace)
    ):
        problems.append(f"namespace {spec.namespace!r} is not a DNS-1123 label")
    if problem := image_problem(spec.image):
        problems.append(problem)
    problems += command_problems(spec.command)
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
    # its name, never system-*; which classes the namespace may take is the request's check
    # (with the namespace's: ``services.launch.request``), as is the namespace itself
    if problem := priority_class_problem(spec.priority_class, None, ref.cluster.name, ""):
        problems.append(problem)
    if not _is_int(spec.master_port) or not 1 <= spec.master_port <= 65535:
        problems.append(f"master_port must be a port number (got {spec.master_port!r})")
    if not _is_int(spec.max_restarts) or spec.max_restarts < 0:
        problems.append(f"max_restarts must be >= 0 (got {spec.max_restarts!r})")
    if spec.run_id is not None and (not isinstance(spec.run_id, str) or not spec.run_id):
        problems.append("run_id must be a non-empty string when given")
    problems += env_problems(spec.env, lambda key: is_platform_env(key, plumbing))
    return problems


def training_topology(
    ref: PoolRef, nodes: int, free_places: Iterable[Place | None] = ()
) -> TopologyRequest | None:
    """What a job of ``nodes`` nodes on ``ref``'s pool asks Kueue for (None: a pool without
    topology labels asks for nothing), from the places of the pool's free nodes."""
    topology = pool_topology(ref.cluster, ref.pool)
    return topology_request(topology, nodes, free_places) if topology else None


def render_training_job(
    ref: PoolRef,
    spec: TrainingJobSpec,
    free_places: Iterable[Place | None] = (),
    avoid: Iterable[str] = (),
) -> dict[str, Any]:
    """A Kueue-gang-admitted JobSet of ``spec.nodes`` workers on ``ref``'s pool.

    One replicatedJob ``workers`` (Indexed, one pod per node), NCCL_NET pinned to the pool's
    network, the nccl-log sidecar, the pool's Lustre PVC at its mount path with
    ``subPath: <name>`` (the namespace's volume is rooted at ``/<namespace>``), and
    ``MASTER_ADDR`` (pod 0's DNS name), ``MASTER_PORT``,
    ``NNODES``, ``NODE_RANK`` (the completion index), ``GPUS_PER_NODE``. On a pool with a
    topology, the topology annotation ``training_topology`` gives, from ``free_places`` (the
    places of the pool's free nodes; none known: a preference for one block). ``avoid``: nodes
    no pod may run on (required node affinity, hostname ``NotIn``: those the latest GPU health
    check failed and left in service). Raises ValueError listing every problem with the
    request.
    """
    cluster, pool = ref.cluster, ref.pool
    plumbing = pod_plumbing(cluster, pool, pin_network=True)
    problems = _training_problems(ref, spec, plumbing)
    if problems:
        raise ValueError(
            f"training job {spec.name!r} on {ref.key} is not valid:\n- " + "\n- ".join(problems)
        )
    run = run_label(spec.run_id or spec.name)
    base = {**base_labels("training", run, pool), JOB_LABEL: spec.name}
    fs = ref.filesystem
    lustre = None
    if fs is not None:
        lustre = {
            "mount_path": fs.mount_path,
            # the namespace's PV is rooted at its own directory (onboarding): the job's below it
            "sub_path": spec.name,
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
    ask = training_topology(ref, spec.nodes, free_places)
    for _, _, template in workload_pod_templates(obj):
        if ask is not None:
            template["metadata"]["annotations"].update(ask.annotations)
        apply_plumbing(template, plumbing, container=TRAINER_CONTAINER)
        avoid_nodes(template, sorted(set(avoid)))
        resources = template["spec"]["containers"][0]["resources"]
        for kind in ("limits", "requests"):
            resources[kind]["nvidia.com/gpu"] = str(spec.gpus_per_node)
    return obj
