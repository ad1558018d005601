"""Read what a workload printed: nccl-tests results and every rank's NCCL INFO log; the
``Workload`` a validation submitted, as it travels between rounds.

A container a pod does not have (a pod template that lost its log sidecar) is the backend's
``BackendError``, not caught here: the validation cannot finish, and the operator records it
as an ``error`` verdict."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

from gpufleet.backends.base import ClusterBackend, PodInfo
from gpufleet.domain.nccl_init import init_alarms
from gpufleet.domain.stages import PodFacts, Stage, pod_stages, stage_gpu_seconds
from gpufleet.domain.workloads import (
    COMPLETION_INDEX_LABEL,
    JOBSET_NAME_LABEL,
    REPLICATED_JOB_LABEL,
)
from gpufleet.errors import BackendError, ParseError
from gpufleet.manifests.nccl_validation import NCCL_JSON_MARKER
from gpufleet.parsing import classify_nccl_log, parse_nccl_tests_any
from gpufleet.parsing.nccl_log.init_timings import InitTimings, read_init_timings

log = logging.getLogger(__name__)

# the launcher's line at its rendezvous with the pair's other pod (nccl-validation.yaml.j2):
# seconds since its script started, which is the ``gang`` stage (domain.stages)
GANG_RE = re.compile(r"\[gpufleet\] stage gang (\d+(?:\.\d+)?)")


@dataclass
class Workload:
    """A validation's submitted workload: ``pairs`` (fabric: node pairs, in replicatedJob
    order) or ``nodes`` (storage: the fio clients). A fabric round's steps (the checks its
    pods run before the pair's test, ``services.validation.steps``): ``levels``, each pair's
    GPU health level (0: none; empty: no pair has one), and ``pool_check``, the pair whose
    pods run the storage pool check's fio (None: none)."""

    kind: str
    name: str
    namespace: str
    pairs: list[list[str]] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    levels: list[int] = field(default_factory=list)
    pool_check: int | None = None

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
            levels=[int(v) for v in data.get("levels") or ()],
            pool_check=data.get("pool_check"),
        )


def gpu_seconds(pods: list[PodInfo], gpus_per_node: int) -> float:
    """GPU-seconds a workload's ``pods`` held: each placed pod holds every GPU of its node
    (validation pods take whole nodes) from being bound to the node (its image pull and
    container start included) to its last container's finish, as the cluster reports them
    (``PodInfo.held_seconds``; a pod that never ran holds nothing)."""
    return sum(p.held_seconds or 0.0 for p in pods if p.node) * gpus_per_node


@runtime_checkable
class PullReader(Protocol):
    """A backend that reads the kubelet's ``Pulled`` events (``KubePods.image_pulls``)."""

    def image_pulls(self, namespace: str) -> dict[str, float]: ...


def image_pulls(backend: ClusterBackend, namespace: str) -> dict[str, float]:
    """Seconds each pod of ``namespace`` spent pulling images, where the backend reads the
    kubelet's events (the sim puts them on ``PodInfo.pull_seconds`` itself); empty when it
    cannot: a cost figure never fails a validation."""
    if not isinstance(backend, PullReader):
        return {}
    try:
        return backend.image_pulls(namespace)
    except BackendError as exc:
        log.info(
            "image pull events of %s not read (%s): pulls count as container start", namespace, exc
        )
        return {}


def gang_mark(text: str) -> float | None:
    """The ``gang`` seconds the launcher printed at its rendezvous, if it did."""
    m = GANG_RE.search(text)
    return float(m.group(1)) if m else None


def pod_facts(
    pod: PodInfo, marks: Mapping[str, float] | None = None, pulls: Mapping[str, float] = {}
) -> PodFacts:
    """What the cluster reported of ``pod``'s life (``domain.stages.PodFacts``), with the
    image pull from ``pulls`` (``image_pulls``) where the pod does not carry it."""
    pull = pod.pull_seconds if pod.pull_seconds is not None else pulls.get(pod.name)
    return PodFacts(
        created_at=pod.created_at,
        scheduled_at=pod.scheduled_at,
        started_at=pod.started_at,
        main_finished_at=pod.main_finished_at,
        finished_at=pod.finished_at,
        pull_s=pull,
        marks=dict(marks or {}),
    )


def stage_seconds(
    pod: PodInfo,
    work: str,
    marks: Mapping[str, float] | None = None,
    pulls: Mapping[str, float] = {},
) -> dict[str, float]:
    """Seconds per stage of one finished ``pod`` (``domain.stages.pod_stages``), rounded."""
    stages = pod_stages(pod_facts(pod, marks, pulls), work)
    return {k: round(v, 3) for k, v in stages.items()}


def stage_details(
    per_pod: Iterable[Mapping[str, float]], gpus_per_node: int, **extra: Any
) -> dict[str, Any]:
    """A validation row's ``details.stages``: GPU-minutes per held stage over its pods (they add
    up to the row's ``gpu_minutes`` when every pod's life is known), the seconds every pod
    waited to be scheduled (held nothing), and ``extra`` (the per-pair or per-node stages)."""
    pods = list(per_pod)
    gpu = stage_gpu_seconds(pods, gpus_per_node)
    return {
        "gpu_minutes": {k: round(v / 60, 3) for k, v in gpu.items()},
        "scheduled_s": round(sum(p.get(Stage.SCHEDULED, 0.0) for p in pods), 3),
        **extra,
    }


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


