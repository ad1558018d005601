"""The nightly GPU health check's workload: a JobSet of one pod per node running NVIDIA's tools.

``render_gpu_health`` renders ``include/manifests/gpu-health.yaml.j2``: one replicatedJob
``node-<i>`` per node, a Job of one pod pinned to the node and holding all of its GPUs, which
prints the kernel log's NVRM lines, ``nvidia-smi -q -d ROW_REMAPPER,ECC,PAGE_RETIREMENT``,
``nvidia-smi nvlink -e``, the GPUs' thermal slowdown reasons and ``dcgmi diag -r <level> -j``
under the marker lines ``gpufleet.parsing.health.report`` reads (``parse_node_health``). Each
node has its own run level (``gpufleet.domain.health.tiers``). Each tool runs under ``timeout
--kill-after=10``: ``dcgmi diag`` under its level's hard timeout for the pool's GPU model
(``tiers.diag_timeout``, or the catalog's ``DcgmLimits`` given as ``limits``), the quick tools
under ``tiers.TOOL_TIMEOUT_S``; after each, the pod prints ``gpufleet-health-exit=<status>``
on a line of its own, and the node line says the timeout (``node=<n> level=<l>
timeout=<s>``). ``DEFAULT_DCGM_IMAGE`` is NVIDIA's DCGM image, tag pinned;
override it with ``image=``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpufleet.domain.fleet import PoolRef
from gpufleet.domain.health.tiers import (
    DIAG_LEVELS,
    KILL_AFTER_S,
    TOOL_TIMEOUT_S,
    DcgmLimits,
    default_limits,
    diag_timeout,
)
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
# about 15 minutes, level 4 up to 2 hours); each above the level's default hard timeout plus the
# quick tools' (job_deadline), so the tools' own timeouts end first and say so
DEADLINE_SECONDS = {1: 900, 2: 1800, 3: 3600, 4: 3 * 3600}
EXIT_PREFIX = "gpufleet-health-exit="  # the line after each tool: its exit status
# the four quick tools, each under its timeout and kill grace, and the pod's start
_REST_S = 4 * (TOOL_TIMEOUT_S + KILL_AFTER_S) + 300


def job_deadline(level: int, timeout_s: int) -> int:
    """The node's Job deadline: its level's, or longer when ``dcgmi diag``'s timeout (plus the
    kill grace, the quick tools' timeouts and the pod's start) needs it, so the tool's own
    timeout ends it first and says so."""
    return max(DEADLINE_SECONDS[level], timeout_s + KILL_AFTER_S + _REST_S)


def level_timeout(limits: DcgmLimits, level: int, where: str) -> int:
    """``dcgmi diag``'s hard timeout (seconds) at ``level`` under ``limits``, once the level is
    checked: 1 to 4, and not above the model's highest (``where`` starts the ValueError)."""
    if isinstance(level, bool) or level not in DIAG_LEVELS:
        raise ValueError(f"{where}: dcgmi diag runs at level 1, 2, 3 or 4, not {level!r}")
    if level > limits.max_level:
        raise ValueError(
            f"{where}: level {level} is above {limits.model}'s highest dcgmi diag level "
            f"{limits.max_level}: cap it (gpufleet.domain.health.tiers.plan_diag)"
        )
    return diag_timeout(limits, level)


def script_context() -> dict[str, Any]:
    """The fixed arguments of ``gpu_health_script`` (``include/manifests/_gpu_health_script.j2``,
    the one source of the script): the parser's marker around each section's name, the exit
    line's prefix, the quick tools' timeout and timeout's kill grace."""
    prefix, suffix = MARKER.split("{}")
    return {
        "marker_prefix": prefix,
        "marker_suffix": suffix,
        "exit_prefix": EXIT_PREFIX,
        "tool_timeout": TOOL_TIMEOUT_S,
        "kill_after": KILL_AFTER_S,
    }


def render_gpu_health(
    ref: PoolRef,
    levels: Mapping[str, int],
    run_id: str,
    *,
    namespace: str = VALIDATION_NAMESPACE,
    image: str = DEFAULT_DCGM_IMAGE,
    limits: DcgmLimits | None = None,
) -> dict[str, Any]:
    """A JobSet checking each node of ``levels`` (node -> ``dcgmi diag`` run level) of
    ``ref``'s pool, in the order given. ``limits``: the pool's GPU model's (the catalog's
    ``Catalog.dcgm_limits``; None: the built-in defaults of ``ref.pool.gpu.model``): each
    level's hard timeout, and the highest level allowed (a higher one is refused: the level is
    capped before, by ``tiers.plan_diag``)."""
    limits = limits or default_limits(ref.pool.gpu.model)
    check_namespace(namespace)
    if not levels or not isinstance(levels, Mapping):
        raise ValueError("levels is empty: give each node to check its dcgmi diag run level")
    context = validation_context(ref, "health", "health", run_id)
    jobs = []
    for i, (node, level) in enumerate(levels.items()):
        check_node_name(node, f"levels[{i}]")
        timeout_s = level_timeout(limits, level, f"node {node}")
        jobs.append(
            {
                "rjob": f"node-{i}",
                "node": node,
                "level": level,
                "timeout": timeout_s,
                "deadline": job_deadline(level, timeout_s),
                "labels": context["labels"],
            }
        )
    return render_template(
        "gpu-health.yaml.j2",
        **context,
        namespace=namespace,
        jobs=jobs,
        image=image,
        gpus=ref.pool.gpu.count,
        **script_context(),
    )
