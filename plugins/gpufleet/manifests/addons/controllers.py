"""The Kueue and JobSet controllers, from their release manifests (loaded by
:mod:`gpufleet.config.addons`): the objects as released, each labelled managed-by gpufleet,
with the CRDs (and their namespace) first so one ordered apply works."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from gpufleet.manifests.labels import MANAGED_BY, MANAGED_BY_LABEL

# apply order inside one release: what the rest depends on first
_KIND_ORDER = {"Namespace": 0, "CustomResourceDefinition": 1}


def render_controller(objects: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A release's objects, copied, labelled ``app.kubernetes.io/managed-by: gpufleet`` and
    ordered Namespace, CRDs, then the rest as released."""
    out: list[dict[str, Any]] = []
    for released in objects:
        obj = copy.deepcopy(dict(released))
        meta = obj.setdefault("metadata", {})
        meta["labels"] = {**(meta.get("labels") or {}), MANAGED_BY_LABEL: MANAGED_BY}
        out.append(obj)
    return sorted(out, key=lambda o: _KIND_ORDER.get(o.get("kind", ""), 2))


def controller_images(objects: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every container image a release's Deployments and DaemonSets run."""
    images = []
    for obj in objects:
        if obj.get("kind") not in ("Deployment", "DaemonSet", "StatefulSet"):
            continue
        pod = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
        for container in [*(pod.get("initContainers") or ()), *(pod.get("containers") or ())]:
            images.append(container.get("image"))
    return images
