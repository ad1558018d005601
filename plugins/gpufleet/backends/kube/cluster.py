"""``KubeClusterBackend``: the ``ClusterBackend`` of a real Kubernetes cluster.

It is the sum of the package's modules, one concept each: ``client`` (the connection through
the cncf provider's KubernetesHook, and how calls are made), ``errors`` (what a failed call
becomes; transient or not), ``kinds`` (where each kind lives in the API), ``objects`` (apply,
delete), ``nodes``, ``pods`` and ``workloads``. Callers get it from
``gpufleet.backends.cluster_backend``, wrapped in the retry rule of ``backends/retry.py``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from gpufleet.backends.kube.errors import (
    KubeApiError,
    KubeConflict,
    KubeNotFound,
    KubeTooManyRequests,
    TransientKubeApiError,
)
from gpufleet.backends.kube.kinds import KINDS, KindInfo, kind_info
from gpufleet.backends.kube.nodes import KubeNodes
from gpufleet.backends.kube.objects import KubeObjects
from gpufleet.backends.kube.workloads import KubeWorkloads
from gpufleet.domain.workloads import POOL_LABEL

if TYPE_CHECKING:
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

__all__ = [
    "KINDS",
    "KindInfo",
    "KubeApiError",
    "KubeClusterBackend",
    "KubeConflict",
    "KubeNotFound",
    "KubeTooManyRequests",
    "TransientKubeApiError",
    "kind_info",
]


class KubeClusterBackend(KubeObjects, KubeNodes, KubeWorkloads):
    """One Kubernetes cluster, reached through the Airflow connection ``conn_id``; a node's
    pool is the value of the first of ``pool_label_keys`` it carries."""

    def __init__(
        self,
        conn_id: str = "kubernetes_default",
        pool_label_keys: Iterable[str] = (POOL_LABEL,),
        *,
        hook: KubernetesHook | None = None,
    ) -> None:
        super().__init__(conn_id, hook=hook)
        self.pool_label_keys = tuple(pool_label_keys)
        if not self.pool_label_keys:
            raise ValueError("pool_label_keys must name at least one node label")

    def __repr__(self) -> str:
        return f"KubeClusterBackend(conn_id={self.conn_id!r})"
