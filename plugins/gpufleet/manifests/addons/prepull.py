"""The validation images pre-pulled onto every GPU node by a DaemonSet (issue 35): the nightly's
pods then start without pulling (their ``image_pull`` stage, ``domain.stages``, is 0).

Template: ``include/manifests/image-prepull.yaml.j2``. Which images: the cluster's nccl-tests
image for its shape, the DCGM image of the GPU health check, the nccl-log sidecar's, and fio's
when the cluster has a Lustre filesystem.
"""

from __future__ import annotations

from typing import Any

from gpufleet.domain.fleet import Cluster
from gpufleet.domain.stages import PREPULL_LABEL, prepull_images
from gpufleet.domain.workloads import pool_label_key
from gpufleet.manifests.addons.networks import cluster_labels
from gpufleet.manifests.labels import VALIDATION_NAMESPACE
from gpufleet.manifests.templates import render_template

PREPULL_NAME = "gpufleet-image-prepull"
__all__ = ["PREPULL_LABEL", "prepull_images", "render_image_prepull", "validation_images"]
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"


def validation_images(cluster: Cluster) -> list[str]:
    """The images the nightly's validation pods of ``cluster`` run, without repeats."""
    from gpufleet.domain.plumbing import nccl_log_sidecar
    from gpufleet.manifests.gpu_health import DEFAULT_DCGM_IMAGE
    from gpufleet.manifests.nccl_validation import nccl_tests_image
    from gpufleet.manifests.storage_validation import DEFAULT_FIO_IMAGE

    images = [nccl_tests_image(cluster.shape), DEFAULT_DCGM_IMAGE, nccl_log_sidecar()["image"]]
    if cluster.filesystems:
        images.append(DEFAULT_FIO_IMAGE)
    return list(dict.fromkeys(images))


def render_image_prepull(
    cluster: Cluster, namespace: str = VALIDATION_NAMESPACE, images: list[str] | None = None
) -> list[dict[str, Any]]:
    """The pre-pull DaemonSet on the cluster's GPU pools (none: empty list)."""
    pools = [p.name for p in cluster.node_pools]
    if not pools:
        return []
    labels = {**cluster_labels(cluster), PREPULL_LABEL: "true"}
    return [
        render_template(
            "image-prepull.yaml.j2",
            name=PREPULL_NAME,
            namespace=namespace,
            labels=labels,
            pool_label=pool_label_key(cluster),
            pools=pools,
            images=images if images is not None else validation_images(cluster),
            pause_image=PAUSE_IMAGE,
        )
    ]
