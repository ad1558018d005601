"""Admission-time plumbing: a MutatingAdmissionPolicy per pool, generated from the launch's rules.

Design: docs/design/manifests.md.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from gpufleet.domain.fleet import Cluster, NodePool
from gpufleet.domain.plumbing import nccl_log_sidecar, pod_plumbing
from gpufleet.domain.workloads import POOL_LABEL, pool_label_key
from gpufleet.manifests.addons.networks import cluster_labels
from gpufleet.manifests.labels import check_namespace, pvc_name

PLUMBING_LABEL = "gpufleet.io/plumbing"  # value: the pool whose plumbing the pod wants
ADMISSION_GROUP = "admissionregistration.k8s.io"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
# Pod fields whose values are maps (string keys), written as CEL map literals; every other
# object is a typed ``Object.<path>{...}`` construction.
_MAP_FIELDS = frozenset({"annotations", "labels", "nodeSelector", "limits", "requests"})


MAIN_CONTAINER_CEL = "object.spec.containers[0].name"


class MainContainer:
    """Stands for the pod's first container's name (``object.spec.containers[0].name``), the
    container ``apply_plumbing`` plumbs when none is named."""

    CEL = MAIN_CONTAINER_CEL

    def __repr__(self) -> str:
        return "<main container>"


MAIN_CONTAINER = MainContainer()


def plumbing_policy_name(pool: NodePool) -> str:
    """The policy and binding of a pool: ``gpufleet-plumbing-<pool>``."""
    return f"gpufleet-plumbing-{pool.name}"


def _version(server_version: str) -> tuple[int, int]:
    m = re.match(r"^v?(\d+)\.(\d+)", str(server_version).strip())
    if not m:
        raise ValueError(
            f"server_version {server_version!r} is not a Kubernetes version (e.g. 1.34 or "
            "v1.35.2-gke.1000)"
        )
    return int(m.group(1)), int(m.group(2))


def admission_api_version(
    server_version: str, cluster: str = "the cluster"
) -> tuple[str | None, str | None]:
    """The MutatingAdmissionPolicy API version for a server, and a note for the user (None if
    there is nothing to say). ``(None, why)`` below 1.34."""
    major, minor = _version(server_version)
    if (major, minor) >= (1, 36):
        return f"{ADMISSION_GROUP}/v1", None
    if (major, minor) >= (1, 34):
        return f"{ADMISSION_GROUP}/v1beta1", (
            f"{cluster} runs Kubernetes {major}.{minor}: the admission-time plumbing uses "
            f"{ADMISSION_GROUP}/v1beta1 MutatingAdmissionPolicy, which 1.34-1.35 serve only with "
            "the MutatingAdmissionPolicy feature gate and the v1beta1 API enabled on the "
            "control plane; without them the apply is refused and only launch-time injection "
            "plumbs pods (Kubernetes 1.36+ needs nothing)."
        )
    return None, (
        f"{cluster} runs Kubernetes {major}.{minor}, which has no MutatingAdmissionPolicy "
        f"(beta from 1.34, GA in 1.36): pods labelled {PLUMBING_LABEL} get no admission-time "
        "RDMA/Lustre/NCCL plumbing there. Jobs launched through gpufleet are plumbed at launch "
        "as before; upgrade the cluster to 1.36 (or 1.34 with the beta enabled) to plumb "
        "other pods."
    )


def plumbing_apply_configuration(
    cluster: Cluster, pool: NodePool, *, lustre_mount: tuple[str, str] | None
) -> dict[str, Any]:
    """What the policy applies to an opted-in pod, as a pod-shaped dict: the launch's
    ``pod_plumbing(cluster, pool, pin_network=True)``, the ``nccl-log`` sidecar, the pool's
    Lustre (``(claim name, mount path)``) and node selector. ``MAIN_CONTAINER`` stands for the
    first container's name."""
    plumbing = pod_plumbing(cluster, pool, pin_network=True)
    volumes = [dict(v) for v in plumbing.volumes]
    mounts = [dict(m) for m in plumbing.mounts]
    if lustre_mount is not None:
        claim, path = lustre_mount
        volumes.append({"name": "lustre", "persistentVolumeClaim": {"claimName": claim}})
        mounts.append({"name": "lustre", "mountPath": path})
    main = {
        "name": MAIN_CONTAINER,
        "env": [{"name": k, "value": v} for k, v in plumbing.env.items()],
        "volumeMounts": mounts,
        "resources": {"limits": dict(plumbing.limits), "requests": dict(plumbing.limits)},
    }
    spec = {
        "nodeSelector": {pool_label_key(cluster): pool.name},
        "volumes": volumes,
        "initContainers": [nccl_log_sidecar()],
        "containers": [main],
    }
    out: dict[str, Any] = {"spec": spec}
    if plumbing.annotations:
        out = {"metadata": {"annotations": dict(plumbing.annotations)}, **out}
    return out


