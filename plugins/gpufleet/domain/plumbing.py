"""RDMA, NCCL and storage plumbing that the platform injects into pods. Pure domain code.

One place says what a pod needs on each provider shape, and the same place answers the inverse
question the simulated fleet (and reviewers) ask of a rendered pod: "would this pod get the
fabric?". Users never write any of this by hand.

- ``gke`` (A3 Ultra / A4, gIB): one network-interface annotation per RDMA subnet
  (``networking.gke.io/interfaces``), the gIB NCCL plugin mounted from the host at
  ``/usr/local/gib`` and put on ``LD_LIBRARY_PATH``, gIB tuning environment.
- ``eks`` (P5, EFA): ``vpc.amazonaws.com/efa`` devices from the EFA device plugin, the
  aws-ofi-nccl plugin on libfabric's ``efa`` provider.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

from gpufleet.domain.fleet import Cluster, NodePool

# The name NCCL reports ("Using network <name>") and accepts in NCCL_NET, per transport.
NCCL_NET_NAMES = {
    "gib": "gIB",
    "ib": "IB",
    "roce": "IB",
    "ofi-efa": "Libfabric",
    "tcpxo": "FasTrak",
    "socket": "Socket",
}

GIB_HOST_PATH = "/home/kubernetes/bin/gib"
GIB_MOUNT = "/usr/local/gib"
NVIDIA_HOST_PATH = "/home/kubernetes/bin/nvidia"
NVIDIA_MOUNT = "/usr/local/nvidia"
OFI_LIB = "/opt/amazon/ofi-nccl/lib"
EFA_LIB = "/opt/amazon/efa/lib"
EFA_RESOURCE = "vpc.amazonaws.com/efa"
GKE_INTERFACES_ANNOTATION = "networking.gke.io/interfaces"
GKE_DEFAULT_INTERFACE_ANNOTATION = "networking.gke.io/default-interface"
NCCL_LOG_DIR = "/var/log/nccl"
NCCL_LOG_CONTAINER = "nccl-log"

# gIB tuning, as GKE's A3 Ultra guide sets it through /usr/local/gib/scripts/set_nccl_env.sh
_GIB_ENV = {
    "NCCL_CROSS_NIC": "0",
    "NCCL_NET_GDR_LEVEL": "PIX",
    "NCCL_P2P_NET_CHUNKSIZE": "131072",
    "NCCL_NVLS_CHUNKSIZE": "524288",
    "NCCL_IB_ADAPTIVE_ROUTING": "1",
    "NCCL_IB_QPS_PER_CONNECTION": "4",
    "NCCL_IB_TC": "52",
    "NCCL_IB_FIFO_TC": "84",
    "NCCL_TUNER_CONFIG_PATH": f"{GIB_MOUNT}/configs/tuner_config_a3u.txtpb",
}
_EFA_ENV = {
    "FI_PROVIDER": "efa",
    "FI_EFA_USE_DEVICE_RDMA": "1",
    "FI_EFA_FORK_SAFE": "1",
    "NCCL_PROTO": "simple",
}


@dataclass(frozen=True)
class PodPlumbing:
    """What to add to a pod: annotations, env, volumes, volume mounts, resource limits."""

    annotations: dict[str, str]
    env: dict[str, str]
    volumes: list[dict[str, Any]]
    mounts: list[dict[str, Any]]
    limits: dict[str, str]


def gke_interfaces(cluster: Cluster) -> list[dict[str, str]]:
    """The pod's network interfaces: eth0 on the default network, one per RDMA subnet."""
    nics = [{"interfaceName": "eth0", "network": "default"}]
    for i, subnet in enumerate(cluster.network.subnets[: cluster.network.rdma_nics]):
        nics.append({"interfaceName": f"eth{i + 2}", "network": subnet.name})
    return nics


def nccl_debug_env(subsys: str = "INIT,NET") -> dict[str, str]:
    """NCCL INFO logging into a per-rank file that the ``nccl-log`` sidecar streams out."""
    return {
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": subsys,
        "NCCL_DEBUG_FILE": f"{NCCL_LOG_DIR}/%h.%p.log",
    }


