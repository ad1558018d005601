"""The objects onboarding applies once per pool or cluster, before any workload runs.

- ``render_kueue_objects``: a pool's Kueue ResourceFlavor, ClusterQueue and LocalQueue, so
  training JobSets are gang-admitted onto it (``include/manifests/kueue-pool.yaml.j2``);
- ``render_gke_networks``: a GKE cluster's RDMA Network objects
  (``include/manifests/gke-rdma-networks.yaml.j2``);
- ``render_ssh_secret``: the ssh key Secret the nccl-tests pairs use between their two pods
  (built in code: it holds a freshly generated private key).

The templates are read from disk through :mod:`gpufleet.manifests.templates`.
"""

from __future__ import annotations

import re
from typing import Any

from gpufleet.domain.fleet import Cluster, NodePool, PoolRef
from gpufleet.domain.plumbing import pod_plumbing
from gpufleet.domain.workloads import POOL_LABEL, pool_label_key
from gpufleet.manifests.labels import (
    CLUSTER_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    NCCL_SSH_SECRET,
    TRAINING_NAMESPACE,
    VALIDATION_NAMESPACE,
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


def render_kueue_objects(ref: PoolRef, namespace: str = TRAINING_NAMESPACE) -> list[dict[str, Any]]:
    """ResourceFlavor (the pool by its native node label), ClusterQueue (GPU quota = nodes x
    GPUs per node) and LocalQueue ``<pool.queue_name>`` in ``namespace``, for gang admission
    of training JobSets onto the pool."""
    cluster, pool = ref.cluster, ref.pool
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
    return render_template_all(
        "kueue-pool.yaml.j2",
        labels={MANAGED_BY_LABEL: MANAGED_BY, POOL_LABEL: pool.name},
        node_labels={pool_label_key(cluster): pool.name},
        quotas=list(quotas.items()),
        namespace=namespace,
        **names,
    )


def render_gke_networks(cluster: Cluster) -> list[dict[str, Any]]:
    """One GKENetworkParamSet (deviceMode RDMA) + Network (type Device) per RDMA subnet.

    Named after the subnets, which is what the pods' ``networking.gke.io/interfaces``
    annotation (``gpufleet.domain.plumbing.gke_interfaces``) refers to. GKE shape only: EKS exposes
    EFA through the device plugin and needs no network objects.
    """
    if cluster.shape != "gke":
        raise ValueError(
            f"cluster {cluster.name!r} has the {cluster.shape} shape; GKE network objects only "
            "apply to gke clusters (EKS attaches EFA through the EFA device plugin)"
        )
    subnets = [s.name for s in cluster.network.subnets[: cluster.network.rdma_nics]]
    return render_template_all(
        "gke-rdma-networks.yaml.j2",
        labels={MANAGED_BY_LABEL: MANAGED_BY, CLUSTER_LABEL: cluster.name},
        vpc=cluster.network.name,
        subnets=subnets,
    )


def render_ssh_secret(
    namespace: str = VALIDATION_NAMESPACE, *, name: str = NCCL_SSH_SECRET
) -> dict[str, Any]:
    """A ``kubernetes.io/ssh-auth`` Secret with a fresh ed25519 key for the nccl-tests pairs.

    The two pods of a pair mount it: each authorises the key's public half and the launcher
    uses it to start ranks on its peer (mpirun over ssh). Apply it once per validation
    namespace with create-if-absent semantics (a new key each call; an existing Secret is
    kept). It holds a private key: apply it directly, never pass it through XCom or logs.
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    check_namespace(namespace)
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    ).decode()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {MANAGED_BY_LABEL: MANAGED_BY},
        },
        "type": "kubernetes.io/ssh-auth",
        "stringData": {"ssh-privatekey": private},
    }
