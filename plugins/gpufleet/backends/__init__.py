"""Backends behind two protocols; which one a cluster uses is data in the catalog.

``cluster_backend(cluster)`` and ``cloud_backend(cluster)`` build the backend the catalog
names: ``provider: sim`` -> the simulated fleet; ``gke``/``eks`` -> the Kubernetes client
through the cluster's KubernetesHook connection.
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
from gpufleet.catalog import Cluster
from gpufleet.errors import BackendError

__all__ = [
    "CloudBackend",
    "ClusterBackend",
    "NodeInfo",
    "PodInfo",
    "Taint",
    "WorkloadStatus",
    "cloud_backend",
    "cluster_backend",
]


def cluster_backend(cluster: Cluster) -> ClusterBackend:
    if cluster.provider == "sim":
        from gpufleet.backends.sim import SimClusterBackend

        return SimClusterBackend(cluster)
    from gpufleet.backends.kube import KubeClusterBackend

    conn_id = cluster.connections.kubernetes or "kubernetes_default"
    return KubeClusterBackend(conn_id=conn_id, pool_label_keys=_pool_label_keys(cluster))


def cloud_backend(cluster: Cluster) -> CloudBackend:
    if cluster.provider == "sim":
        from gpufleet.backends.sim import SimCloudBackend

        return SimCloudBackend(cluster)
    raise BackendError(
        f"cluster {cluster.name!r}: the {cluster.provider} cloud backend is not available in "
        "this release; cloud operations (onboarding, transitions) run on provider sim only"
    )


def _pool_label_keys(cluster: Cluster) -> tuple[str, ...]:
    from gpufleet.backends.base import EKS_POOL_LABEL, GKE_POOL_LABEL, POOL_LABEL

    native = GKE_POOL_LABEL if cluster.shape == "gke" else EKS_POOL_LABEL
    return (POOL_LABEL, native)