def pod_plumbing(cluster: Cluster, pool: NodePool, *, pin_network: bool) -> PodPlumbing:
    """RDMA + NCCL plumbing for a pod on ``pool``.

    ``pin_network`` sets ``NCCL_NET`` to the pool's expected network so NCCL fails instead of
    silently falling back to sockets (training jobs). Validation leaves it unset on purpose: it
    must observe what NCCL picks by itself.
    """
    env: dict[str, str] = {}
    annotations: dict[str, str] = {}
    volumes: list[dict[str, Any]] = [
        {"name": "nccl-logs", "emptyDir": {}},
        {"name": "dshm", "emptyDir": {"medium": "Memory"}},
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "nccl-logs", "mountPath": NCCL_LOG_DIR},
        {"name": "dshm", "mountPath": "/dev/shm"},
    ]
    limits = {"nvidia.com/gpu": str(pool.gpu.count)}
    if cluster.shape == "gke":
        annotations[GKE_DEFAULT_INTERFACE_ANNOTATION] = "eth0"
        annotations[GKE_INTERFACES_ANNOTATION] = json.dumps(gke_interfaces(cluster))
        volumes += [
            {"name": "library-dir-host", "hostPath": {"path": NVIDIA_HOST_PATH}},
            {"name": "gib", "hostPath": {"path": GIB_HOST_PATH}},
        ]
        mounts += [
            {"name": "library-dir-host", "mountPath": NVIDIA_MOUNT},
            {"name": "gib", "mountPath": GIB_MOUNT},
        ]
        env["LD_LIBRARY_PATH"] = f"{NVIDIA_MOUNT}/lib64:{GIB_MOUNT}/lib64"
        if pool.transport == "gib":
            env.update(_GIB_ENV)
    else:  # eks
        if pool.transport == "ofi-efa":
            limits[EFA_RESOURCE] = str(cluster.network.rdma_nics)
            limits["hugepages-2Mi"] = "5120Mi"
            env.update(_EFA_ENV)
        env["LD_LIBRARY_PATH"] = f"{OFI_LIB}:{EFA_LIB}:/usr/local/cuda/lib64"
    if pin_network:
        env["NCCL_NET"] = NCCL_NET_NAMES[pool.transport]
    env.update(nccl_debug_env())
    return PodPlumbing(annotations, env, volumes, mounts, limits)


def nccl_log_sidecar() -> dict[str, Any]:
    """A native sidecar that streams every rank's NCCL debug file to its own stdout."""
    return {
        "name": NCCL_LOG_CONTAINER,
        "image": "busybox:1.37",
        "restartPolicy": "Always",
        "command": [
            "sh",
            "-c",
            f"touch {NCCL_LOG_DIR}/.keep; exec tail -n +1 -F {NCCL_LOG_DIR}/*.log 2>/dev/null",
        ],
        "volumeMounts": [{"name": "nccl-logs", "mountPath": NCCL_LOG_DIR, "readOnly": True}],
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
    }


# Environment the platform owns: a workload may not set these (it would undo the plumbing, e.g.
# unpin NCCL_NET or hide the NCCL log the transport check reads). Every key ``pod_plumbing``
# sets is platform-owned as well; see ``is_platform_env``.
PLATFORM_ENV_KEYS = frozenset({"NCCL_NET", "NCCL_NET_PLUGIN", "LD_LIBRARY_PATH", "LD_PRELOAD"})
PLATFORM_ENV_PREFIXES = ("NCCL_DEBUG", "FI_")


def is_platform_env(name: str, plumbing: PodPlumbing | None = None) -> bool:
    """True if ``name`` is set by the platform (fixed keys, prefixes, or this pod's plumbing)."""
    if name in PLATFORM_ENV_KEYS or name.startswith(PLATFORM_ENV_PREFIXES):
        return True
    return plumbing is not None and name in plumbing.env


