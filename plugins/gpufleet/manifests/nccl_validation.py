"""The nightly fabric check's workload: a JobSet of 2-node nccl-tests pairs on one pool.

Design: docs/design/manifests.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpufleet.domain.fleet import PoolRef
from gpufleet.domain.health.tiers import DcgmLimits
from gpufleet.domain.plumbing import apply_plumbing, pod_plumbing
from gpufleet.domain.workloads import workload_pod_templates
from gpufleet.manifests.gpu_health import (
    DEFAULT_DCGM_IMAGE,
    HEALTH_CONTAINER,
    job_deadline,
    level_timeout,
    script_context,
)
from gpufleet.manifests.labels import (
    NCCL_SSH_SECRET,
    PAIR_LABEL,
    VALIDATION_NAMESPACE,
    check_namespace,
    check_node_name,
    validation_context,
)
from gpufleet.manifests.storage_validation import (
    DEFAULT_FIO_IMAGE,
    FIO_CONTAINER,
    STORAGE_DEADLINE_SECONDS,
    PoolCheck,
    fio_context,
)
from gpufleet.manifests.templates import render_template

# The line the launcher prints between the nccl-tests text and its -J JSON.
NCCL_JSON_MARKER = "=== gpufleet nccl-tests json ==="
NCCL_CONTAINER = "nccl-tests"
NCCL_DEADLINE_SECONDS = 1800  # per pair Job: image pull + ssh + an 8 GiB sweep
NCCL_SSH_PORT = 2222
NCCL_PEER_WAIT_SECONDS = 900

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


def nccl_tests_image(shape: str) -> str:
    """The default nccl-tests image for a provider shape (``gke`` or ``eks``)."""
    try:
        return DEFAULT_NCCL_TESTS_IMAGES[shape]
    except KeyError:
        raise ValueError(f"no nccl-tests image for shape {shape!r} (gke, eks)") from None


def _check_pairs(pairs: Sequence[Sequence[str]]) -> list[tuple[str, str]]:
    if not pairs:
        raise ValueError("pairs is empty: give at least one (node, node) pair")
    out: list[tuple[str, str]] = []
    seen: dict[str, int] = {}
    for i, pair in enumerate(pairs):
        if isinstance(pair, str) or len(pair) != 2:
            raise ValueError(f"pairs[{i}]: expected two node names, got {pair!r}")
        a = check_node_name(pair[0], f"pairs[{i}][0]")
        b = check_node_name(pair[1], f"pairs[{i}][1]")
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


def _health_steps(
    limits: DcgmLimits, count: int, health_levels: Sequence[int] | None
) -> list[dict[str, int] | None]:
    """Each pair's health step: its ``dcgmi diag`` level, hard timeout and the health JobSet's
    Job deadline for them; None where the level is 0 (or no levels are given)."""
    if health_levels is None:
        return [None] * count
    if isinstance(health_levels, str | bytes) or len(health_levels) != count:
        got = "a string" if isinstance(health_levels, str | bytes) else len(health_levels)
        raise ValueError(
            f"health_levels gives {got} levels for {count} pairs: one level (0: no health "
            "step) per pair"
        )
    steps: list[dict[str, int] | None] = []
    for i, level in enumerate(health_levels):
        if isinstance(level, bool) or not isinstance(level, int) or not 0 <= level <= 4:
            raise ValueError(
                f"health_levels[{i}]: a dcgmi diag level 1 to 4, or 0 for no health step, "
                f"not {level!r}"
            )
        if level == 0:
            steps.append(None)
            continue
        timeout_s = level_timeout(limits, level, f"health_levels[{i}]")
        steps.append(
            {"level": level, "timeout": timeout_s, "deadline": job_deadline(level, timeout_s)}
        )
    return steps


def _fio_step(
    ref: PoolRef, run_id: str, count: int, pool_check: PoolCheck | None
) -> tuple[int | None, dict[str, Any] | None]:
    """(the pair that runs fio, the fio script's and pod's context), or (None, None)."""
    if pool_check is None:
        return None, None
    if not isinstance(pool_check, PoolCheck):
        raise ValueError(f"pool_check must be a PoolCheck, not {type(pool_check).__name__}")
    pair = pool_check.pair
    if isinstance(pair, bool) or not isinstance(pair, int) or not 0 <= pair < count:
        raise ValueError(
            f"pool_check.pair {pair!r} is not a pair index: give 0 to {count - 1} ({count} pairs)"
        )
    context = fio_context(ref, run_id, pool_check.size_gib_per_node, pool_check.runtime_seconds)
    return pair, context


def render_nccl_validation(  # noqa: PLR0913  keyword-only knobs of one rendered validation
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
    health_levels: Sequence[int] | None = None,
    health_image: str | None = None,
    dcgm_limits: DcgmLimits | None = None,
    pool_check: PoolCheck | None = None,
) -> dict[str, Any]:
    """A JobSet running ``<collective>_perf`` on every (node, node) pair of ``ref``'s pool.

    One replicatedJob ``pair-<i>`` per pair (``i`` = index in ``pairs``): 2 pods pinned to the
    pool and to the pair's nodes, one per node. Pod 0 launches mpirun over both pods
    (``gpus_per_node`` ranks each), prints the nccl-tests text on stdout, then
    ``NCCL_JSON_MARKER`` and the ``-J`` JSON. NCCL_NET is not pinned. ``image`` defaults to
    the shape's ``DEFAULT_NCCL_TESTS_IMAGES`` entry; ``tests_dir`` to where that image keeps
    the binaries (the script also looks on PATH). The pods need the ``ssh_secret`` Secret in
    ``namespace`` (``render_ssh_secret``).

    One pod per node for the whole night: init containers run before ``nccl-tests``, in order.

    - ``health_levels`` (one per pair; 0: none): both pods of pair ``i`` first run the GPU
      health check's script at ``dcgmi diag`` level ``health_levels[i]`` in an init container
      ``HEALTH_CONTAINER`` (image ``health_image``, default ``DEFAULT_DCGM_IMAGE``), under the
      level's hard timeout of ``dcgm_limits`` (default ``ref.dcgm_limits``), as
      ``render_gpu_health``'s pods do. It exits 0 whatever the tools said.
    - ``pool_check``: both pods of pair ``pool_check.pair`` then run the storage check's fio
      (an init container ``FIO_CONTAINER`` on the pool's filesystem PVC, as
      ``render_storage_validation``'s pods do), which always exits 0: a failure leaves no JSON.

    A pair's Job deadline (and its launcher's wait for the peer, whose steps may take longer)
    grows by the health JobSet's deadline at its level and the storage Job's deadline.
    """
    cluster, pool = ref.cluster, ref.pool
    check_namespace(namespace)
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
    health = _health_steps(dcgm_limits or ref.dcgm_limits, len(checked), health_levels)
    fio_pair, fio = _fio_step(ref, run_id, len(checked), pool_check)
    shape = cluster.shape
    default_image = nccl_tests_image(shape)
    image = image or default_image
    context = validation_context(ref, "nccl", "nccl", run_id)
    name, labels = context["name"], context["labels"]
    plumbing = pod_plumbing(cluster, pool, pin_network=False)
    pair_ctx = []
    for i, (a, b) in enumerate(checked):
        rjob = f"pair-{i}"
        # the steps before nccl-tests: their deadlines on top of the pair's
        step = health[i]
        steps = (step["deadline"] if step else 0) + (
            STORAGE_DEADLINE_SECONDS if fio_pair == i else 0
        )
        pair_ctx.append(
            {
                "rjob": rjob,
                "nodes": [a, b],
                "labels": {**labels, PAIR_LABEL: str(i)},
                # JobSet DNS (enableDNSHostnames): <jobset>-<rjob>-<job index>-<pod index>.<jobset>
                "launcher": f"{name}-{rjob}-0-0.{name}",
                "worker": f"{name}-{rjob}-0-1.{name}",
                "deadline": NCCL_DEADLINE_SECONDS + steps,
                # the peer's steps may end later than the launcher's: wait for them too
                "wait_seconds": NCCL_PEER_WAIT_SECONDS + steps,
                "health": step,
                "fio": fio_pair == i,
            }
        )
    obj = render_template(
        "nccl-validation.yaml.j2",
        **context,
        namespace=namespace,
        pairs=pair_ctx,
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
        json_marker=NCCL_JSON_MARKER,
        health_container=HEALTH_CONTAINER,
        health_image=health_image or DEFAULT_DCGM_IMAGE,
        health_script=script_context(),
        fio_container=FIO_CONTAINER,
        fio_image=DEFAULT_FIO_IMAGE,
        fio=fio,
    )
    for _, _, template in workload_pod_templates(obj):
        apply_plumbing(template, plumbing, container=NCCL_CONTAINER)
    return obj
