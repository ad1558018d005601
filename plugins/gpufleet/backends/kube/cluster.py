"""``KubeClusterBackend``: the ``ClusterBackend`` of a real Kubernetes cluster.

It is the sum of the package's modules, one concept each: ``client`` (the connection through
the cncf provider's KubernetesHook, from an Airflow connection or a kube config dict, how calls
are made, ``server_version``), ``errors`` (what a failed call becomes; transient or not),
``kinds`` (where each kind lives in the API), ``objects`` (apply, ensure_object, delete) with
``converge`` (what counts as already converged), ``nodes``, ``pods``, ``workloads`` and
``gpu_metrics`` (a node's dcgm-exporter metrics, through the pod proxy).
Callers get it from ``gpufleet.backends.cluster_backend``, wrapped in the retry rule of
``backends/retry.py``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from gpufleet.backends.kube.errors import (
    KubeApiError,
    KubeConflict,
    KubeNotFound,
    KubeTooManyRequests,
    TransientKubeApiError,
)
from gpufleet.backends.kube.gpu_metrics import KubeGpuMetrics
from gpufleet.backends.kube.kinds import KINDS, KindInfo, kind_info
from gpufleet.backends.kube.nodes import KubeNodes
from gpufleet.backends.kube.objects import KubeObjects
from gpufleet.backends.kube.watch import KubeWatch
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


class KubeClusterBackend(KubeObjects, KubeWatch, KubeNodes, KubeWorkloads, KubeGpuMetrics):
    """One Kubernetes cluster, reached through the Airflow connection ``conn_id`` or, given
    ``kube_config``, through that kube config dict (``from_kube_config``); a node's pool is the
    value of the first of ``pool_label_keys`` it carries."""

    def __init__(
        self,
        conn_id: str | None = "kubernetes_default",
        pool_label_keys: Iterable[str] = (POOL_LABEL,),
        *,
        hook: KubernetesHook | None = None,
        kube_config: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(conn_id, hook=hook, kube_config=kube_config)
        self.pool_label_keys = tuple(pool_label_keys)
        if not self.pool_label_keys:
            raise ValueError("pool_label_keys must name at least one node label")

    @classmethod
    def from_kube_config(
        cls, config: dict[str, Any], *, pool_label_keys: Iterable[str] = (POOL_LABEL,)
    ) -> KubeClusterBackend:
        """A backend for a cluster named by a kube config dict instead of an Airflow
        connection: what ``ClusterCredentials.kube_config(name)`` gives for a cluster the cloud
        backend just created (server, CA, bearer token). Same hook, same client, same calls."""
        return cls(pool_label_keys=pool_label_keys, kube_config=config)

    def __repr__(self) -> str:
        if self.kube_config is not None:
            return f"KubeClusterBackend({self.source})"
        return f"KubeClusterBackend(conn_id={self.conn_id!r})"