def apply_plumbing(
    pod_template: dict[str, Any],
    plumbing: PodPlumbing,
    *,
    container: str | None = None,
    log_sidecar: bool = True,
) -> dict[str, Any]:
    """Inject ``plumbing`` into a pod template (``{"metadata":..., "spec":...}``) in place.

    Pod annotations and volumes go on the pod; env, volume mounts and device limits (with
    requests equal to limits) on the main container: the one named ``container``, else the
    first, which is the container ``inspect_pod`` judges. ``log_sidecar`` adds the
    ``nccl-log`` native sidecar. Volumes and mounts already present by name/path are kept.
    Plumbing env replaces a template entry of the same name (the platform wins). Returns the
    same dict; what it inserts is copied, so one ``PodPlumbing`` may plumb many templates.
    """
    meta = pod_template.setdefault("metadata", {})
    spec = pod_template.setdefault("spec", {})
    containers = spec.get("containers") or []
    if not containers:
        raise ValueError("pod template has no containers to plumb")
    main = containers[0]
    if container is not None:
        named = [c for c in containers if c.get("name") == container]
        if not named:
            raise ValueError(f"pod template has no container named {container!r}")
        main = named[0]
    if plumbing.annotations:
        (meta.setdefault("annotations", {})).update(plumbing.annotations)
    volumes = spec.setdefault("volumes", [])
    have = {v.get("name") for v in volumes}
    volumes.extend(copy.deepcopy(v) for v in plumbing.volumes if v["name"] not in have)
    # the platform wins: an entry of the same name already in the template is replaced
    env = [e for e in main.get("env") or [] if e.get("name") not in plumbing.env]
    env.extend({"name": k, "value": v} for k, v in plumbing.env.items())
    main["env"] = env
    mounts = main.setdefault("volumeMounts", [])
    paths = {m.get("mountPath") for m in mounts}
    mounts.extend(copy.deepcopy(m) for m in plumbing.mounts if m["mountPath"] not in paths)
    resources = main.setdefault("resources", {})
    resources.setdefault("limits", {}).update(plumbing.limits)
    resources.setdefault("requests", {}).update(plumbing.limits)
    if log_sidecar:
        inits = spec.setdefault("initContainers", [])
        if not any(c.get("name") == NCCL_LOG_CONTAINER for c in inits):
            inits.append(nccl_log_sidecar())
    return pod_template


# --- the inverse: would this pod get the fabric? ----------------------------------------------


@dataclass(frozen=True)
class PodFabric:
    """What a rendered pod spec carries, as a cluster would see it."""

    rdma_attached: bool  # NIC attachments / EFA devices present
    plugin_present: bool  # the NCCL net plugin is mounted and on the library path
    pinned_net: str | None  # NCCL_NET if set
    missing: tuple[str, ...]  # what is missing, in words


def _env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: str(e.get("value", "")) for e in container.get("env") or () if "name" in e}


def inspect_pod(cluster: Cluster, pool: NodePool, pod_template: dict[str, Any]) -> PodFabric:
    """Judge a pod template (``{"metadata":..., "spec":...}``) against the pool's plumbing."""
    meta = pod_template.get("metadata") or {}
    spec = pod_template.get("spec") or {}
    containers = spec.get("containers") or []
    main = containers[0] if containers else {}
    env = _env_of(main)
    mounts = {m.get("mountPath") for m in main.get("volumeMounts") or ()}
    limits = (main.get("resources") or {}).get("limits") or {}
    missing: list[str] = []
    if pool.transport not in ("gib", "ib", "roce", "ofi-efa", "tcpxo"):
        return PodFabric(False, False, env.get("NCCL_NET"), ())
    if cluster.shape == "gke":
        try:
            nics = json.loads((meta.get("annotations") or {}).get(GKE_INTERFACES_ANNOTATION, "[]"))
        except ValueError:
            nics = []
        attached = {n.get("network") for n in nics if isinstance(n, dict)}
        wanted = {s.name for s in cluster.network.subnets[: cluster.network.rdma_nics]}
        rdma = bool(wanted) and wanted <= attached
        if not rdma:
            missing.append(
                f"RDMA NIC attachments ({GKE_INTERFACES_ANNOTATION} lacks "
                f"{', '.join(sorted(wanted - attached)) or 'networks'})"
            )
        plugin = GIB_MOUNT in mounts and f"{GIB_MOUNT}/lib64" in env.get("LD_LIBRARY_PATH", "")
        if not plugin:
            missing.append(f"the gIB NCCL plugin ({GIB_MOUNT} mount on LD_LIBRARY_PATH)")
    else:
        rdma = str(limits.get(EFA_RESOURCE, "0")) not in ("0", "")
        if not rdma:
            missing.append(f"EFA devices ({EFA_RESOURCE} limit)")
        plugin = OFI_LIB in env.get("LD_LIBRARY_PATH", "") and env.get("FI_PROVIDER") == "efa"
        if not plugin:
            missing.append("aws-ofi-nccl on the efa provider (LD_LIBRARY_PATH, FI_PROVIDER=efa)")
    return PodFabric(rdma, plugin, env.get("NCCL_NET"), tuple(missing))
