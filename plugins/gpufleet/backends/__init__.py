"""Backends behind two protocols; which one a cluster uses is data in the catalog.

``cluster_backend(cluster)`` and ``cloud_backend(cluster)`` build the backend the catalog
names: ``provider: sim`` -> the simulated fleet; ``gke``/``eks`` -> the Kubernetes client
through the cluster's KubernetesHook connection.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from gpufleet.backends.base import (
    CloudBackend,
    ClusterBackend,
    NodeInfo,
    PodInfo,
    Taint,
    WorkloadStatus,
)
from gpufleet.domain.fleet import Cluster
from gpufleet.domain.workloads import pool_label_keys
from gpufleet.errors import BackendError, TransientBackendError

log = logging.getLogger(__name__)

__all__ = [
    "CloudBackend",
    "ClusterBackend",
    "NodeInfo",
    "PodInfo",
    "Retrying",
    "Taint",
    "WorkloadStatus",
    "cloud_backend",
    "cluster_backend",
]


class Retrying:
    """Retry a backend's calls that fail transiently (throttling, 5xx, a dropped connection)
    a few times with exponential backoff before letting the error through. A call that still
    fails raises the last TransientBackendError; anything else is raised at once."""

    def __init__(self, inner: Any, attempts: int = 5, first_delay: float = 0.2):
        self._inner = inner
        self._attempts = attempts
        self._first_delay = first_delay

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr) or name.startswith("_"):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            delay = self._first_delay
            for attempt in range(1, self._attempts + 1):
                try:
                    return attr(*args, **kwargs)
                except TransientBackendError as exc:
                    if attempt == self._attempts:
                        raise
                    log.warning(
                        "%s failed (%s); retry %d of %d in %.1f s",
                        name,
                        exc,
                        attempt,
                        self._attempts - 1,
                        delay,
                    )
                    time.sleep(delay)
                    delay *= 2
            raise AssertionError("unreachable")

        return call


def cluster_backend(cluster: Cluster) -> ClusterBackend:
    if cluster.provider == "sim":
        from gpufleet.backends.sim.cluster import SimClusterBackend

        return Retrying(SimClusterBackend(cluster))
    from gpufleet.backends.kube.cluster import KubeClusterBackend

    conn_id = cluster.connections.kubernetes or "kubernetes_default"
    return Retrying(KubeClusterBackend(conn_id=conn_id, pool_label_keys=pool_label_keys(cluster)))


def cloud_backend(cluster: Cluster) -> CloudBackend:
    if cluster.provider == "sim":
        from gpufleet.backends.sim.cluster import SimCloudBackend

        return Retrying(SimCloudBackend(cluster))
    raise BackendError(
        f"cluster {cluster.name!r}: the {cluster.provider} cloud backend is not available in "
        "this release; cloud operations (onboarding, transitions) run on provider sim only"
    )
