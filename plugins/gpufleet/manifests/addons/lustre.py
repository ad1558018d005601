"""Lustre volumes per namespace: one instance, one static PersistentVolume per namespace.

Design: docs/design/manifests.md.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpufleet.domain.fleet import Cluster, Filesystem
from gpufleet.manifests.addons.networks import cluster_labels
from gpufleet.manifests.labels import VALIDATION_NAMESPACE, check_namespace, pvc_name
from gpufleet.manifests.templates import render_template, render_template_all

GKE_LUSTRE_DRIVER = "lustre.csi.storage.gke.io"
FSX_LUSTRE_DRIVER = "fsx.csi.aws.com"
LUSTRE_DIRS_IMAGE = "busybox:1.37"
FILESYSTEM_LABEL = "gpufleet.io/filesystem"


@dataclass(frozen=True)
class LustreVolumeSource:
    """Where a Lustre instance is reached, as its cloud reports it.

    - Managed Lustre: ``handle`` = ``<project>/<location>/<instance id>``, ``endpoint`` = the
      instance's mount IP (a NID such as ``10.0.0.2@tcp`` is accepted: the ``@tcp`` is
      dropped), ``mount_name`` = its filesystem name (fsname).
    - FSx for Lustre: ``handle`` = the file system id (``fs-...``), ``endpoint`` = its DNSName,
      ``mount_name`` = its MountName.
    """

    handle: str
    endpoint: str
    mount_name: str

    def __post_init__(self) -> None:
        for field in ("handle", "endpoint", "mount_name"):
            value = getattr(self, field)
            if not isinstance(value, str) or not value.strip() or any(c.isspace() for c in value):
                raise ValueError(
                    f"LustreVolumeSource.{field} must be a non-empty word, got {value!r}"
                )


def lustre_pv_name(fs: Filesystem, namespace: str) -> str:
    """The PersistentVolume through which ``namespace`` mounts ``fs``: ``<fs>-<namespace>``."""
    return f"{fs.name}-{namespace}"


def _host(endpoint: str) -> str:
    """The address alone: a Lustre NID (``10.0.0.2@tcp``, ``x@tcp0``) loses its network."""
    return re.sub(r"@tcp\d*$", "", endpoint)


def _csi(cluster: Cluster, source: LustreVolumeSource, sub_dir: str | None) -> dict[str, Any]:
    suffix = f":{sub_dir}" if sub_dir else ""
    if cluster.shape == "gke":
        attrs = {"ip": _host(source.endpoint), "filesystem": source.mount_name}
        if sub_dir:
            attrs["subPath"] = sub_dir
        return {
            "driver": GKE_LUSTRE_DRIVER,
            "volumeHandle": source.handle + suffix,
            "volumeAttributes": attrs,
        }
    attrs = {"dnsname": _host(source.endpoint), "mountname": source.mount_name}
    if sub_dir:
        attrs["subdir"] = sub_dir
    return {
        "driver": FSX_LUSTRE_DRIVER,
        "volumeHandle": source.handle + suffix,
        "volumeAttributes": attrs,
    }


def _volume(
    cluster: Cluster,
    fs: Filesystem,
    source: LustreVolumeSource,
    namespace: str,
    sub_dir: str | None,
) -> list[dict[str, Any]]:
    return render_template_all(
        "lustre-volume.yaml.j2",
        labels={**cluster_labels(cluster), FILESYSTEM_LABEL: fs.name},
        pv_name=lustre_pv_name(fs, namespace),
        pvc_name=pvc_name(fs),
        namespace=namespace,
        capacity=f"{math.ceil(fs.capacity_tib * 1024)}Gi",
        csi=_csi(cluster, source, sub_dir),
    )


def lustre_sources_for(
    cluster: Cluster, lustre: Mapping[str, LustreVolumeSource]
) -> list[tuple[Filesystem, LustreVolumeSource]]:
    """Each filesystem of ``cluster`` with its source; ValueError naming any without one."""
    missing = [fs.name for fs in cluster.filesystems if fs.name not in lustre]
    if missing:
        raise ValueError(
            f"cluster {cluster.name!r}: no LustreVolumeSource for filesystem(s) "
            f"{', '.join(missing)}; pass the instance's handle, endpoint and mount name (from "
            "the cloud backend, once the instance exists)"
        )
    return [(fs, lustre[fs.name]) for fs in cluster.filesystems]


def render_lustre_root(
    cluster: Cluster,
    lustre: Mapping[str, LustreVolumeSource],
    *,
    namespaces: Sequence[str],
    validation_namespace: str = VALIDATION_NAMESPACE,
) -> list[dict[str, Any]]:
    """Per filesystem: the root PV + PVC in ``validation_namespace`` and the Job (there) that
    creates each of ``namespaces``' directories. Apply and wait for the Job before
    ``render_lustre_volumes``."""
    check_namespace(validation_namespace)
    for namespace in namespaces:
        check_namespace(namespace)
    out: list[dict[str, Any]] = []
    for fs, source in lustre_sources_for(cluster, lustre):
        out += _volume(cluster, fs, source, validation_namespace, None)
        script = "set -e; " + "; ".join(
            f"mkdir -p /lustre/{ns} && chmod 1777 /lustre/{ns}" for ns in namespaces
        )
        out.append(
            render_template(
                "lustre-directories.yaml.j2",
                name=lustre_dirs_job_name(fs),
                namespace=validation_namespace,
                labels={**cluster_labels(cluster), FILESYSTEM_LABEL: fs.name},
                image=LUSTRE_DIRS_IMAGE,
                script=script if namespaces else "true",
                claim_name=pvc_name(fs),
            )
        )
    return out


def lustre_dirs_job_name(fs: Filesystem) -> str:
    """The Job creating ``fs``'s namespace directories: ``lustre-dirs-<fs>`` (<= 63 chars)."""
    return f"lustre-dirs-{fs.name}"[:63].rstrip("-")


def render_lustre_volumes(
    cluster: Cluster, lustre: Mapping[str, LustreVolumeSource], *, namespaces: Sequence[str]
) -> list[dict[str, Any]]:
    """Per filesystem and training namespace: the PV at the namespace's directory, pre-bound to
    the namespace's ReadWriteMany PVC ``<fs>-pvc``."""
    out: list[dict[str, Any]] = []
    for fs, source in lustre_sources_for(cluster, lustre):
        for namespace in dict.fromkeys(namespaces):
            check_namespace(namespace)
            out += _volume(cluster, fs, source, namespace, namespace)
    return out
