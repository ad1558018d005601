"""The Kubernetes vocabulary gpufleet's workloads share: label keys, selectors, and reading a
rendered Job or JobSet back (its pod templates, the nodes they are pinned to). Pure.

Manifests write these labels and the backends read them (a node's pool, a workload's pods), so
they live below both.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpufleet.domain.fleet import Cluster

POOL_LABEL = "gpufleet.io/pool"
QUARANTINE_KEY = "gpufleet.io/quarantine"
QUARANTINE_LABEL = "gpufleet.io/quarantined"
# New nodes come up with this NoSchedule taint and lose it only after they passed validation.
# a node awaiting validation: new, or back in service (docs/events.md); nodes tainted before the
# key was renamed carry the old one, read, tolerated and removed the same way
UNVALIDATED_KEY = "gpufleet.io/validation-pending"
LEGACY_UNVALIDATED_KEY = "gpufleet.io/unvalidated"
PENDING_KEYS = (UNVALIDATED_KEY, LEGACY_UNVALIDATED_KEY)
WORKLOAD_LABEL = "gpufleet.io/workload"  # validation | training
GKE_POOL_LABEL = "cloud.google.com/gke-nodepool"
EKS_POOL_LABEL = "eks.amazonaws.com/nodegroup"
HOSTNAME_LABEL = "kubernetes.io/hostname"
# Labels the Job and JobSet controllers put on pods (the sim puts the same ones)
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
LEGACY_JOB_NAME_LABEL = "job-name"
COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"


def workload_selector(kind: str, name: str) -> str:
    """The label selector of a Job's or JobSet's pods."""
    return f"{JOBSET_NAME_LABEL}={name}" if kind == "JobSet" else f"{JOB_NAME_LABEL}={name}"


# Taints every GPU workload we render tolerates (GKE and the GPU operator put it on GPU nodes).
GPU_TAINT_KEY = "nvidia.com/gpu"

PAIR_NODES_ANNOTATION = "gpufleet.io/pair-nodes"
# The raw run id (an Airflow run id) on every workload gpufleet renders (``manifests.labels``
# writes it; the sim reads it to tell which night a validation belongs to).
RUN_ID_ANNOTATION = "gpufleet.io/run-id"


def pool_label_key(cluster: Cluster) -> str:
    """The provider's native node label naming a node's pool (GKE node pool / EKS nodegroup)."""
    return GKE_POOL_LABEL if cluster.shape == "gke" else EKS_POOL_LABEL


def pool_label_keys(cluster: Cluster) -> tuple[str, ...]:
    """The node labels that name a node's pool, ours first, then the provider's native one."""
    return (POOL_LABEL, pool_label_key(cluster))


def _pods_per_job(job_spec: Mapping[str, Any]) -> int:
    for key in ("completions", "parallelism"):
        if job_spec.get(key) is not None:
            return int(job_spec[key])
    return 1


def workload_pod_templates(manifest: Mapping[str, Any]) -> list[tuple[str, int, dict[str, Any]]]:
    """``(group, pod count, pod template)`` per pod group of a Job or JobSet.

    For a JobSet the group is the replicatedJob name and the count ``replicas x completions``;
    for a Job, the Job's name and its completions. The templates are the manifest's own dicts
    (mutating them mutates the manifest).
    """
    kind = manifest.get("kind")
    spec = manifest.get("spec") or {}
    if kind == "JobSet":
        out = []
        for rjob in spec.get("replicatedJobs") or ():
            job_spec = rjob["template"]["spec"]
            count = int(rjob.get("replicas", 1)) * _pods_per_job(job_spec)
            out.append((rjob["name"], count, job_spec["template"]))
        return out
    if kind == "Job":
        return [(manifest["metadata"]["name"], _pods_per_job(spec), spec["template"])]
    raise ValueError(f"workload_pod_templates: {kind!r} is not a Job or JobSet")


def pair_nodes(pod_template: Mapping[str, Any]) -> tuple[str, str] | None:
    """The two nodes an nccl-tests pair pod template is pinned to, from its annotation."""
    annotations = (pod_template.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(PAIR_NODES_ANNOTATION)
    if not isinstance(value, str):
        return None
    parts = [p.strip() for p in value.split(",")]
    if len(parts) != 2 or not all(parts):
        return None
    return parts[0], parts[1]


def _hostname_expressions(pod_template: Mapping[str, Any], operator: str) -> list[list[str]]:
    """The values of each required node affinity expression on the hostname with
    ``operator``."""
    spec = pod_template.get("spec") or {}
    try:
        terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ]
    except (KeyError, TypeError):
        return []
    return [
        list(expr.get("values") or ())
        for term in terms or ()
        for expr in term.get("matchExpressions") or ()
        if expr.get("key") == HOSTNAME_LABEL and expr.get("operator") == operator
    ]


def avoided_nodes(pod_template: Mapping[str, Any]) -> set[str]:
    """Hostnames a pod template keeps off by required node affinity (``NotIn``)."""
    return {name for values in _hostname_expressions(pod_template, "NotIn") for name in values}


def avoid_nodes(pod_template: dict[str, Any], names: list[str]) -> None:
    """Keep the pod template off ``names`` (required node affinity, hostname ``NotIn``), in
    every term it already has (terms are alternatives; a term's expressions all hold)."""
    if not names:
        return
    spec = pod_template.setdefault("spec", {})
    required = (
        spec.setdefault("affinity", {})
        .setdefault("nodeAffinity", {})
        .setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    )
    terms = required.setdefault("nodeSelectorTerms", [])
    if not terms:
        terms.append({})
    expr = {"key": HOSTNAME_LABEL, "operator": "NotIn", "values": sorted(names)}
    for term in terms:
        term.setdefault("matchExpressions", []).append(dict(expr, values=list(expr["values"])))


def pinned_nodes(pod_template: Mapping[str, Any]) -> list[str] | None:
    """Hostnames a pod template is pinned to by required node affinity (None if not pinned)."""
    spec = pod_template.get("spec") or {}
    try:
        terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ]
    except (KeyError, TypeError):
        return None
    for term in terms or ():
        for expr in term.get("matchExpressions") or ():
            if expr.get("key") == HOSTNAME_LABEL and expr.get("operator") == "In":
                return list(expr.get("values") or ())
    return None
