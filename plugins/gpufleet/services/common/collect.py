"""Read what a workload printed: nccl-tests results and every rank's NCCL INFO log; the
``Workload`` a validation submitted, as it travels between rounds.

A container a pod does not have (a pod template that lost its log sidecar) is the backend's
``BackendError``, not caught here: the validation cannot finish, and the operator records it
as an ``error`` verdict."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from gpufleet.backends.base import ClusterBackend, PodInfo
from gpufleet.domain.nccl_init import init_alarms
from gpufleet.domain.workloads import (
    COMPLETION_INDEX_LABEL,
    JOBSET_NAME_LABEL,
    REPLICATED_JOB_LABEL,
)
from gpufleet.errors import ParseError
from gpufleet.manifests.nccl_validation import NCCL_JSON_MARKER
from gpufleet.parsing import classify_nccl_log, parse_nccl_tests_any
from gpufleet.parsing.nccl_log.init_timings import InitTimings, read_init_timings


@dataclass
class Workload:
    """A validation's submitted workload: ``pairs`` (fabric: node pairs, in replicatedJob
    order) or ``nodes`` (storage: the fio clients)."""

    kind: str
    name: str
    namespace: str
    pairs: list[list[str]] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Workload | None:
        if data is None:
            return None
        return cls(
            kind=data["kind"],
            name=data["name"],
            namespace=data["namespace"],
            pairs=[list(p) for p in data.get("pairs") or ()],
            nodes=list(data.get("nodes") or ()),
        )


def gpu_seconds(pods: list[PodInfo], gpus_per_node: int) -> float:
    """GPU-seconds a workload's ``pods`` held: each placed pod holds every GPU of its node
    (validation pods take whole nodes) from its containers' start to their finish, as the
    cluster reports them (``PodInfo.run_seconds``; a pod that never ran holds nothing)."""
    return sum(p.run_seconds or 0.0 for p in pods if p.node) * gpus_per_node


def cost_details(seconds: float, nodes: int) -> dict[str, float | int | None]:
    """A validation row's cost ``details``: its GPU-minutes, the pool's nodes it is counted
    over (``cost_nodes``: those the night validates), and per node. A pool's fabric and
    storage figures per node add up to what validating one of its nodes cost that night."""
    minutes = seconds / 60
    return {
        "gpu_minutes": round(minutes, 3),
        "cost_nodes": nodes,
        "gpu_minutes_per_node": round(minutes / nodes, 3) if nodes > 0 else None,
    }


def pod_index(pod: PodInfo) -> int:
    try:
        return int(pod.labels.get(COMPLETION_INDEX_LABEL, "0"))
    except ValueError:
        return 0


def parse_results(text: str) -> Any:
    """The nccl-tests run in a launcher's output: text first, the -J JSON as a fallback."""
    body, _, json_part = text.partition(NCCL_JSON_MARKER)
    try:
        result = parse_nccl_tests_any(body)
        if result.runs:
            return result.runs[-1]
    except ParseError:
        pass
    if json_part.strip():
        result = parse_nccl_tests_any(json_part)
        if result.runs:
            return result.runs[-1]
    raise ParseError("nccl-tests printed no results")


def rank_logs(
    backend: ClusterBackend, pods: list[PodInfo], namespace: str, container: str
) -> list[str]:
    """Each pod's NCCL INFO lines, as streamed by its log sidecar."""
    return [backend.pod_logs(p.name, namespace, container) for p in pods if p.node]


def read_nccl_pair(
    backend: ClusterBackend, wl: Workload, index: int, log_container: str
) -> tuple[Any | None, Any | None, str | None]:
    """(parsed nccl-tests run, classified NCCL log, failure in words) for pair ``index``."""
    run, info, _, failure = read_nccl_pair_init(backend, wl, index, log_container)
    return run, info, failure


def read_nccl_pair_init(
    backend: ClusterBackend, wl: Workload, index: int, log_container: str
) -> tuple[Any | None, Any | None, InitTimings, str | None]:
    """:func:`read_nccl_pair` and the ranks' NCCL init timings, read from the same logs."""
    selector = f"{JOBSET_NAME_LABEL}={wl.name},{REPLICATED_JOB_LABEL}=pair-{index}"
    pods = sorted(backend.list_pods(wl.namespace, selector), key=pod_index)
    if not pods:
        return None, None, InitTimings(), "the pair's pods were never created"
    failure = None
    failed = [p for p in pods if p.phase == "Failed"]
    if failed:
        failure = f"pod {failed[0].name} failed: {failed[0].message or 'no message'}"
    elif any(p.phase != "Succeeded" for p in pods):
        failure = "the pair did not finish: " + ", ".join(f"{p.name} {p.phase}" for p in pods)
    run = None
    launcher = pods[0]
    if launcher.node:
        try:
            run = parse_results(backend.pod_logs(launcher.name, wl.namespace))
        except ParseError as exc:
            failure = failure or str(exc)
    lines = "\n".join(rank_logs(backend, pods, wl.namespace, log_container)).splitlines()
    try:
        info = classify_nccl_log(lines)
    except ParseError:  # no NCCL output at all: the verdict says the transport is unknown
        info = None
    return run, info, read_init_timings(lines), failure


def init_alarm_notes(init: InitTimings) -> list[str]:
    """The alarms (``domain.nccl_init``) the slowest ranks' init phases raise, as notes."""
    summary = init.summary()
    slowest = {phase: (f.max, f.where) for phase, f in summary.items()}
    return [a.note for a in init_alarms(slowest, {p: f.median for p, f in summary.items()})]
