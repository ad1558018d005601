"""The one drain: cordon nodes and empty them through the Eviction API, for a pool's retirement
(a transition: ``Drain.step``, in batches) and for a node's repair (``Drain.once``: one pass
that never blocks).

Design: docs/design/node-lifecycle.md.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from gpufleet.backends.base import ClusterBackend, PodInfo
from gpufleet.domain.clock import SYSTEM_CLOCK, Clock
from gpufleet.domain.inputs import finite
from gpufleet.domain.workloads import JOBSET_NAME_LABEL, WORKLOAD_LABEL
from gpufleet.errors import GpufleetError
from gpufleet.services.common.step_report import StepReport

log = logging.getLogger(__name__)

ON_TIMEOUT = ("wait", "fail", "evict")


class DrainTimeout(GpufleetError):
    """Training jobs still ran on the pool at the drain timeout and the policy is ``fail``."""


@dataclass(frozen=True)
class DrainSettings:
    batch_size: int = 1
    soak_s: float = 300.0
    timeout_s: float = 4 * 3600.0
    on_timeout: str = "wait"
    realert_s: float = 4 * 3600.0
    poll_s: float = 30.0

    def __post_init__(self) -> None:
        if self.on_timeout not in ON_TIMEOUT:
            raise GpufleetError(
                f"on_timeout {self.on_timeout!r} is not one of {', '.join(ON_TIMEOUT)}"
            )
        # NaN passes every bound (a NaN soak never ends, a NaN timeout never comes): finite first
        for name in ("batch_size", "soak_s", "timeout_s", "realert_s", "poll_s"):
            if finite(getattr(self, name), name) < 0:
                raise GpufleetError(f"{name} must be at least 0, not {getattr(self, name)}")
        if self.batch_size < 1 or self.batch_size != int(self.batch_size):
            raise GpufleetError(
                f"batch_size must be a whole number of at least 1, not {self.batch_size}"
            )

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class DrainProgress(StepReport):
    """One drain step's report; besides: ``state``, what the next step needs (persist it), the
    pods ``evicted`` and the training jobs waited for (``waiting_jobs``)."""

    state: dict[str, Any] = field(default_factory=dict)
    evicted: list[str] = field(default_factory=list)
    waiting_jobs: list[str] = field(default_factory=list)


def _is_training(pod: PodInfo) -> bool:
    return (pod.labels or {}).get(WORKLOAD_LABEL) == "training"


def job_name(pod: PodInfo) -> str:
    """The job a pod belongs to: its JobSet's name, else the pod's own."""
    return (pod.labels or {}).get(JOBSET_NAME_LABEL) or pod.name


def _job_of(pod: PodInfo) -> str:
    return f"{pod.namespace or '?'}/{job_name(pod)}"


@dataclass
class NodeEmptying:
    """One eviction pass over one node: the pods found on it (DaemonSet pods aside), those
    evicted, the training pods waited for, and those a PodDisruptionBudget kept for now."""

    node: str
    pods: list[PodInfo] = field(default_factory=list)
    evicted: list[str] = field(default_factory=list)
    training: list[PodInfo] = field(default_factory=list)
    refused: list[PodInfo] = field(default_factory=list)

    @property
    def emptied(self) -> bool:
        """Every pod found was evicted (or there were none): nothing is waited for."""
        return not self.training and not self.refused


def pods_to_move(backend: ClusterBackend, node: str) -> list[PodInfo]:
    """The node's pods a drain must move: every one but DaemonSet pods (the one check)."""
    return [p for p in backend.pods_on_node(node) if not p.daemonset]


def empty_node(backend: ClusterBackend, node: str, *, evict_training: bool) -> NodeEmptying:
    """Evict the node's pods but its DaemonSet pods; a training job's pods only when
    ``evict_training`` (else they are waited for)."""
    out = NodeEmptying(node, pods_to_move(backend, node))
    for pod in out.pods:
        if _is_training(pod) and not evict_training:
            out.training.append(pod)
        elif backend.evict(pod.name, pod.namespace or "default"):
            out.evicted.append(f"{pod.namespace}/{pod.name}")
        else:
            out.refused.append(pod)
    return out


def backend_clock(backend: object) -> Clock:
    """The clock the cluster behind ``backend`` runs on: a backend's own ``clock`` (the sim's),
    looked for through wrappers (``inner``: the retrying one), else the system clock."""
    seen = 0
    while backend is not None and seen < 8:
        clock = getattr(backend, "clock", None)
        if clock is not None:
            return clock
        backend, seen = getattr(backend, "inner", None), seen + 1
    return SYSTEM_CLOCK


