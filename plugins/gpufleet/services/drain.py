"""Draining a node pool: cordon it, then empty its nodes in batches through the Eviction API.

A drain is a loop of short steps (``Drain.step``), each called again after ``next_check_s``
(an operator defers in between; the state lives in a plain dict the caller persists), so a
drain survives restarts and never holds a worker slot:

- every node of the pool is cordoned (idempotent);
- nodes are taken ``batch_size`` at a time; a batch's pods are evicted through the Eviction API,
  which respects PodDisruptionBudgets (a refusal is retried on the next step); DaemonSet pods
  stay (they go with the node);
- pods of training jobs are never evicted by default: the drain waits for the job to finish.
  Once ``timeout_s`` has passed since the drain began, ``on_timeout`` decides: ``wait`` keeps
  waiting and alerts again every ``realert_s``; ``fail`` stops the drain with an error naming
  the jobs; ``evict`` evicts their pods (the job fails and its owner restarts it elsewhere);
- a batch is done when its nodes hold nothing but DaemonSet pods; the next batch starts after
  ``soak_s``.

The soak and the timeout are measured on a ``Clock`` (``gpufleet.domain.clock``): the one given,
else the backend's own (the simulated fleet's clock, which tests advance), else the system's.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from gpufleet.backends.base import ClusterBackend
from gpufleet.domain.clock import SYSTEM_CLOCK, Clock
from gpufleet.domain.inputs import finite
from gpufleet.domain.workloads import JOBSET_NAME_LABEL, WORKLOAD_LABEL
from gpufleet.errors import GpufleetError

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
class DrainProgress:
    """One step's outcome. ``state`` is what the next step needs (persist it)."""

    done: bool
    state: dict[str, Any]
    next_check_s: float = 0.0
    evicted: list[str] = field(default_factory=list)
    waiting_jobs: list[str] = field(default_factory=list)
    alerts: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _is_training(pod) -> bool:
    return (pod.labels or {}).get(WORKLOAD_LABEL) == "training"


def _job_of(pod) -> str:
    labels = pod.labels or {}
    return f"{pod.namespace or '?'}/{labels.get(JOBSET_NAME_LABEL) or pod.name}"


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
        progress = DrainProgress(done=False, state=st)
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
        evict_training = timed_out and self.settings.on_timeout == "evict"
        busy: list[str] = []
        for node in st["batch"]:
            pods = [p for p in self.backend.pods_on_node(node) if p.owner_kind != "DaemonSet"]
            for pod in pods:
                if _is_training(pod) and not evict_training:
                    progress.waiting_jobs.append(_job_of(pod))
                    continue
                if self.backend.evict(pod.name, pod.namespace or "default"):
                    progress.evicted.append(f"{pod.namespace}/{pod.name}")
                else:
                    progress.notes.append(
                        f"{pod.namespace}/{pod.name}: eviction refused for now (a "
                        "PodDisruptionBudget); retrying"
                    )
            if pods:
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
