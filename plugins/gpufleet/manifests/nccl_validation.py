"""The nightly fabric check's workload: a JobSet of 2-node nccl-tests pairs on one pool.

Design: docs/design/manifests.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpufleet.domain.fleet import PoolRef
from gpufleet.domain.plumbing import apply_plumbing, pod_plumbing
from gpufleet.domain.workloads import workload_pod_templates
from gpufleet.manifests.labels import (
    NCCL_SSH_SECRET,
    PAIR_LABEL,
    VALIDATION_NAMESPACE,
    check_namespace,
    check_node_name,
    validation_context,
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
    shape = cluster.shape
    default_image = nccl_tests_image(shape)
    image = image or default_image
    context = validation_context(ref, "nccl", "nccl", run_id)
    name, labels = context["name"], context["labels"]
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
        **context,
        namespace=namespace,
        active_deadline_seconds=NCCL_DEADLINE_SECONDS,
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
        wait_seconds=NCCL_PEER_WAIT_SECONDS,
        json_marker=NCCL_JSON_MARKER,
    )
    for _, _, template in workload_pod_templates(obj):
        apply_plumbing(template, plumbing, container=NCCL_CONTAINER)
    return obj
