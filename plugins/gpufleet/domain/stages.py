"""Where a validation's GPU time goes: the stages of a validation pod's life, and the arithmetic
that turns what a cluster reports of a pod into seconds per stage and GPU-seconds per stage.

A validation pod takes every GPU of its node from the moment it is bound to the node (the
scheduler has counted the node's GPUs to it: nothing else is placed there) until its last
container has finished. Its life, in order:

==================  ==========================================================================
``scheduled``       created -> bound to its node (``PodScheduled``'s ``lastTransitionTime``).
                    Waiting for Kueue and the scheduler: **no GPU is held**, so it is reported
                    and never counted as GPU time.
``image_pull``      bound -> its image pulled: the kubelet's ``Pulled`` event (``Successfully
                    pulled image "x" in 4.043s``; 0 when ``already present on machine``).
``container_start`` the rest of bound -> first container started (sandbox, volumes, the
                    runtime; the whole gap when the pull's event was not read).
``gang``            first container started -> every rank up: the launcher's
                    ``[gpufleet] stage gang S`` line, printed when its rendezvous with the
                    pair's other pod completed (nccl-tests pods only).
``nccl_init``       NCCL's communicator init: the slowest rank's ``Init timings`` total.
``sweep``           the rest of the main container's run (mpirun starting the ranks, the
                    collectives over every size, the JSON printed).
``diag_r<N>``       a GPU health pod's main container: the health tools, then ``dcgmi diag
                    -r N`` (one stage per level, so each level's duration is its own figure).
``io``              a storage pod's main container: fio's write and read passes.
``teardown``        the main container finished -> the pod's last container finished (the
                    log sidecar stopped): the node is free again once the pod is terminal.
==================  ==========================================================================

``held_seconds`` is every stage but ``scheduled``: what a pod costs is that, times the GPUs of its
node (a pod holding a node counts the whole time: the accounting is never bent).

Pure: datetimes and numbers in, numbers out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

__all__ = [
    "BUCKETS_S",
    "HELD",
    "LAUNCH",
    "PREPULL_LABEL",
    "PodFacts",
    "Stage",
    "add_stages",
    "diag_stage",
    "held_seconds",
    "ordered",
    "per_node_minutes",
    "pod_stages",
    "prepull_images",
    "stage_gpu_seconds",
]


class Stage(StrEnum):
    SCHEDULED = "scheduled"
    IMAGE_PULL = "image_pull"
    CONTAINER_START = "container_start"
    GANG = "gang"
    NCCL_INIT = "nccl_init"
    SWEEP = "sweep"
    IO = "io"
    TEARDOWN = "teardown"


def diag_stage(level: int) -> str:
    """The stage of a GPU health pod's main container at ``dcgmi diag -r level``."""
    return f"diag_r{int(level)}"


# the stages of a pod's launch and end, whatever it runs: what pre-pulling, rendezvous and
# fewer pods per node can cut (the program's own work cannot be)
LAUNCH = (Stage.IMAGE_PULL, Stage.CONTAINER_START, Stage.GANG, Stage.TEARDOWN)
HELD = frozenset(s.value for s in Stage) - {Stage.SCHEDULED.value}  # plus every diag_r<N>
# histogram buckets of a stage's duration, seconds: a pre-pulled image's 0 to a burn-in's hours
BUCKETS_S: tuple[float, ...] = (0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200)


def _held(stage: str) -> bool:
    return stage != Stage.SCHEDULED


@dataclass(frozen=True)
class PodFacts:
    """What a cluster reports of one pod's life (UTC datetimes; None: not reported or not
    reached): created, bound (``PodScheduled``), first container started, its main container
    finished, every container finished; the image pull's seconds from the kubelet's event
    (None: not read); and ``marks``: stages measured inside the main container's run, in order,
    from its log (``gang`` from the launcher's line, ``nccl_init`` from NCCL's timings)."""

    created_at: datetime | None = None
    scheduled_at: datetime | None = None
    started_at: datetime | None = None
    main_finished_at: datetime | None = None
    finished_at: datetime | None = None
    pull_s: float | None = None
    marks: Mapping[str, float] = field(default_factory=dict)


def _seconds(later: datetime, earlier: datetime) -> float:
    return max((later - earlier).total_seconds(), 0.0)


def _finite(value: float | None) -> float:
    return value if value is not None and math.isfinite(value) and value > 0 else 0.0


