"""Read what a workload printed: nccl-tests results and every rank's NCCL INFO log."""

from __future__ import annotations

from typing import Any

from gpufleet.backends.base import ClusterBackend, PodInfo
from gpufleet.domain.workloads import (
    COMPLETION_INDEX_LABEL,
    JOBSET_NAME_LABEL,
    REPLICATED_JOB_LABEL,
)
from gpufleet.errors import ParseError
from gpufleet.manifests.nccl_validation import NCCL_JSON_MARKER
from gpufleet.parsing import classify_nccl_log, parse_nccl_tests_any


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
    backend: ClusterBackend, wl: dict[str, Any], index: int, log_container: str
) -> tuple[Any | None, Any | None, str | None]:
    """(parsed nccl-tests run, classified NCCL log, failure in words) for pair ``index``."""
    selector = f"{JOBSET_NAME_LABEL}={wl['name']},{REPLICATED_JOB_LABEL}=pair-{index}"
    pods = sorted(backend.list_pods(wl["namespace"], selector), key=pod_index)
    if not pods:
        return None, None, "the pair's pods were never created"
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
            run = parse_results(backend.pod_logs(launcher.name, wl["namespace"]))
        except ParseError as exc:
            failure = failure or str(exc)
    logs = rank_logs(backend, pods, wl["namespace"], log_container)
    try:
        info = classify_nccl_log("\n".join(logs).splitlines())
    except ParseError:  # no NCCL output at all: the verdict says the transport is unknown
        info = None
    return run, info, failure
