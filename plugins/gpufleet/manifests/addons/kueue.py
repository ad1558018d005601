"""Kueue objects per node pool: a ResourceFlavor (the pool, by its native node label), a
ClusterQueue (GPU quota = nodes x GPUs per node, plus every other resource a plumbed pod
requests) and a LocalQueue ``<pool.queue_name>`` in every training namespace
(``include/manifests/kueue-pool.yaml.j2``, ``kueue.x-k8s.io/v1beta1``)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from gpufleet.domain.fleet import NodePool, PoolRef
from gpufleet.domain.plumbing import pod_plumbing
from gpufleet.domain.workloads import POOL_LABEL, pool_label_key
from gpufleet.manifests.labels import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    TRAINING_NAMESPACE,
    check_namespace,
)
from gpufleet.manifests.templates import render_template_all


def _scale_quantity(quantity: str, factor: int) -> str:
    m = re.fullmatch(r"(\d+)([A-Za-z]*)", str(quantity))
    if not m:
        raise ValueError(f"cannot scale quantity {quantity!r}")
    return f"{int(m.group(1)) * factor}{m.group(2)}"


def kueue_names(pool: NodePool) -> dict[str, str]:
    """Names of a pool's Kueue objects: ResourceFlavor, ClusterQueue, LocalQueue."""
    return {
        "flavor": f"gpufleet-{pool.name}",
        "cluster_queue": f"gpufleet-{pool.name}",
        "local_queue": pool.queue_name,
    }


def render_pool_queues(ref: PoolRef, namespaces: Sequence[str]) -> list[dict[str, Any]]:
    """ResourceFlavor, ClusterQueue, then one LocalQueue per namespace in ``namespaces`` (in
    that order, without repeats), for gang admission of training JobSets onto the pool."""
    cluster, pool = ref.cluster, ref.pool
    namespaces = list(dict.fromkeys(namespaces))
    for namespace in namespaces:
        check_namespace(namespace)
    per_pod = pod_plumbing(cluster, pool, pin_network=True).limits
    # cpu and memory are covered with a budget that never binds (the scheduler enforces node
    # capacity); Kueue refuses workloads requesting resources their ClusterQueue leaves out.
    quotas: dict[str, str] = {"cpu": str(pool.nodes * 1000), "memory": f"{pool.nodes * 16}Ti"}
    quotas["nvidia.com/gpu"] = str(pool.nodes * pool.gpu.count)
    for resource, value in sorted(per_pod.items()):
        if resource not in quotas:
            quotas[resource] = _scale_quantity(value, pool.nodes)
    return render_template_all(
        "kueue-pool.yaml.j2",
        labels={MANAGED_BY_LABEL: MANAGED_BY, POOL_LABEL: pool.name},
        node_labels={pool_label_key(cluster): pool.name},
        quotas=list(quotas.items()),
        namespaces=namespaces,
        **kueue_names(pool),
    )


def render_kueue_objects(ref: PoolRef, namespace: str = TRAINING_NAMESPACE) -> list[dict[str, Any]]:
    """ResourceFlavor, ClusterQueue and the LocalQueue in one ``namespace`` (see
    ``render_pool_queues`` for every training namespace of the cluster)."""
    return render_pool_queues(ref, [namespace])
