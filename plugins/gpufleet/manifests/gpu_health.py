"""The nightly GPU health check's workload: a JobSet of one pod per node running NVIDIA's tools.

``render_gpu_health`` renders ``include/manifests/gpu-health.yaml.j2``: one replicatedJob
``node-<i>`` per node, a Job of one pod pinned to the node and holding all of its GPUs, which
prints the kernel log's NVRM lines, ``nvidia-smi -q -d ROW_REMAPPER,ECC``, ``nvidia-smi nvlink
-e``, the GPUs' thermal slowdown reasons and ``dcgmi diag -r <level> -j`` under the marker lines
``gpufleet.parsing.health.report`` reads (``parse_node_health``). Each node has its own run level
(``gpufleet.domain.health.tiers``). ``DEFAULT_DCGM_IMAGE`` is NVIDIA's DCGM image, tag pinned;
override it with ``image=``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpufleet.domain.fleet import PoolRef
from gpufleet.domain.health.tiers import DIAG_LEVELS
from gpufleet.manifests.labels import (
    VALIDATION_NAMESPACE,
    check_namespace,
    check_node_name,
    validation_context,
)
from gpufleet.manifests.templates import render_template
from gpufleet.parsing.health.report import MARKER

DEFAULT_DCGM_IMAGE = "nvcr.io/nvidia/cloud-native/dcgm:4.1.1-2-ubuntu22.04"
HEALTH_CONTAINER = "gpu-health"
HEALTH_NODE_ANNOTATION = "gpufleet.io/health-node"
# per node Job: image pull, the tools, and dcgmi diag at the level (DCGM's guidance: level 3
# about 15 minutes, level 4 up to 2 hours)
DEADLINE_SECONDS = {1: 900, 2: 1200, 3: 3600, 4: 3 * 3600}


def render_gpu_health(
    ref: PoolRef,
    levels: Mapping[str, int],
    run_id: str,
    *,
    namespace: str = VALIDATION_NAMESPACE,
    image: str = DEFAULT_DCGM_IMAGE,
) -> dict[str, Any]:
    """A JobSet checking each node of ``levels`` (node -> ``dcgmi diag`` run level) of
    ``ref``'s pool, in the order given."""
    check_namespace(namespace)
    if not levels or not isinstance(levels, Mapping):
        raise ValueError("levels is empty: give each node to check its dcgmi diag run level")
    context = validation_context(ref, "health", "health", run_id)
    jobs = []
    for i, (node, level) in enumerate(levels.items()):
        check_node_name(node, f"levels[{i}]")
        if isinstance(level, bool) or level not in DIAG_LEVELS:
            raise ValueError(f"node {node}: dcgmi diag runs at level 1, 2, 3 or 4, not {level!r}")
        jobs.append(
            {
                "rjob": f"node-{i}",
                "node": node,
                "level": level,
                "deadline": DEADLINE_SECONDS[level],
                "labels": context["labels"],
            }
        )
    prefix, suffix = MARKER.split("{}")
    return render_template(
        "gpu-health.yaml.j2",
        **context,
        namespace=namespace,
        jobs=jobs,
        image=image,
        gpus=ref.pool.gpu.count,
        marker_prefix=prefix,
        marker_suffix=suffix,
    )