def pod_stages(facts: PodFacts, work: str) -> dict[str, float]:
    """Seconds per stage of one finished pod, ``work`` naming its main container's own stage
    (``sweep``, ``io``, ``diag_r<N>``): what the measured stages leave of the main container's
    run. The held stages add up to the pod's held time exactly (bound -> last container
    finished); a stage a fact does not measure is 0, never guessed. Empty for a pod that never
    started or has not finished."""
    start, end = facts.started_at, facts.finished_at
    if start is None or end is None:
        return {}
    end = max(end, start)
    bound = facts.scheduled_at if facts.scheduled_at is not None else start
    bound = min(bound, start)
    out: dict[str, float] = {}
    if facts.created_at is not None and facts.scheduled_at is not None:
        out[Stage.SCHEDULED] = _seconds(facts.scheduled_at, facts.created_at)
    gap = _seconds(start, bound)
    pull = min(_finite(facts.pull_s), gap)
    out[Stage.IMAGE_PULL] = pull
    out[Stage.CONTAINER_START] = gap - pull
    main_end = facts.main_finished_at or end
    main_end = min(max(main_end, start), end)
    left = _seconds(main_end, start)
    for stage, seconds in facts.marks.items():
        take = min(_finite(seconds), left)
        out[stage] = out.get(stage, 0.0) + take
        left -= take
    out[work] = out.get(work, 0.0) + left
    out[Stage.TEARDOWN] = _seconds(end, main_end)
    return out


def held_seconds(stages: Mapping[str, float]) -> float:
    """The seconds a pod held its node: every stage but ``scheduled``."""
    return sum(v for k, v in stages.items() if _held(k))


def add_stages(total: dict[str, float], stages: Mapping[str, float], times: float = 1.0) -> None:
    """Add ``stages`` (times ``times``: a node's GPUs) into ``total`` in place."""
    for stage, seconds in stages.items():
        total[stage] = total.get(stage, 0.0) + seconds * times


def stage_gpu_seconds(pods: Iterable[Mapping[str, float]], gpus: int) -> dict[str, float]:
    """GPU-seconds per held stage over ``pods`` (each a ``pod_stages`` result) of ``gpus``-GPU
    nodes; their sum is what the pods cost (``scheduled`` holds no GPU and is left out)."""
    total: dict[str, float] = {}
    for stages in pods:
        add_stages(total, {k: v for k, v in stages.items() if _held(k)}, gpus)
    return total


def ordered(stages: Iterable[str]) -> list[str]:
    """Stage names in the order of a pod's life (the ``diag_r<N>`` stages by level, where a
    program's work goes; unknown names last, sorted)."""
    rank = {s.value: i for i, s in enumerate(Stage)}
    work_at = rank[Stage.SWEEP]

    def key(name: str) -> tuple[float, str]:
        if name in rank:
            return (float(rank[name]), name)
        if name.startswith("diag_r"):
            return (work_at + 0.5, name)
        return (float("inf"), name)

    return sorted(set(stages), key=key)


def per_node_minutes(
    rows: Iterable[tuple[Mapping[str, float], int]],
) -> dict[str, float]:
    """GPU-minutes per node per stage over validation rows, each given as (its GPU-minutes per
    stage, the nodes its cost is counted over): a pool's rows per node add up to what
    validating one of its nodes cost that night, as ``cost_details``' figures do."""
    out: dict[str, float] = {}
    for minutes, nodes in rows:
        if nodes <= 0:
            continue
        for stage, value in minutes.items():
            out[stage] = out.get(stage, 0.0) + value / nodes
    return {s: out[s] for s in ordered(out)}


# The label of the DaemonSet that pre-pulls the validation images onto every GPU node
# (``manifests.addons.prepull``): an image it pulls is present when a validation pod starts, so
# that pod's ``image_pull`` is 0 (what the sim models, and what a cluster's events then say).
PREPULL_LABEL = "gpufleet.io/image-prepull"


def prepull_images(daemonset: Mapping[str, Any]) -> list[str]:
    """The images a pre-pull DaemonSet pulls: its pod template's init containers' images."""
    spec = ((daemonset.get("spec") or {}).get("template") or {}).get("spec") or {}
    return [
        c["image"]
        for c in spec.get("initContainers") or ()
        if isinstance(c, dict) and isinstance(c.get("image"), str)
    ]
