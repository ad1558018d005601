"""The night's checks in one pod per node: the steps a fabric round's pair pods run before the
pair's NCCL test (init containers, ``manifests.nccl_validation``), read back per node.

- **GPU health**: each pod of a pair whose node owes its check tonight runs the health tools
  and ``dcgmi diag`` at the pair's level (the higher of its two nodes': a pair's pods wait for
  each other, so the shorter check would only wait) in its ``gpu-health`` step. Its output is
  read as the health round's pod output is (``health.read_node``); a step that did not finish
  is a check that could not run, unless what it printed already shows a failure (unknown is
  never healthy, and a fault seen is never dropped).
- **Storage**: one pair of pass 1 runs the pool's storage check (fio on its two nodes) in its
  ``fio`` step, judged as the storage validation's own pods are (``storage.record_storage``).

Each step's time leaves the pair's cost for its own row: the GPU-seconds of the ``diag_r<N>``
stage go to the node's health check, those of ``io`` to the storage row, so the rows of a night
still add up to what its pods held, once.

Design: docs/design/gpu-health.md#one-pod-per-node.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpufleet.backends.base import ClusterBackend, PodInfo
from gpufleet.domain.fleet import PoolRef
from gpufleet.domain.stages import Stage, diag_stage
from gpufleet.errors import BackendError, ParseError
from gpufleet.manifests.gpu_health import HEALTH_CONTAINER
from gpufleet.manifests.storage_validation import FIO_CONTAINER
from gpufleet.parsing import parse_fio_json
from gpufleet.services.common.collect import PairRead, Workload, stage_details
from gpufleet.services.validation.health import NodeHealth, could_not_run, read_node
from gpufleet.services.validation.storage import POOL, record_storage
from gpufleet.store import Ledger

log = logging.getLogger(__name__)


def pair_levels(pairs: list[tuple[str, str]], owed: Mapping[str, int]) -> list[int]:
    """Each pair's GPU health level: the higher of what its two nodes owe (0: neither owes a
    check)."""
    return [max(owed.get(a, 0), owed.get(b, 0)) for a, b in pairs]


def pair_steps(wl: Workload, index: int) -> dict[str, str]:
    """The steps pair ``index`` of ``wl`` ran: init container -> its stage."""
    steps: dict[str, str] = {}
    level = wl.levels[index] if index < len(wl.levels) else 0
    if level:
        steps[HEALTH_CONTAINER] = diag_stage(level)
    if wl.pool_check == index:
        steps[FIO_CONTAINER] = Stage.IO
    return steps


@dataclass
class RoundSteps:
    """What a round's steps said: each node's health check (``health``), the storage check's
    clients' fio results and the first failure (``fio``/``fio_failure``; ``fio_pods``: its pods),
    and the GPU-seconds the steps held (off the pair's cost)."""

    health: dict[str, NodeHealth] = field(default_factory=dict)
    fio: list[Any] = field(default_factory=list)
    fio_failure: str | None = None
    fio_pods: list[PodInfo] = field(default_factory=list)
    fio_s: dict[str, float] = field(default_factory=dict)  # node -> its fio step's seconds
    gpu_seconds: float = 0.0


def _pod_on(read: PairRead, node: str) -> PodInfo | None:
    return next((p for p in read.pods if p.node == node), None)


def _why_not(pod: PodInfo | None, step: str) -> str:
    if pod is None:
        return "its pod was never placed"
    why = f"its {step} step did not finish: its pod is {pod.phase}"
    return why + (f" ({pod.message})" if pod.message else "")


def read_steps(
    backend: ClusterBackend, ref: PoolRef, wl: Workload, reads: list[PairRead]
) -> RoundSteps:
    """Read every step of the round ``wl`` (``reads``: its pairs, in order)."""
    out = RoundSteps()
    gpus = ref.pool.gpu.count
    for index, (pair, read) in enumerate(zip(wl.pairs, reads, strict=True)):
        steps = pair_steps(wl, index)
        for node in pair:
            pod = _pod_on(read, node)
            if HEALTH_CONTAINER in steps:
                level = wl.levels[index]
                out.health[node] = _read_health(backend, wl, pod, node, level)
                seconds = pod.init_seconds.get(HEALTH_CONTAINER, 0.0) if pod else 0.0
                out.health[node].gpu_seconds = seconds * gpus
                out.health[node].stages = {diag_stage(level): round(seconds, 3)} if seconds else {}
                out.gpu_seconds += seconds * gpus
            if FIO_CONTAINER in steps:
                _read_fio(backend, wl, pod, node, out)
                out.gpu_seconds += out.fio_s.get(node, 0.0) * gpus
    return out


def _read_health(
    backend: ClusterBackend, wl: Workload, pod: PodInfo | None, node: str, level: int
) -> NodeHealth:
    if pod is None or pod.phase == "Pending":
        return could_not_run(level, _why_not(pod, "GPU health"))
    try:
        text = backend.pod_logs(pod.name, wl.namespace, HEALTH_CONTAINER)
    except BackendError as exc:  # a step that never started has no log to read
        return could_not_run(level, f"{_why_not(pod, 'GPU health')}; its log: {exc}")
    check = read_node(text, node, level)
    if HEALTH_CONTAINER not in pod.init_seconds and not check.failed:
        return could_not_run(level, _why_not(pod, "GPU health"))
    return check


def _read_fio(
    backend: ClusterBackend, wl: Workload, pod: PodInfo | None, node: str, out: RoundSteps
) -> None:
    if pod is not None:
        out.fio_pods.append(pod)
    if pod is None or FIO_CONTAINER not in pod.init_seconds:
        out.fio_failure = out.fio_failure or f"fio on {node}: {_why_not(pod, 'fio')}"
        return
    out.fio_s[node] = pod.init_seconds[FIO_CONTAINER]
    try:
        out.fio.append(parse_fio_json(backend.pod_logs(pod.name, wl.namespace, FIO_CONTAINER)))
    except (ParseError, BackendError) as exc:
        out.fio_failure = out.fio_failure or f"fio on {node}: {exc}"


def merge_check(before: Mapping[str, Any] | None, check: NodeHealth) -> NodeHealth:
    """A node's check after another step ran on it tonight (its pair's partner owed one): the
    new reading when there was no active check before (none, a passive read, a rested node's),
    when the first could not run, or when the new one found a failure (a fault seen is never
    dropped); else the first. Either way the steps' GPU-seconds and stages add up."""
    if before is None:
        return check
    first = NodeHealth.from_dict(before)
    active = first.level > 0 and not first.rested and not first.could_not_run
    kept = first if active and not check.failed else check
    total = first.gpu_seconds + check.gpu_seconds
    stages = dict(first.stages)
    for stage, seconds in check.stages.items():
        stages[stage] = round(stages.get(stage, 0.0) + seconds, 3)
    kept.gpu_seconds, kept.stages = total, stages
    return kept


def record_pool_check(  # noqa: PLR0913  one pool check's facts, by keyword
    ledger: Ledger,
    ref: PoolRef,
    steps: RoundSteps,
    *,
    run_id: str,
    started_at: datetime,
    cost_nodes: int,
    full_test: str | None,
) -> None:
    """Record the storage row of the pool check the round's ``fio`` steps ran."""
    gpus = ref.pool.gpu.count
    per_node = {n: {Stage.IO.value: round(s, 3)} for n, s in steps.fio_s.items()}
    record_storage(
        ledger,
        ref,
        run_id=run_id,
        started_at=started_at,
        scope=POOL,
        results=steps.fio,
        failure=steps.fio_failure,
        clients=len(steps.fio_pods),
        gpu_s=sum(steps.fio_s.values()) * gpus,
        cost_nodes=cost_nodes,
        stages=stage_details(per_node.values(), gpus, nodes=per_node, ran_in="fabric pairs"),
        full_test=full_test,
    )
