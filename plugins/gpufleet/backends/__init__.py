"""Backends behind two protocols; which one a cluster uses is data in the catalog.

``cluster_backend(cluster)`` and ``cloud_backend(cluster)`` build the backend the catalog
names: ``provider: sim`` -> the simulated fleet; ``gke``/``eks`` -> the Kubernetes client
through the cluster's KubernetesHook connection. Either comes wrapped in the retry rule of
``backends/retry.py`` (tenacity: 429, 5xx and dropped connections retried with backoff,
Retry-After honoured; anything else surfaces at once).

Here: ``base.py`` (the protocols and the data they exchange), ``retry.py`` (the retry rule),
``faults.py`` (fault injection, which only the simulated fleet takes), ``sim/`` (the simulated
fleet), ``kube/`` (a real cluster through the official client). Backends may import
``domain``, ``config`` and ``errors``, and the providers' hooks for connections; never
``services``, ``manifests``, ``store`` or the Airflow layer.
"""

from __future__ import annotations

from gpufleet.backends.base import (
    CloudBackend,
    ClusterBackend,
    NodeInfo,
    PodInfo,
    Taint,
    WorkloadStatus,
)
from gpufleet.backends.retry import RetryingCloudBackend, RetryingClusterBackend, RetryPolicy
from gpufleet.domain.fleet import Cluster
from gpufleet.domain.workloads import pool_label_keys
from gpufleet.errors import BackendError

__all__ = [
    "CloudBackend",
    "ClusterBackend",
    "NodeInfo",
    "PodInfo",
    "RetryPolicy",
    "RetryingCloudBackend",
    "RetryingClusterBackend",
    "Taint",
    "WorkloadStatus",
    "cloud_backend",
    "cluster_backend",
]


def cluster_backend(cluster: Cluster) -> ClusterBackend:
    if cluster.provider == "sim":
        from gpufleet.backends.sim.cluster import SimClusterBackend

        return RetryingClusterBackend(SimClusterBackend(cluster))
    from gpufleet.backends.kube.cluster import KubeClusterBackend

    conn_id = cluster.connections.kubernetes or "kubernetes_default"
    return RetryingClusterBackend(
        KubeClusterBackend(conn_id=conn_id, pool_label_keys=pool_label_keys(cluster))
    )


def cloud_backend(cluster: Cluster) -> CloudBackend:
    if cluster.provider == "sim":
        from gpufleet.backends.sim.cloud import SimCloudBackend

        return RetryingCloudBackend(SimCloudBackend(cluster))
    raise BackendError(
        f"cluster {cluster.name!r}: the {cluster.provider} cloud backend is not available in "
        "this release; cloud operations (onboarding, transitions) run on provider sim only"
    )
