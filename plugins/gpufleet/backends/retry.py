"""gpufleet's retry rule for backend calls, on tenacity.

Design: docs/design/cloud-backends.md.
"""

from __future__ import annotations

import email.utils
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import tenacity

from gpufleet.backends.base import (
    CloudBackend,
    ClusterBackend,
    ClusterCredentials,
    ClusterInfo,
    Ensured,
    FilesystemInfo,
    NodeInfo,
    NodePoolInfo,
    ObjectChange,
    PodInfo,
    PoolDeletion,
    ReservationInfo,
    Taint,
    WatchEvent,
    WorkloadStatus,
)
from gpufleet.backends.topology_api import ReservationHealth, SubBlockHealth
from gpufleet.domain.events import NodeEvent
from gpufleet.errors import TransientBackendError

log = logging.getLogger(__name__)


def is_transient_status(status: int) -> bool:
    """True for the HTTP statuses a retry may fix: 429 (throttled) and 5xx (server error)."""
    return status == 429 or 500 <= status <= 599


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds to wait from a Retry-After header: delta-seconds or an HTTP-date (RFC 9110
    section 10.2.3); None when absent or unreadable. A date in the past means 0."""
    if not value or not value.strip():
        return None
    text = value.strip()
    try:
        return max(float(int(text)), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max((when - (now or datetime.now(UTC))).total_seconds(), 0.0)


@dataclass(frozen=True)
class RetryPolicy:
    """How many attempts and how long between them.

    The wait after attempt n is ``first_delay * 2**(n-1)`` capped at ``max_delay`` (0.2, 0.4,
    0.8, 1.6 s with the defaults), or the server's Retry-After if that is longer, capped at
    ``max_retry_after``.
    """

    attempts: int = 5
    first_delay: float = 0.2
    max_delay: float = 10.0
    max_retry_after: float = 60.0
    sleep: Callable[[float], None] | None = None  # None: the backend's clock (``clock_sleep``)


def clock_sleep(backend: object) -> Callable[[float], None]:
    """How to wait between attempts on ``backend``: its own clock's ``sleep`` (the simulated
    fleet's, which tests freeze and advance), else the system's."""
    clock = getattr(backend, "clock", None)
    return clock.sleep if clock is not None and hasattr(clock, "sleep") else time.sleep


class wait_backoff_or_retry_after(tenacity.wait.wait_base):  # noqa: N801 - tenacity's naming
    """Exponential backoff, lengthened to the server's Retry-After (capped) when it sent one."""

    def __init__(self, backoff: tenacity.wait.wait_base, max_retry_after: float) -> None:
        self.backoff = backoff
        self.max_retry_after = max_retry_after

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        wait = self.backoff(retry_state)
        outcome = retry_state.outcome
        exc = outcome.exception() if outcome is not None else None
        if isinstance(exc, TransientBackendError) and exc.retry_after is not None:
            wait = max(wait, min(float(exc.retry_after), self.max_retry_after))
        return wait


def retrying(policy: RetryPolicy, backend: object = None) -> tenacity.Retrying:
    """A tenacity ``Retrying`` that follows the rule: call it as ``retrying(fn, *args)``; it
    waits with ``policy.sleep``, else on ``backend``'s clock."""

    def log_retry(state: tenacity.RetryCallState) -> None:
        outcome, action = state.outcome, state.next_action
        log.warning(
            "%s failed (%s); retry %d of %d in %.1f s",
            getattr(state.fn, "__name__", "call"),
            outcome.exception() if outcome is not None else "?",
            state.attempt_number,
            policy.attempts - 1,
            action.sleep if action is not None else 0.0,
        )

    return tenacity.Retrying(
        retry=tenacity.retry_if_exception_type(TransientBackendError),
        stop=tenacity.stop_after_attempt(policy.attempts),
        wait=wait_backoff_or_retry_after(
            tenacity.wait_exponential(multiplier=policy.first_delay, max=policy.max_delay),
            policy.max_retry_after,
        ),
        sleep=policy.sleep or clock_sleep(backend),
        before_sleep=log_retry,
        reraise=True,  # the last TransientBackendError, not tenacity's RetryError
    )


