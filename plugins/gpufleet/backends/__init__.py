"""Backends behind two protocols; which one a cluster uses is data in the catalog.

``cluster_backend(cluster)`` and ``cloud_backend(cluster)`` build it, wrapped in the retry rule.
May import ``domain``, ``config``, ``errors`` and the providers' hooks; never ``services``,
``manifests``, ``store`` or the Airflow layer. Design: docs/design/cloud-backends.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable

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
    "polling_cluster_backend",
]

# How long a poller keeps one cluster's clients (a GKE cluster's token from the cloud is good
# for an hour; a client kept past that would be refused).
POLLER_CLIENT_TTL_S = 600.0
_pollers: dict[str, tuple[float, Cluster, ClusterBackend]] = {}


def cluster_backend(cluster: Cluster) -> ClusterBackend:
    if cluster.provider == "sim":
        from gpufleet.backends.sim.cluster import SimClusterBackend

        return RetryingClusterBackend(SimClusterBackend(cluster))
    from gpufleet.backends.kube.cluster import KubeClusterBackend

    keys = pool_label_keys(cluster)
    if cluster.connections.kubernetes:
        return RetryingClusterBackend(
            KubeClusterBackend(conn_id=cluster.connections.kubernetes, pool_label_keys=keys)
        )
    credentials = cloud_backend(cluster).cluster_credentials()
    return RetryingClusterBackend(
        KubeClusterBackend.from_kube_config(
            credentials.kube_config(cluster.name), pool_label_keys=keys
        )
    )


def polling_cluster_backend(
    cluster: Cluster, now: Callable[[], float] = time.monotonic
) -> ClusterBackend:
    """``cluster_backend(cluster)``, kept per process for ``POLLER_CLIENT_TTL_S`` for a
    trigger that polls every few seconds: a real cluster's clients (and, without a kubernetes
    connection, the credentials fetched from its cloud) are built once, not on every poll. A
    cluster whose catalog entry changed gets new ones. The sim builds nothing: not kept."""
    if cluster.provider == "sim":
        return cluster_backend(cluster)
    kept = _pollers.get(cluster.name)
    if kept is not None and kept[1] == cluster and now() - kept[0] < POLLER_CLIENT_TTL_S:
        return kept[2]
    backend = cluster_backend(cluster)
    _pollers[cluster.name] = (now(), cluster, backend)
    return backend


def cloud_backend(cluster: Cluster) -> CloudBackend:
    if cluster.provider == "sim":
        from gpufleet.backends.sim.cloud import SimCloudBackend

        return RetryingCloudBackend(SimCloudBackend(cluster))
    from gpufleet.config.catalog import load_catalog

    entry = load_catalog().clusters.get(cluster.name)
    if entry is None:
        raise BackendError(f"cluster {cluster.name!r} is not in the fleet catalog")
    region = entry[0]
    if cluster.provider == "gke":
        from gpufleet.backends.gke.backend import GkeCloudBackend

        return RetryingCloudBackend(GkeCloudBackend(cluster, region))
    from gpufleet.backends.eks.backend import EksCloudBackend

    return RetryingCloudBackend(EksCloudBackend(cluster, region))