class Drain:
    """Drain pool ``pool`` of a cluster through ``backend`` with ``settings``, timed on
    ``clock`` (default: the backend's ``clock`` if it has one, else the system clock)."""

    def __init__(
        self,
        backend: ClusterBackend,
        pool: str,
        settings: DrainSettings,
        clock: Clock | None = None,
    ):
        self.backend = backend
        self.pool = pool
        self.settings = settings
        self.clock: Clock = clock or backend_clock(backend)

    def step(self, state: dict[str, Any] | None = None, now: float | None = None) -> DrainProgress:
        now = self.clock.time() if now is None else now
        st = dict(state or {})
        st.setdefault("started_at", now)
        st.setdefault("drained", [])
        st.setdefault("batch", [])
        st.setdefault("batch_done_at", None)
        st.setdefault("last_alert_at", None)
        progress = DrainProgress("drain", done=False, state=st)
        nodes = self.backend.list_nodes(self.pool)
        for node in nodes:
            if not node.unschedulable:
                self.backend.set_unschedulable(node.name, True)
        names = [n.name for n in nodes]
        st["drained"] = [n for n in st["drained"] if n in names]
        if not st["batch"]:
            left = [n for n in names if n not in st["drained"]]
            if not left:
                progress.done = True
                progress.notes.append(f"{self.pool}: every node drained")
                return progress
            if st["batch_done_at"] is not None:
                soak_left = st["batch_done_at"] + self.settings.soak_s - now
                if soak_left > 0:
                    progress.next_check_s = soak_left
                    progress.notes.append(
                        f"{self.pool}: soaking {soak_left:.0f} s before the next batch"
                    )
                    return progress
            st["batch"] = left[: self.settings.batch_size]
            progress.notes.append(f"{self.pool}: draining batch {', '.join(st['batch'])}")
        timed_out = now - st["started_at"] >= self.settings.timeout_s
        busy: list[str] = []
        for node in st["batch"]:
            emptying = self._empty(node, progress, timed_out)
            if emptying.pods:
                busy.append(node)
        progress.waiting_jobs = sorted(set(progress.waiting_jobs))
        if progress.waiting_jobs and timed_out:
            self._on_timeout(progress, now)
        if busy:
            progress.next_check_s = self.settings.poll_s
            return progress
        st["drained"] = sorted({*st["drained"], *st["batch"]})
        st["batch"] = []
        st["batch_done_at"] = now
        progress.notes.append(f"{self.pool}: {len(st['drained'])} of {len(names)} nodes drained")
        left = [n for n in names if n not in st["drained"]]
        progress.done = not left
        progress.next_check_s = 0.0 if progress.done else self.settings.soak_s
        return progress

    def once(self, nodes: list[str]) -> dict[str, NodeEmptying]:
        """One pass over ``nodes`` that never waits (the repair path): cordon each, evict what
        may go now (training pods only under ``on_timeout="evict"`` once ``timeout_s`` is over:
        ``timeout_s=0`` evicts at once). Each node's outcome; the caller records the emptied
        nodes and names the jobs of the others, and looks again on its next pass."""
        evict_training = self._evicts_training(timed_out=self.settings.timeout_s <= 0)
        out = {}
        for node in nodes:
            self.backend.set_unschedulable(node, True)
            out[node] = empty_node(self.backend, node, evict_training=evict_training)
        return out

    def _evicts_training(self, *, timed_out: bool) -> bool:
        return timed_out and self.settings.on_timeout == "evict"

    def _empty(self, node: str, progress: DrainProgress, timed_out: bool) -> NodeEmptying:
        evict_training = self._evicts_training(timed_out=timed_out)
        emptying = empty_node(self.backend, node, evict_training=evict_training)
        progress.evicted += emptying.evicted
        progress.waiting_jobs += [_job_of(p) for p in emptying.training]
        for pod in emptying.refused:
            progress.notes.append(
                f"{pod.namespace}/{pod.name}: eviction refused for now (a "
                "PodDisruptionBudget); retrying"
            )
        return emptying

    def _on_timeout(self, progress: DrainProgress, now: float) -> None:
        st, jobs = progress.state, ", ".join(progress.waiting_jobs)
        waited = (now - st["started_at"]) / 3600
        if self.settings.on_timeout == "fail":
            raise DrainTimeout(
                f"{self.pool}: training jobs still run after the drain timeout "
                f"({waited:.1f} h): {jobs}. Let them finish and run again (the drain resumes), "
                "or choose on_timeout=evict"
            )
        last = st.get("last_alert_at")
        if self.settings.on_timeout == "wait" and (
            last is None or now - last >= self.settings.realert_s
        ):
            st["last_alert_at"] = now
            progress.alerts.append(
                f"{self.pool}: drain waiting {waited:.1f} h for training jobs to finish: {jobs}"
            )
