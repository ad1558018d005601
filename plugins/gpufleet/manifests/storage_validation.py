"""The nightly storage check's workload: an Indexed Job running fio against a pool's Lustre.

``render_storage_validation`` renders ``include/manifests/storage-validation.yaml.j2`` (read
from disk through :mod:`gpufleet.manifests.templates`): one pod per chosen node, pinned to it,
mounting the pool's filesystem PVC (``pvc_name``). Its stdout is fio's JSON and nothing else.
``DEFAULT_FIO_IMAGE`` is a small fio image, tag pinned; override it with ``image=``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from gpufleet.domain.fleet import PoolRef
from gpufleet.domain.inputs import whole
from gpufleet.manifests.labels import (
    VALIDATION_NAMESPACE,
    check_namespace,
    check_node_name,
    pvc_name,
    run_label,
    validation_context,
)
from gpufleet.manifests.templates import render_template

DEFAULT_FIO_IMAGE = "docker.io/ljishen/fio:3.36"
FIO_CONTAINER = "fio"
STORAGE_DEADLINE_SECONDS = 1800
FIO_IODEPTH = 16
FIO_RUNTIME_SECONDS = 600

_SAFE_PATH = re.compile(r"^/[A-Za-z0-9._/-]*$")


def render_storage_validation(
    ref: PoolRef,
    nodes: Sequence[str],
    run_id: str,
    *,
    namespace: str = VALIDATION_NAMESPACE,
    size_gib_per_node: int = 16,
    runtime_seconds: int | None = None,
    image: str = DEFAULT_FIO_IMAGE,
) -> dict[str, Any]:
    """An Indexed Job running fio on each of ``nodes`` against the pool's Lustre PVC.

    One pod per node; each writes then reads ``size_gib_per_node`` GiB in one fio job per GPU
    (direct I/O, 1 MiB blocks) under ``<mount>/.gpufleet-validation/<run label>/<index>/``
    and removes it on exit. stdout is fio's JSON (``--output-format=json``). Each pass stops
    after ``runtime_seconds`` (None: ``FIO_RUNTIME_SECONDS``).
    """
    pool = ref.pool
    check_namespace(namespace)
    fs = ref.filesystem
    if fs is None:
        raise ValueError(f"pool {ref.key} has no filesystem in the catalog: nothing to validate")
    if not _SAFE_PATH.fullmatch(fs.mount_path):
        raise ValueError(
            f"filesystem {fs.name!r}: mount_path {fs.mount_path!r} has unsafe characters"
        )
    if not nodes or isinstance(nodes, str):
        raise ValueError("nodes is empty: give the node names to run fio on")
    checked = [check_node_name(n, f"nodes[{i}]") for i, n in enumerate(nodes)]
    dupes = sorted({n for n in checked if checked.count(n) > 1})
    if dupes:
        raise ValueError(f"nodes lists {', '.join(dupes)} more than once (one fio pod per node)")
    if not whole(size_gib_per_node, 1):
        raise ValueError(
            f"size_gib_per_node must be a positive integer (got {size_gib_per_node!r})"
        )
    if runtime_seconds is not None and not whole(runtime_seconds, 1, FIO_RUNTIME_SECONDS):
        raise ValueError(
            f"runtime_seconds must be an integer from 1 to {FIO_RUNTIME_SECONDS} "
            f"(got {runtime_seconds!r})"
        )
    numjobs = pool.gpu.count
    context = validation_context(ref, "storage", "fio", run_id)
    return render_template(
        "storage-validation.yaml.j2",
        **context,
        pod_labels=context["labels"],
        namespace=namespace,
        active_deadline_seconds=STORAGE_DEADLINE_SECONDS,
        nodes=checked,
        image=image,
        mount_path=fs.mount_path,
        claim_name=pvc_name(fs),
        run_label=run_label(run_id),
        numjobs=numjobs,
        iodepth=FIO_IODEPTH,
        size_mib_per_job=math.ceil(size_gib_per_node * 1024 / numjobs),
        runtime_seconds=FIO_RUNTIME_SECONDS if runtime_seconds is None else runtime_seconds,
    )
