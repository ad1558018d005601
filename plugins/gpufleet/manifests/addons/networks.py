"""GKE network add-ons: the per-NIC network objects and the NCCL gIB plugin installer.

- ``render_gke_networks``: one GKENetworkParamSet + Network per RDMA subnet (deviceMode RDMA),
  plus the gVNIC network's pair (deviceMode NetDevice) that A3 Ultra / A4 nodes attach besides
  the RDMA NICs (``include/manifests/gke-rdma-networks.yaml.j2``);
- ``render_gib_installer``: the ``nccl-rdma-installer`` DaemonSet that puts the gIB NCCL plugin
  on the host where the pods' plumbing mounts it (``include/manifests/nccl-gib-installer.yaml.j2``).
"""

from __future__ import annotations

from typing import Any

from gpufleet.domain.fleet import Cluster
from gpufleet.domain.workloads import pool_label_key
from gpufleet.manifests.labels import CLUSTER_LABEL, MANAGED_BY, MANAGED_BY_LABEL
from gpufleet.manifests.templates import render_template, render_template_all

# GoogleCloudPlatform/container-engine-accelerators gpudirect-rdma/nccl-rdma-installer.yaml
GIB_INSTALLER_IMAGE = "us-docker.pkg.dev/gce-ai-infra/gpudirect-gib/nccl-plugin-gib:v1.0.3"
GIB_PAUSE_IMAGE = (
    "gke.gcr.io/pause:3.8@sha256:880e63f94b145e46f1b1082bb71b85e21f16b99b180b9996407d61240ceb9830"
)
ALPINE_IMAGE = "alpine:3.21"  # upstream says alpine:latest; pinned here


def cluster_labels(cluster: Cluster) -> dict[str, str]:
    """The labels every cluster-wide add-on object carries."""
    return {MANAGED_BY_LABEL: MANAGED_BY, CLUSTER_LABEL: cluster.name}


def _require_gke(cluster: Cluster, what: str) -> None:
    if cluster.shape != "gke":
        raise ValueError(
            f"cluster {cluster.name!r} has the {cluster.shape} shape; {what} only apply to gke "
            "clusters (EKS attaches EFA through the EFA device plugin)"
        )


def render_gke_networks(cluster: Cluster) -> list[dict[str, Any]]:
    """The gVNIC network's GKENetworkParamSet + Network (deviceMode NetDevice, when the catalog
    names ``network.gvnic``), then one pair per RDMA subnet (deviceMode RDMA, type Device).

    Named after the subnets, which is what the pods' ``networking.gke.io/interfaces``
    annotation (``gpufleet.domain.plumbing.gke_interfaces``) refers to. The gVNIC VPC is named
    after its subnet (``Network.gvnic`` in the catalog). GKE shape only.
    """
    _require_gke(cluster, "GKE network objects")
    subnets = [s.name for s in cluster.network.subnets[: cluster.network.rdma_nics]]
    gvnic = cluster.network.gvnic
    return render_template_all(
        "gke-rdma-networks.yaml.j2",
        labels=cluster_labels(cluster),
        vpc=cluster.network.name,
        subnets=subnets,
        gvnic={"name": gvnic.name, "vpc": gvnic.name, "subnet": gvnic.name} if gvnic else None,
    )


def gib_pools(cluster: Cluster) -> list[str]:
    """The cluster's pools whose NCCL transport is gIB (the installer runs on their nodes)."""
    return [p.name for p in cluster.node_pools if p.transport == "gib"]


def render_gib_installer(cluster: Cluster) -> list[dict[str, Any]]:
    """The ``nccl-rdma-installer`` DaemonSet on the cluster's gIB pools (none: empty list)."""
    _require_gke(cluster, "the gIB NCCL plugin installer")
    pools = gib_pools(cluster)
    if not pools:
        return []
    martians = "\n".join(
        f"sysctl -w net.ipv4.conf.gpu{i}rdma0.log_martians=0"
        for i in range(cluster.network.rdma_nics)
    )
    return [
        render_template(
            "nccl-gib-installer.yaml.j2",
            labels=cluster_labels(cluster),
            pool_label=pool_label_key(cluster),
            pools=pools,
            martians=martians or "true",
            installer_image=GIB_INSTALLER_IMAGE,
            pause_image=GIB_PAUSE_IMAGE,
            alpine_image=ALPINE_IMAGE,
        )
    ]