class RetryingClusterBackend:
    """A ``ClusterBackend`` whose every call follows the retry rule."""

    def __init__(self, inner: ClusterBackend, policy: RetryPolicy | None = None) -> None:
        self.inner = inner
        self._retry = retrying(policy or RetryPolicy(), inner)

    def __repr__(self) -> str:
        return f"RetryingClusterBackend({self.inner!r})"

    def apply(self, manifest: dict[str, Any]) -> dict[str, Any]:
        return self._retry(self.inner.apply, manifest)

    def ensure_object(self, manifest: dict[str, Any]) -> ObjectChange:
        return self._retry(self.inner.ensure_object, manifest)

    def server_version(self) -> str:
        return self._retry(self.inner.server_version)

    def delete(self, kind: str, name: str, namespace: str | None = None) -> bool:
        return self._retry(self.inner.delete, kind, name, namespace)

    def list_nodes(self, pool: str | None = None) -> list[NodeInfo]:
        return self._retry(self.inner.list_nodes, pool)

    def set_unschedulable(self, node: str, unschedulable: bool) -> None:
        self._retry(self.inner.set_unschedulable, node, unschedulable)

    def add_taint(self, node: str, taint: Taint) -> None:
        self._retry(self.inner.add_taint, node, taint)

    def remove_taint(self, node: str, key: str) -> None:
        self._retry(self.inner.remove_taint, node, key)

    def set_labels(self, node: str, labels: dict[str, str | None]) -> None:
        self._retry(self.inner.set_labels, node, labels)

    def list_pods(self, namespace: str | None, selector: str) -> list[PodInfo]:
        return self._retry(self.inner.list_pods, namespace, selector)

    def pods_on_node(self, node: str) -> list[PodInfo]:
        return self._retry(self.inner.pods_on_node, node)

    def evict(self, pod: str, namespace: str) -> bool:
        return self._retry(self.inner.evict, pod, namespace)

    def workload_status(self, kind: str, name: str, namespace: str) -> WorkloadStatus:
        return self._retry(self.inner.workload_status, kind, name, namespace)

    def pod_logs(self, pod: str, namespace: str, container: str | None = None) -> str:
        return self._retry(self.inner.pod_logs, pod, namespace, container)

    def gpu_metrics(self, node: str) -> str | None:
        return self._retry(self.inner.gpu_metrics, node)

    def dcgm_exporters(self) -> dict[str, PodInfo]:
        return self._retry(self.inner.dcgm_exporters)

    def exporter_metrics(self, pod: PodInfo) -> str:
        return self._retry(self.inner.exporter_metrics, pod)

    # a watch's WatchExpired (410) is not transient: it reaches the caller, which relists
    def list_nodes_versioned(self) -> tuple[list[NodeInfo], str]:
        return self._retry(self.inner.list_nodes_versioned)

    def watch_nodes(self, since: str, timeout_s: float) -> list[WatchEvent]:
        return self._retry(self.inner.watch_nodes, since, timeout_s)

    def list_node_events(self, since: str | None) -> tuple[list[NodeEvent], str]:
        return self._retry(self.inner.list_node_events, since)

    def watch_node_events(self, since: str, timeout_s: float) -> list[WatchEvent]:
        return self._retry(self.inner.watch_node_events, since, timeout_s)


class RetryingCloudBackend:
    """A ``CloudBackend`` whose every call follows the retry rule."""

    def __init__(self, inner: CloudBackend, policy: RetryPolicy | None = None) -> None:
        self.inner = inner
        self._retry = retrying(policy or RetryPolicy(), inner)

    def __repr__(self) -> str:
        return f"RetryingCloudBackend({self.inner!r})"

    def get_reservation(self, name: str) -> ReservationInfo:
        return self._retry(self.inner.get_reservation, name)

    def ensure_network(self, dry_run: bool = False) -> list[Ensured]:
        return self._retry(self.inner.ensure_network, dry_run)

    def ensure_cluster(self, dry_run: bool = False) -> Ensured:
        return self._retry(self.inner.ensure_cluster, dry_run)

    def get_cluster(self) -> ClusterInfo:
        return self._retry(self.inner.get_cluster)

    def cluster_credentials(self) -> ClusterCredentials:
        return self._retry(self.inner.cluster_credentials)

    def ensure_node_pool(
        self, pool: str, dry_run: bool = False, taints: tuple[Taint, ...] = ()
    ) -> Ensured:
        return self._retry(self.inner.ensure_node_pool, pool, dry_run, taints)

    def get_node_pool(self, pool: str) -> NodePoolInfo:
        return self._retry(self.inner.get_node_pool, pool)

    def delete_node_pool(self, pool: str) -> bool:
        return self._retry(self.inner.delete_node_pool, pool)

    def ensure_node_pool_deleted(self, pool: str, operation: str | None = None) -> PoolDeletion:
        return self._retry(self.inner.ensure_node_pool_deleted, pool, operation)

    def ensure_filesystem(self, name: str, dry_run: bool = False) -> Ensured:
        return self._retry(self.inner.ensure_filesystem, name, dry_run)

    def get_filesystem(self, name: str) -> FilesystemInfo:
        return self._retry(self.inner.get_filesystem, name)

    def repair_node(self, node: NodeInfo, dry_run: bool = False) -> Ensured:
        return self._retry(self.inner.repair_node, node, dry_run)

    def reboot_node(self, node: NodeInfo, dry_run: bool = False) -> Ensured:
        return self._retry(self.inner.reboot_node, node, dry_run)

    def subblock_health(self, pool: str) -> list[SubBlockHealth]:
        return self._retry(self.inner.subblock_health, pool)

    def reservation_health(self, pool: str) -> ReservationHealth:
        return self._retry(self.inner.reservation_health, pool)

    def report_faulty_subblock(
        self, pool: str, key: str, reason: str, dry_run: bool = False
    ) -> Ensured:
        return self._retry(self.inner.report_faulty_subblock, pool, key, reason, dry_run)
