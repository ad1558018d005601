"""The cluster add-ons region onboarding applies, rendered as dicts in apply order.

``render_cluster_addons`` is the one entry point: ``AddonGroup``s to apply group after group,
controllers and CRDs first. The groups and their order: docs/design/manifests.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpufleet.config.addons import load_controller_releases
from gpufleet.domain.fleet import Cluster, PoolRef, Region
from gpufleet.manifests.addons.admission import (
    MAIN_CONTAINER_CEL,
    PLUMBING_LABEL,
    admission_api_version,
    plumbing_apply_configuration,
    render_admission_plumbing,
    render_plumbing_policy,
)
from gpufleet.manifests.addons.controllers import render_controller
from gpufleet.manifests.addons.eks import (
    render_efa_device_plugin,
    render_fsx_csi_driver,
    render_nvidia_device_plugin,
)
from gpufleet.manifests.addons.kueue import kueue_names, render_kueue_objects, render_pool_queues
from gpufleet.manifests.addons.lustre import (
    LustreVolumeSource,
    lustre_dirs_job_name,
    lustre_pv_name,
    render_lustre_root,
    render_lustre_volumes,
)
from gpufleet.manifests.addons.networks import (
    cluster_labels,
    render_gib_installer,
    render_gke_networks,
)
from gpufleet.manifests.addons.prepull import render_image_prepull
from gpufleet.manifests.addons.ssh import render_ssh_secret
from gpufleet.manifests.labels import VALIDATION_NAMESPACE, check_namespace

__all__ = [
    "MAIN_CONTAINER_CEL",
    "PLUMBING_LABEL",
    "AddonGroup",
    "LustreVolumeSource",
    "admission_api_version",
    "kueue_names",
    "lustre_dirs_job_name",
    "lustre_pv_name",
    "plumbing_apply_configuration",
    "render_admission_plumbing",
    "render_cluster_addons",
    "render_controller",
    "render_efa_device_plugin",
    "render_fsx_csi_driver",
    "render_gib_installer",
    "render_gke_networks",
    "render_image_prepull",
    "render_kueue_objects",
    "render_lustre_root",
    "render_lustre_volumes",
    "render_nvidia_device_plugin",
    "render_plumbing_policy",
    "render_pool_queues",
    "render_ssh_secret",
]

CONTROLLER_ORDER = ("jobset", "kueue")


@dataclass(frozen=True)
class AddonGroup:
    """Objects applied together, in order; ``note`` is for the user (why a group is empty,
    what to wait for before the next one), None when there is nothing to say."""

    name: str
    objects: list[dict[str, Any]]
    note: str | None = None


def _namespace(name: str, cluster: Cluster) -> dict[str, Any]:
    check_namespace(name)
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": cluster_labels(cluster)},
    }


def render_cluster_addons(
    cluster: Cluster,
    *,
    server_version: str,
    lustre: Mapping[str, LustreVolumeSource],
    controllers: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    controllers_source: str | None = None,
    region: Region | None = None,
    validation_namespace: str = VALIDATION_NAMESPACE,
) -> list[AddonGroup]:
    """Every add-on of ``cluster`` as ordered groups (see the module docstring).

    ``server_version``: the cluster's Kubernetes version (picks the admission API);
    ``lustre``: each filesystem's instance by catalog name; ``controllers``: the release
    objects of ``jobset`` and ``kueue``; without them they are loaded here with
    ``gpufleet.config.addons.load_controller_releases(folder=controllers_source)`` (a local
    folder or base URL holding the pinned files; None: ``GPUFLEET_ADDONS_DIR``, else the
    official release URLs). ``region`` is only needed to build PoolRefs for the queues (a
    placeholder region is used without it). Raises ValueError naming what is missing (a
    controller release, a filesystem's source).
    """
    if controllers is None:
        controllers = load_controller_releases(folder=controllers_source)
    missing = [name for name in CONTROLLER_ORDER if name not in controllers]
    if missing:
        raise ValueError(
            f"no release manifest for controller(s) {', '.join(missing)}; load them with "
            "gpufleet.config.addons.load_controller_releases()"
        )
    namespaces = list(cluster.namespaces)
    groups = [
        AddonGroup(
            "namespaces",
            [_namespace(n, cluster) for n in dict.fromkeys([*namespaces, validation_namespace])],
        )
    ]
    for name in CONTROLLER_ORDER:
        groups.append(
            AddonGroup(
                f"{name}-controller",
                render_controller(controllers[name]),
                f"wait for the {name} controller Deployment to be Available before the "
                "groups that use its API",
            )
        )
    if cluster.shape == "gke":
        groups.append(AddonGroup("gke-networks", render_gke_networks(cluster)))
        installer = render_gib_installer(cluster)
        groups.append(
            AddonGroup(
                "nccl-gib-installer",
                installer,
                None if installer else "no gIB pool in the cluster: no NCCL plugin installer",
            )
        )
    else:
        groups.append(AddonGroup("nvidia-device-plugin", render_nvidia_device_plugin(cluster)))
        efa = render_efa_device_plugin(cluster)
        groups.append(
            AddonGroup(
                "efa-device-plugin",
                efa,
                None if efa else "no EFA pool in the cluster: no EFA device plugin",
            )
        )
        groups.append(AddonGroup("fsx-csi-driver", render_fsx_csi_driver(cluster)))
    prepull = render_image_prepull(cluster, validation_namespace)
    groups.append(
        AddonGroup(
            "image-prepull",
            prepull,
            None if prepull else "no GPU pool in the cluster: no validation images to pre-pull",
        )
    )
    region = region or Region(name="addons", clusters=(cluster,))
    topologies: dict[str, dict[str, Any]] = {}  # one per provider, before any flavor names it
    queues: list[dict[str, Any]] = []
    for pool in cluster.node_pools:
        for obj in render_pool_queues(
            PoolRef(region=region, cluster=cluster, pool=pool), namespaces
        ):
            if obj["kind"] == "Topology":
                topologies.setdefault(obj["metadata"]["name"], obj)
            else:
                queues.append(obj)
    queues = [*topologies.values(), *queues]
    groups.append(
        AddonGroup(
            "kueue-queues",
            queues,
            None
            if namespaces
            else f"cluster {cluster.name!r} lists no training namespaces: "
            "no LocalQueues (add 'namespaces' to the catalog)",
        )
    )
    if cluster.filesystems:
        groups.append(
            AddonGroup(
                "lustre-root",
                render_lustre_root(
                    cluster,
                    lustre,
                    namespaces=namespaces,
                    validation_namespace=validation_namespace,
                ),
                "wait for the lustre-dirs Job(s) to complete before lustre-volumes: each "
                "namespace's directory must exist before its volume mounts it",
            )
        )
        groups.append(
            AddonGroup(
                "lustre-volumes", render_lustre_volumes(cluster, lustre, namespaces=namespaces)
            )
        )
    policies, note = render_admission_plumbing(
        cluster, server_version=server_version, namespaces=namespaces
    )
    groups.append(AddonGroup("admission-plumbing", policies, note))
    return groups
