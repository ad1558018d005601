"""The labels, annotations, names and namespaces on every object gpufleet renders.

Design: docs/design/manifests.md.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from gpufleet.domain.fleet import Filesystem, NodePool, PoolRef
from gpufleet.domain.names import (
    DNS1035_LABEL,
    DNS1123_LABEL,
    DNS1123_SUBDOMAIN,
    LABEL_VALUE,
    MAX_JOBSET_NAME,
)
from gpufleet.domain.workloads import (
    POOL_LABEL,
    RUN_ID_ANNOTATION,
    WORKLOAD_LABEL,
    pool_label_key,
)

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "gpufleet"
RUN_LABEL = "gpufleet.io/run"
CLUSTER_ANNOTATION = "gpufleet.io/cluster"
CLUSTER_LABEL = "gpufleet.io/cluster"
CHECK_LABEL = "gpufleet.io/check"  # nccl | storage (validation workloads)
PAIR_LABEL = "gpufleet.io/pair"
JOB_LABEL = "gpufleet.io/job"  # training job name, on the JobSet and its pods
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"

# The namespace validation workloads run in (and the ssh Secret their pairs mount lives in),
# and how long their finished objects are kept: long enough for the DAG to read the pods' logs.
VALIDATION_NAMESPACE = "gpufleet-validation"
VALIDATION_TTL_SECONDS = 6 * 3600
TRAINING_NAMESPACE = "default"  # where render_kueue_objects puts the LocalQueue by default
# The Secret holding the ssh key the two pods of an nccl-tests pair share (addons renders it).
NCCL_SSH_SECRET = "gpufleet-nccl-ssh"


def _short_hash(text: str, length: int = 8) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def run_label(run_id: str) -> str:
    """A valid label value (<= 63 chars) for ``run_id``: itself if valid, else a cleaned
    prefix plus 8 hex of its sha256 (``manual__2025-01-01T00:00:00+00:00`` ->
    ``manual__2025-01-01T00-00-00-00-00-<hash>``)."""
    if not isinstance(run_id, str) or not run_id:
        raise ValueError("run_id must be a non-empty string")
    if len(run_id) <= 63 and LABEL_VALUE.match(run_id):
        return run_id
    clean = re.sub(r"[^A-Za-z0-9_.-]+", "-", run_id)[:54].strip("-_.")
    digest = _short_hash(run_id)
    return f"{clean}-{digest}" if clean else digest


def workload_name(check: str, pool: str, run_id: str) -> str:
    """``<check>-<pool>-<8 hex of sha256(run_id)>``, the pool truncated so the name is at most
    ``MAX_JOBSET_NAME`` (40) characters; a DNS-1035 label because ``check`` starts with a
    letter. Deterministic: the same run renders the same name."""
    if not DNS1035_LABEL.match(check):
        raise ValueError(f"check prefix {check!r} must be a DNS-1035 label")
    if not isinstance(run_id, str) or not run_id:
        raise ValueError("run_id must be a non-empty string")
    digest = _short_hash(run_id)
    budget = MAX_JOBSET_NAME - len(check) - len(digest) - 2
    if budget < 1:
        raise ValueError(f"check prefix {check!r} is too long for a {MAX_JOBSET_NAME}-char name")
    stem = pool[:budget].strip("-")
    return f"{check}-{stem}-{digest}" if stem else f"{check}-{digest}"


def pvc_name(fs: Filesystem | str) -> str:
    """The PersistentVolumeClaim a filesystem is mounted through: ``<filesystem>-pvc``.

    Onboarding creates one PVC of this name in every namespace that mounts the filesystem
    (the validation namespace and each training namespace)."""
    name = fs if isinstance(fs, str) else fs.name
    return f"{name}-pvc"


def base_labels(workload: str, run: str, pool: NodePool | None = None) -> dict[str, str]:
    """The labels every workload object (and, with ``pool``, every pod) carries."""
    labels = {MANAGED_BY_LABEL: MANAGED_BY, WORKLOAD_LABEL: workload, RUN_LABEL: run}
    if pool is not None:
        labels[POOL_LABEL] = pool.name
    return labels


def validation_context(ref: PoolRef, check: str, prefix: str, run_id: str) -> dict[str, Any]:
    """The template variables every validation workload shares: its deterministic ``name``
    (``workload_name(prefix, ...)``), ``labels`` (the platform's plus ``gpufleet.io/check:
    <check>``), ``annotations`` (the raw run id and the cluster), ``ttl_seconds`` and the
    pool's ``node_selector``."""
    cluster, pool = ref.cluster, ref.pool
    run = run_label(run_id)
    return {
        "name": workload_name(prefix, pool.name, run_id),
        "labels": {**base_labels("validation", run, pool), CHECK_LABEL: check},
        "annotations": {RUN_ID_ANNOTATION: run_id, CLUSTER_ANNOTATION: cluster.name},
        "ttl_seconds": VALIDATION_TTL_SECONDS,
        "node_selector": {pool_label_key(cluster): pool.name},
    }


def check_namespace(namespace: str) -> None:
    """Raise ValueError unless ``namespace`` is a DNS-1123 label (what Kubernetes accepts)."""
    if not isinstance(namespace, str) or len(namespace) > 63 or not DNS1123_LABEL.match(namespace):
        raise ValueError(
            f"namespace {namespace!r} is not a DNS-1123 label (lowercase letters, digits and '-', "
            "at most 63 characters)"
        )


def check_node_name(node: Any, what: str) -> str:
    """``node`` if it is a valid node name (a DNS-1123 subdomain), else ValueError naming
    ``what`` (e.g. ``pairs[2][0]``)."""
    if not isinstance(node, str) or len(node) > 253 or not DNS1123_SUBDOMAIN.match(node):
        raise ValueError(f"{what}: {node!r} is not a valid node name (a DNS-1123 subdomain)")
    return node