def pod_log(backend: ClusterBackend, pod: PodInfo, namespace: str, container: str | None) -> str:
    """``pod``'s log of ``container``; empty for a pod that did not succeed and has no log to
    read (bound to a node but never started, its partner never placed; failed before it
    printed, its node gone: the cluster has no log for it, and its phase already fails its
    pair). A pod that succeeded without the container is the backend's error, as the module
    says."""
    try:
        return backend.pod_logs(pod.name, namespace, container)
    except BackendError:
        if pod.phase != "Succeeded":
            log.info("pod %s/%s (%s) has no %s log", namespace, pod.name, pod.phase, container)
            return ""
        raise


def rank_logs(
    backend: ClusterBackend, pods: list[PodInfo], namespace: str, container: str
) -> list[str]:
    """Each pod's NCCL INFO lines, as streamed by its log sidecar."""
    return [pod_log(backend, p, namespace, container) for p in pods if p.node]


def read_nccl_pair(
    backend: ClusterBackend, wl: Workload, index: int, log_container: str
) -> tuple[Any | None, Any | None, str | None]:
    """(parsed nccl-tests run, classified NCCL log, failure in words) for pair ``index``."""
    run, info, _, failure = read_nccl_pair_init(backend, wl, index, log_container)
    return run, info, failure


@dataclass
class PairRead:
    """What one pair's pods said: the nccl-tests run, the classified NCCL log, the ranks' init
    timings, the failure in words, the pods (launcher first) and the launcher's ``gang``."""

    run: Any | None
    info: Any | None
    init: InitTimings
    failure: str | None
    pods: list[PodInfo] = field(default_factory=list)
    gang_s: float | None = None

    def marks(self) -> dict[str, float]:
        """The stages measured inside the pair's main containers (``PodFacts.marks``)."""
        out: dict[str, float] = {}
        if self.gang_s is not None:
            out[Stage.GANG] = self.gang_s
        total = self.init.summary().get("total")
        if total is not None:
            out[Stage.NCCL_INIT] = total.max
        return out

    def stages(
        self, pulls: Mapping[str, float] = {}, steps: Mapping[str, str] = {}
    ) -> list[dict[str, float]]:
        """Seconds per stage of each of the pair's finished pods (launcher first). ``steps``:
        the init containers each pod ran before its main one (container -> its stage), their
        seconds first (``step_marks``)."""
        marks = self.marks()
        return [
            stage_seconds(p, Stage.SWEEP, {**step_marks(p, steps), **marks}, pulls)
            for p in self.pods
            if p.node and p.finished
        ]


def step_marks(pod: PodInfo, steps: Mapping[str, str]) -> dict[str, float]:
    """The stages ``pod``'s step init containers ran (``steps``: container -> stage), in the
    order they ran, from ``PodInfo.init_seconds`` (a step that did not finish is left out: its
    time stays in the next stage measured)."""
    return {steps[c]: s for c, s in pod.init_seconds.items() if c in steps}


def read_pair(backend: ClusterBackend, wl: Workload, index: int, log_container: str) -> PairRead:
    """Pair ``index``'s pods and what they printed (``PairRead``)."""
    selector = f"{JOBSET_NAME_LABEL}={wl.name},{REPLICATED_JOB_LABEL}=pair-{index}"
    pods = sorted(backend.list_pods(wl.namespace, selector), key=pod_index)
    if not pods:
        return PairRead(None, None, InitTimings(), "the pair's pods were never created")
    failure = None
    failed = [p for p in pods if p.phase == "Failed"]
    if failed:
        failure = f"pod {failed[0].name} failed: {failed[0].message or 'no message'}"
    elif any(p.phase != "Succeeded" for p in pods):
        failure = "the pair did not finish: " + ", ".join(f"{p.name} {p.phase}" for p in pods)
    run = None
    gang = None
    launcher = pods[0]
    if launcher.node:
        text = pod_log(backend, launcher, wl.namespace, None)
        gang = gang_mark(text)
        try:
            run = parse_results(text)
        except ParseError as exc:
            failure = failure or str(exc)
    lines = "\n".join(rank_logs(backend, pods, wl.namespace, log_container)).splitlines()
    try:
        info = classify_nccl_log(lines)
    except ParseError:  # no NCCL output at all: the verdict says the transport is unknown
        info = None
    return PairRead(run, info, read_init_timings(lines), failure, pods, gang)


def read_nccl_pair_init(
    backend: ClusterBackend, wl: Workload, index: int, log_container: str
) -> tuple[Any | None, Any | None, InitTimings, str | None]:
    """:func:`read_nccl_pair` and the ranks' NCCL init timings, read from the same logs."""
    r = read_pair(backend, wl, index, log_container)
    return r.run, r.info, r.init, r.failure


def init_alarm_notes(init: InitTimings) -> list[str]:
    """The alarms (``domain.nccl_init``) the slowest ranks' init phases raise, as notes."""
    summary = init.summary()
    slowest = {phase: (f.max, f.where) for phase, f in summary.items()}
    return [a.note for a in init_alarms(slowest, {p: f.median for p, f in summary.items()})]