def to_cel(value: Any, path: tuple[str, ...] = ("Object",)) -> str:
    """``value`` as a CEL expression building it: typed ``Object.<path>{field: ...}`` for
    objects, map literals for the map-typed fields, lists, strings (JSON escapes are CEL
    escapes), numbers and booleans."""
    if isinstance(value, MainContainer):
        return MainContainer.CEL
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(to_cel(v, path) for v in value) + "]"
    if isinstance(value, Mapping):
        if path[-1] in _MAP_FIELDS:
            items = (f"{json.dumps(str(k))}: {to_cel(v, path)}" for k, v in value.items())
            return "{" + ", ".join(items) + "}"
        fields = (f"{k}: {to_cel(v, (*path, str(k)))}" for k, v in value.items())
        return ".".join(path) + "{" + ", ".join(fields) + "}"
    raise TypeError(f"cannot write {type(value).__name__} {value!r} as CEL")


def _opt_in_condition(pool: NodePool) -> str:
    label = json.dumps(PLUMBING_LABEL)
    return (
        f"has(object.metadata.labels) && {label} in object.metadata.labels && "
        f"object.metadata.labels[{label}] == {json.dumps(pool.name)}"
    )


def render_plumbing_policy(
    cluster: Cluster,
    pool: NodePool,
    *,
    api_version: str,
    namespaces: Sequence[str],
) -> list[dict[str, Any]]:
    """The pool's MutatingAdmissionPolicy and its binding (pods in ``namespaces`` labelled
    ``gpufleet.io/plumbing: <pool>``)."""
    if not namespaces:
        raise ValueError(f"cluster {cluster.name!r} lists no training namespaces to bind to")
    for namespace in namespaces:
        check_namespace(namespace)
    fs = cluster.filesystem(pool.filesystem) if pool.filesystem else None
    patch = plumbing_apply_configuration(
        cluster, pool, lustre_mount=(pvc_name(fs), fs.mount_path) if fs else None
    )
    name = plumbing_policy_name(pool)
    labels = {**cluster_labels(cluster), POOL_LABEL: pool.name}
    policy = {
        "apiVersion": api_version,
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "failurePolicy": "Fail",
            "reinvocationPolicy": "IfNeeded",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                    }
                ]
            },
            "matchConditions": [{"name": "opted-in", "expression": _opt_in_condition(pool)}],
            "mutations": [
                {
                    "patchType": "ApplyConfiguration",
                    "applyConfiguration": {"expression": to_cel(patch)},
                }
            ],
        },
    }
    binding = {
        "apiVersion": api_version,
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "policyName": name,
            "matchResources": {
                "namespaceSelector": {
                    "matchExpressions": [
                        {
                            "key": NAMESPACE_NAME_LABEL,
                            "operator": "In",
                            "values": list(dict.fromkeys(namespaces)),
                        }
                    ]
                },
                "objectSelector": {"matchLabels": {PLUMBING_LABEL: pool.name}},
            },
        },
    }
    return [policy, binding]


def render_admission_plumbing(
    cluster: Cluster, *, server_version: str, namespaces: Sequence[str]
) -> tuple[list[dict[str, Any]], str | None]:
    """Every pool's policy and binding for a server of ``server_version``, and the note for the
    user (why nothing was rendered, or what a beta cluster needs)."""
    api_version, note = admission_api_version(server_version, f"cluster {cluster.name!r}")
    if api_version is None:
        return [], note
    if not namespaces:
        return [], (
            f"cluster {cluster.name!r} lists no training namespaces: no admission-time "
            "plumbing is bound (add 'namespaces' to the catalog)"
        )
    objects: list[dict[str, Any]] = []
    for pool in cluster.node_pools:
        objects += render_plumbing_policy(
            cluster, pool, api_version=api_version, namespaces=namespaces
        )
    return objects, note
