"""Kueue objects per node pool (``include/manifests/kueue-pool.yaml.j2``,
``kueue.x-k8s.io/v1beta1``): the provider's ``Topology`` when the pool's machines carry topology
labels (``gpufleet.domain.kueue.pool_topology``; shared by the cluster's pools, rendered before
the flavor that names it), a ResourceFlavor (the pool, by its native node label, naming that
Topology), a ClusterQueue (GPU quota = nodes x GPUs per node, plus every other resource a
plumbed pod requests; its one resource group held to Kueue's 64 flavors) and a LocalQueue
``<pool.queue_name>`` in every training namespace.

Each pool has its own flavor, named after the pool: a pool on another reservation (a
transition) is another pool, so it gets a new flavor; no flavor's spec is ever edited (Kueue
refuses once it names a Topology, and ``ensure_object`` refuses before trying)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from gpufleet.domain.fleet import NodePool, PoolRef
from gpufleet.domain.kueue import check_resource_group, pool_topology
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
    """The pool's Topology (when it has one), ResourceFlavor, ClusterQueue, then one LocalQueue
    per namespace in ``namespaces`` (in that order, without repeats), for gang admission of
    training JobSets onto the pool."""
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
    names = kueue_names(pool)
    objs = render_template_all(
        "kueue-pool.yaml.j2",
        labels={MANAGED_BY_LABEL: MANAGED_BY, POOL_LABEL: pool.name},
        topology=pool_topology(cluster, pool),
        topology_labels={MANAGED_BY_LABEL: MANAGED_BY},
        node_labels={pool_label_key(cluster): pool.name},
        quotas=list(quotas.items()),
        flavors=[names["flavor"]],  # one pool, one flavor, one ClusterQueue (no cohorts)
        namespaces=namespaces,
        **names,
    )
    for obj in objs:
        if obj["kind"] == "ClusterQueue":
            for index, group in enumerate(obj["spec"]["resourceGroups"]):
                flavors = [f["name"] for f in group["flavors"]]
                check_resource_group(obj["metadata"]["name"], index, flavors)
    return objs


def render_kueue_objects(ref: PoolRef, namespace: str = TRAINING_NAMESPACE) -> list[dict[str, Any]]:
    """The Topology (when the pool has one), ResourceFlavor, ClusterQueue and the LocalQueue in
    one ``namespace`` (see ``render_pool_queues`` for every training namespace)."""
    return render_pool_queues(ref, [namespace])
