"""Cluster add-ons: render everything a GPU cluster needs beyond the cloud's own objects
(``gpufleet.manifests.addons``) and converge it through the ``ClusterBackend``.

Each object goes through ``ensure_object`` (read-compare-patch): created when absent, left
alone when it already says what we render, merge-patched otherwise; a rerun writes nothing. The
Lustre volumes are rendered from what the cloud reports about each filesystem (its id, mount
name and endpoint), so they point at the instance onboarding created.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gpufleet.backends.base import CloudBackend, ClusterBackend, ResourceStatus
from gpufleet.domain.fleet import Cluster

# ensure_object's answer -> the action the onboarding report shows
_ACTIONS = {"created": "created", "unchanged": "found", "updated": "updated"}


def _object_name(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]


def apply_cluster_addons(
    cluster: Cluster,
    cloud: CloudBackend,
    kube: ClusterBackend,
    controllers_source: str | None = None,
) -> Iterator[tuple[dict[str, Any] | None, str | None]]:
    """Converge every add-on of ``cluster``, in apply order; yields ``(action, note)`` pairs:
    one action per object (kind, name, created | found | updated) and the notes the renderer
    gives (such as why admission-time plumbing is not installed on this cluster)."""
    from gpufleet.manifests.addons import LustreVolumeSource, render_cluster_addons

    if controllers_source is None and cluster.provider == "sim":
        # the simulated fleet runs no controllers: the bundled copies are all it needs
        from gpufleet.config.addons import addons_dir

        controllers_source = str(addons_dir())
    version = kube.server_version()
    lustre = {}
    for fs in cluster.filesystems:
        info = cloud.get_filesystem(fs.name)
        lustre[fs.name] = LustreVolumeSource(
            handle=info.csi_handle or info.id or info.name,
            endpoint=info.endpoint or "",
            mount_name=info.mount_name or "",
        )
    groups = render_cluster_addons(
        cluster, server_version=version, lustre=lustre, controllers_source=controllers_source
    )
    for group in groups:
        if group.note:
            yield None, f"{cluster.name}: {group.name}: {group.note}"
        for obj in group.objects:
            answer = kube.ensure_object(obj)
            yield (
                {
                    "kind": obj["kind"],
                    "name": _object_name(obj),
                    "action": _ACTIONS.get(answer, answer),
                    "status": ResourceStatus.READY,
                    "detail": {"group": group.name, "cluster": cluster.name},
                },
                None,
            )
