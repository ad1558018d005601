"""The nightly storage check's workload: an Indexed Job running fio against a pool's Lustre.

``render_storage_validation`` renders ``include/manifests/storage-validation.yaml.j2`` (read
from disk through :mod:`gpufleet.manifests.templates`): one pod per chosen node, pinned to it,
mounting the pool's filesystem PVC (``pvc_name``). Its stdout is fio's JSON and nothing else.
``DEFAULT_FIO_IMAGE`` is a small fio image, tag pinned; override it with ``image=``.

The same fio run can ride in the nightly's NCCL pair pods instead (``PoolCheck``, given to
``render_nccl_validation``): an init container ``FIO_CONTAINER`` running the same script
(``include/manifests/_fio_script.j2``, its exit-0 variant) from ``fio_context``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpufleet.domain.fleet import Filesystem, PoolRef
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


@dataclass(frozen=True)
class PoolCheck:
    """The pool's storage check run inside the NCCL pair pods (``render_nccl_validation``'s
    ``pool_check``): both pods of pair ``pair`` (its index in ``pairs``) run fio before
    nccl-tests, as ``render_storage_validation``'s pods do: ``size_gib_per_node`` GiB per node,
    each pass capped at ``runtime_seconds`` (None: ``FIO_RUNTIME_SECONDS``)."""

    pair: int
    size_gib_per_node: int
    runtime_seconds: int | None = None


def pool_filesystem(ref: PoolRef) -> Filesystem:
    """The pool's filesystem fio runs on; ValueError when the pool has none or its mount path
    has unsafe characters (it goes into a shell script)."""
    fs = ref.filesystem
    if fs is None:
        raise ValueError(f"pool {ref.key} has no filesystem in the catalog: nothing to validate")
    if not _SAFE_PATH.fullmatch(fs.mount_path):
        raise ValueError(
            f"filesystem {fs.name!r}: mount_path {fs.mount_path!r} has unsafe characters"
        )
    return fs


def fio_job(ref: PoolRef, size_gib_per_node: int, runtime_seconds: int | None) -> dict[str, int]:
    """fio's job shape on one node of ``ref``'s pool: one fio job per GPU (``numjobs``), each
    writing then reading its share of ``size_gib_per_node`` GiB (``size_mib_per_job``), at
    ``iodepth``, each pass capped at ``runtime_seconds`` (None: ``FIO_RUNTIME_SECONDS``)."""
    if not whole(size_gib_per_node, 1):
        raise ValueError(
            f"size_gib_per_node must be a positive integer (got {size_gib_per_node!r})"
        )
    if runtime_seconds is not None and not whole(runtime_seconds, 1, FIO_RUNTIME_SECONDS):
        raise ValueError(
            f"runtime_seconds must be an integer from 1 to {FIO_RUNTIME_SECONDS} "
            f"(got {runtime_seconds!r})"
        )
    numjobs = ref.pool.gpu.count
    return {
        "numjobs": numjobs,
        "iodepth": FIO_IODEPTH,
        "size_mib_per_job": math.ceil(size_gib_per_node * 1024 / numjobs),
        "runtime_seconds": FIO_RUNTIME_SECONDS if runtime_seconds is None else runtime_seconds,
    }


def fio_context(
    ref: PoolRef, run_id: str, size_gib_per_node: int, runtime_seconds: int | None
) -> dict[str, Any]:
    """What the fio script (``_fio_script.j2``'s ``fio_script``) and its pod need: the mount
    path, the PVC's name (``claim_name``), the run's label (the working directory) and
    ``fio_job``'s shape. ValueError as ``pool_filesystem`` and ``fio_job`` say."""
    fs = pool_filesystem(ref)
    return {
        "mount_path": fs.mount_path,
        "claim_name": pvc_name(fs),
        "run_label": run_label(run_id),
        **fio_job(ref, size_gib_per_node, runtime_seconds),
    }


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
    check_namespace(namespace)
    fs = pool_filesystem(ref)
    if not nodes or isinstance(nodes, str):
        raise ValueError("nodes is empty: give the node names to run fio on")
    checked = [check_node_name(n, f"nodes[{i}]") for i, n in enumerate(nodes)]
    dupes = sorted({n for n in checked if checked.count(n) > 1})
    if dupes:
        raise ValueError(f"nodes lists {', '.join(dupes)} more than once (one fio pod per node)")
    job = fio_job(ref, size_gib_per_node, runtime_seconds)
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
        **job,
    )
