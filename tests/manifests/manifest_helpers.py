"""Helpers the manifest tests share: node names, a training request, reading a pod back."""

from __future__ import annotations

import fnmatch
import re
from typing import Any

from gpufleet.domain.fleet import PoolRef
from gpufleet.domain.plumbing import NCCL_LOG_CONTAINER
from gpufleet.manifests.training import TrainingJobSpec

RUN_ID = "scheduled__2025-06-01T02:00:00+00:00"
DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


def nodes_of(ref: PoolRef, count: int) -> list[str]:
    return [f"{ref.pool.name}-node-{i}" for i in range(count)]


def pairs_of(ref: PoolRef, count: int) -> list[tuple[str, str]]:
    nodes = nodes_of(ref, 2 * count)
    return [(nodes[2 * i], nodes[2 * i + 1]) for i in range(count)]


def env_of(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container.get("env", [])}


def training_spec(**overrides: Any) -> TrainingJobSpec:
    fields: dict[str, Any] = dict(
        name="qwen-ft",
        namespace="ml-team",
        image="registry.example.com/qwen-ft:1.4",
        command=["torchrun", "train.py", "--fsdp"],
        nodes=2,
        gpus_per_node=8,
        priority_class="training-high",
        env={"HF_HOME": "/mnt/cache", "WANDB_MODE": "offline"},
        run_id="manual__2025-06-01T09:30:00+00:00",
    )
    fields.update(overrides)
    return TrainingJobSpec(**fields)


def native_pool_label(ref: PoolRef) -> str:
    return (
        "cloud.google.com/gke-nodepool"
        if ref.cluster.shape == "gke"
        else "eks.amazonaws.com/nodegroup"
    )


def nccl_log_problems(template: dict[str, Any], container: str) -> list[str]:
    """Why the NCCL INFO lines of ``container`` would not reach the pod's log, or ``[]``.

    The transport check reads NCCL's own INFO output (``NCCL INFO Using network <Name>``,
    logged under the INIT subsystem, NVIDIA/nccl ``src/init.cc``; the ``NET/...`` provider and
    link-layer lines under NET) from the ``nccl-log`` sidecar's stdout. That needs: NCCL_DEBUG
    at INFO, INIT and NET among the subsystems, NCCL_DEBUG_FILE in a volume the sidecar mounts
    too, and the sidecar (a native one, so it runs beside the main container) streaming files
    that match the debug file's name once NCCL has expanded ``%h`` (host) and ``%p`` (pid).
    """
    spec = template["spec"]
    main = next(c for c in spec["containers"] if c["name"] == container)
    env = {k: e.get("value") for k, e in env_of(main).items()}
    problems = []
    if env.get("NCCL_DEBUG") != "INFO":
        problems.append(f"NCCL_DEBUG is {env.get('NCCL_DEBUG')!r}, not 'INFO'")
    subsys = set((env.get("NCCL_DEBUG_SUBSYS") or "").upper().split(","))
    if "ALL" not in subsys and not {"INIT", "NET"} <= subsys:
        problems.append(f"NCCL_DEBUG_SUBSYS {env.get('NCCL_DEBUG_SUBSYS')!r} lacks INIT or NET")
    sidecars = [c for c in spec.get("initContainers") or () if c["name"] == NCCL_LOG_CONTAINER]
    if len(sidecars) != 1 or sidecars[0].get("restartPolicy") != "Always":
        return [*problems, f"no native {NCCL_LOG_CONTAINER} sidecar (initContainer, Always)"]
    debug_file = env.get("NCCL_DEBUG_FILE")
    if not debug_file:
        return [*problems, "NCCL_DEBUG_FILE is not set: NCCL logs to stdout, not to the sidecar"]
    mount = max(
        (m for m in main.get("volumeMounts") or () if debug_file.startswith(m["mountPath"] + "/")),
        key=lambda m: len(m["mountPath"]),
        default=None,
    )
    if mount is None:
        return [*problems, f"NCCL_DEBUG_FILE {debug_file} is on no volume of {container}"]
    if mount["name"] not in {v["name"] for v in spec.get("volumes") or ()}:
        problems.append(f"volume {mount['name']!r} is mounted but not defined")
    side_mounts = sidecars[0].get("volumeMounts") or ()
    side = next((m for m in side_mounts if m["name"] == mount["name"]), None)
    if side is None:
        return [*problems, f"the sidecar does not mount volume {mount['name']!r}"]
    seen_by_sidecar = side["mountPath"] + debug_file[len(mount["mountPath"]) :]
    written = seen_by_sidecar.replace("%h", "node-a").replace("%p", "4242")
    globs = re.findall(r"\S*\*\S*", " ".join(sidecars[0].get("command") or ()))
    if not any(fnmatch.fnmatch(written, g) for g in globs):
        problems.append(f"the sidecar tails {globs}, not {written}")
    return problems
