"""EKS node add-ons: the NVIDIA device plugin (``nvidia.com/gpu``), the EFA device plugin
(``vpc.amazonaws.com/efa``) and the FSx for Lustre CSI driver, from their upstream manifests
(``include/manifests/{nvidia,efa}-device-plugin.yaml.j2``, ``fsx-csi-driver.yaml.j2``), images
pinned. They tolerate the ``gpufleet.io/validation-pending`` taint: a new node must advertise
its GPUs and EFA devices before validation can run on it."""

from __future__ import annotations

from typing import Any

from gpufleet.domain.fleet import Cluster
from gpufleet.domain.workloads import pool_label_key
from gpufleet.manifests.addons.networks import cluster_labels
from gpufleet.manifests.templates import render_template, render_template_all

NVIDIA_DEVICE_PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.17.1"
# aws/eks-charts stable/aws-efa-k8s-device-plugin values.yaml (EKS's ECR, pullable from any region)
EFA_DEVICE_PLUGIN_IMAGE = (
    "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/aws-efa-k8s-device-plugin:v0.5.5"
)
# kubernetes-sigs/aws-fsx-csi-driver deploy/kubernetes/base
_EKS_DISTRO = "public.ecr.aws/eks-distro/kubernetes-csi"
FSX_CSI_IMAGES = {
    "driver": "public.ecr.aws/fsx-csi-driver/aws-fsx-csi-driver:v1.1.0",
    "provisioner": f"{_EKS_DISTRO}/external-provisioner:v3.6.0-eks-1-28-7",
    "liveness": f"{_EKS_DISTRO}/livenessprobe:v2.11.0-eks-1-28-7",
    "registrar": f"{_EKS_DISTRO}/node-driver-registrar:v2.8.0-eks-1-27-7",
}


def _require_eks(cluster: Cluster, what: str) -> None:
    if cluster.shape != "eks":
        raise ValueError(
            f"cluster {cluster.name!r} has the {cluster.shape} shape; {what} is EKS-only"
        )


def render_nvidia_device_plugin(cluster: Cluster) -> list[dict[str, Any]]:
    """The NVIDIA device plugin DaemonSet on the cluster's node groups."""
    _require_eks(cluster, "the NVIDIA device plugin")
    return [
        render_template(
            "nvidia-device-plugin.yaml.j2",
            labels=cluster_labels(cluster),
            pool_label=pool_label_key(cluster),
            pools=[p.name for p in cluster.node_pools],
            image=NVIDIA_DEVICE_PLUGIN_IMAGE,
        )
    ]


def render_efa_device_plugin(cluster: Cluster) -> list[dict[str, Any]]:
    """The EFA device plugin DaemonSet on the instance types of the cluster's EFA pools (none:
    empty list)."""
    _require_eks(cluster, "the EFA device plugin")
    types = sorted({p.machine_type for p in cluster.node_pools if p.transport == "ofi-efa"})
    if not types:
        return []
    return [
        render_template(
            "efa-device-plugin.yaml.j2",
            labels=cluster_labels(cluster),
            instance_types=types,
            image=EFA_DEVICE_PLUGIN_IMAGE,
        )
    ]


def render_fsx_csi_driver(
    cluster: Cluster, *, controller_role_arn: str | None = None
) -> list[dict[str, Any]]:
    """The FSx CSI driver: CSIDriver, ServiceAccounts and RBAC, controller Deployment, node
    DaemonSet. ``controller_role_arn``: the IAM role (IRSA) the controller assumes, if any
    (static volumes need none: only dynamic provisioning calls the FSx API)."""
    _require_eks(cluster, "the FSx CSI driver")
    return render_template_all(
        "fsx-csi-driver.yaml.j2",
        labels=cluster_labels(cluster),
        images=FSX_CSI_IMAGES,
        controller_role_arn=controller_role_arn,
    )
