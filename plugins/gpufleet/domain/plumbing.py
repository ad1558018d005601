"""RDMA, NCCL and storage plumbing that the platform injects into pods. Pure domain code.

One place says what a pod needs on each provider shape (``pod_plumbing``, ``apply_plumbing``),
and the same place reads a rendered pod back (``inspect_pod``): its GPU request, whether the
RDMA NICs or EFA devices are attached, which NCCL net plugin NCCL could load (the host path a
plugin volume comes from, not only where it is mounted), ``NCCL_NET``, ``NCCL_DEBUG`` and the
log sidecar. The simulated fleet decides from those facts what NCCL would do. Users never write
any of this by hand.

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
    """The pod's network interfaces: eth0 on the default network, eth1 on the extra gVNIC
    network when the cluster has one (A3 Ultra / A4), one per RDMA subnet from eth2."""
    nics = [{"interfaceName": "eth0", "network": "default"}]
    if cluster.network.gvnic is not None:
        nics.append({"interfaceName": "eth1", "network": cluster.network.gvnic.name})
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


# --- the inverse: what does a rendered pod carry for NCCL? ------------------------------------

# Library folders of the image that the nccl-tests launcher appends to LD_LIBRARY_PATH
# (include/manifests/nccl-validation.yaml.j2): a net plugin found there is loaded as well.
IMAGE_LIBS_ENV = "GPUFLEET_IMAGE_LIBS"
# Where aws-ofi-nccl is found: the EFA installer's copy (OFI_LIB), and the prefix the AWS
# nccl-tests image builds it into (aws-samples/awsome-distributed-training,
# micro-benchmarks/nccl-tests/nccl-tests.Dockerfile: ./configure
# --prefix=/opt/aws-ofi-nccl/install --enable-platform-aws).
OFI_PLUGIN_DIRS = (OFI_LIB, "/opt/aws-ofi-nccl/install/lib")
GPU_RESOURCE = "nvidia.com/gpu"
RDMA_TRANSPORTS = ("gib", "ib", "roce", "ofi-efa", "tcpxo")


@dataclass(frozen=True)
class PodFabric:
    """What a rendered pod carries for NCCL, as the node and NCCL would find it.

    Facts, not a verdict: which network NCCL then picks is the simulated fleet's model of NCCL
    (``gpufleet.backends.sim.nccl``). ``missing`` lists, in words, what the pool's transport
    needs and the pod lacks; an empty tuple means the plumbing is complete.
    """

    gpus: int  # nvidia.com/gpu requested by the main container
    rdma_attached: bool  # GKE: every RDMA subnet attached by annotation; EKS: EFA devices
    plugin: str | None  # the net plugin NCCL can load, by the name it reports (gIB, Libfabric)
    ofi_provider: str | None  # FI_PROVIDER as the pod sets it (None: the plugin chooses)
    pinned_net: str | None  # NCCL_NET as the pod sets it
    nccl_debug: str | None  # NCCL_DEBUG, upper-cased
    log_sidecar: bool  # the nccl-log sidecar streams NCCL's debug files out
    missing: tuple[str, ...]

    @property
    def writes_nccl_info(self) -> bool:
        """NCCL INFO lines reach the ``nccl-log`` sidecar: NCCL_DEBUG=INFO (or TRACE, which
        includes INFO) and the sidecar present."""
        return self.nccl_debug in ("INFO", "TRACE") and self.log_sidecar


def _env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: str(e.get("value", "")) for e in container.get("env") or () if "name" in e}


def _count(quantity: Any) -> int:
    text = str(quantity if quantity is not None else "").strip()
    return int(text) if text.isdigit() else 0


def _dirs(value: str) -> list[str]:
    return [p.rstrip("/") or "/" for p in value.split(":") if p]


def _gib_plugin(spec: dict[str, Any], main: dict[str, Any], library_path: list[str]) -> list[str]:
    """Why the gIB plugin cannot be loaded (empty: it can). NCCL dlopens the plugin from the
    library path; on GKE it lives on the host, so the pod must mount the host's folder."""
    problems = []
    mount = next(
        (
            m
            for m in main.get("volumeMounts") or ()
            if str(m.get("mountPath", "")).rstrip("/") == GIB_MOUNT
        ),
        None,
    )
    volumes = {v.get("name"): v for v in spec.get("volumes") or ()}
    if mount is None:
        problems.append(f"the gIB NCCL plugin (nothing is mounted at {GIB_MOUNT})")
    else:
        volume = volumes.get(mount.get("name")) or {}
        host = str((volume.get("hostPath") or {}).get("path") or "").rstrip("/")
        if host != GIB_HOST_PATH:
            source = f"host path {host}" if host else "a volume that is not a host path"
            problems.append(
                f"the gIB NCCL plugin ({GIB_MOUNT} is mounted from {source}, not the host's "
                f"{GIB_HOST_PATH})"
            )
    if f"{GIB_MOUNT}/lib64" not in library_path:
        problems.append(f"the gIB NCCL plugin on LD_LIBRARY_PATH ({GIB_MOUNT}/lib64)")
    return problems


def inspect_pod(cluster: Cluster, pool: NodePool, pod_template: dict[str, Any]) -> PodFabric:
    """Read a pod template (``{"metadata":..., "spec":...}``) the way the node and NCCL would:
    its GPU request, RDMA attachment, loadable net plugin, NCCL_NET, NCCL_DEBUG and log
    sidecar. The main container is the first one (the one ``apply_plumbing`` plumbs).

    - GKE: the RDMA NICs are attached when ``networking.gke.io/interfaces`` names every RDMA
      subnet of the cluster; the gIB plugin loads when the host's ``/home/kubernetes/bin/gib``
      is mounted at ``/usr/local/gib`` (a hostPath volume: the mount path alone is not enough)
      and ``/usr/local/gib/lib64`` is on ``LD_LIBRARY_PATH``.
    - EKS: EFA is attached when the pod requests ``vpc.amazonaws.com/efa`` devices;
      aws-ofi-nccl loads when its folder is on the library path (``LD_LIBRARY_PATH``, plus the
      image folders the nccl-tests launcher appends from ``GPUFLEET_IMAGE_LIBS``).
      ``FI_PROVIDER`` is not required: aws-ofi-nccl's AWS platform code sets FI_PROVIDER=efa
      unless the pod overrides it (aws-ofi-nccl doc/plugin-initialization.md), so only a
      different provider is reported.
    - ``NCCL_NET_PLUGIN=none`` stops NCCL loading any net plugin (NCCL environment docs).
    """
    spec = pod_template.get("spec") or {}
    containers = spec.get("containers") or []
    main = containers[0] if containers else {}
    env = _env_of(main)
    limits = (main.get("resources") or {}).get("limits") or {}
    library_path = _dirs(env.get("LD_LIBRARY_PATH", "")) + _dirs(env.get(IMAGE_LIBS_ENV, ""))
    no_plugins = env.get("NCCL_NET_PLUGIN", "").strip().lower() == "none"
    gpus = _count(limits.get(GPU_RESOURCE))
    ofi_provider = env.get("FI_PROVIDER") or None
    missing: list[str] = [] if gpus > 0 else [f"a GPU request ({GPU_RESOURCE} limit)"]
    if cluster.shape == "gke":
        rdma, plugin, problems = _gke_fabric(cluster, pool, pod_template, library_path)
    else:
        rdma, plugin, problems = _eks_fabric(pool, limits, library_path, ofi_provider)
    missing += problems
    if no_plugins and pool.transport in ("gib", "ofi-efa", "tcpxo"):
        missing.append("NCCL_NET_PLUGIN=none stops NCCL loading the net plugin")
    sidecars = [*(spec.get("initContainers") or ()), *containers[1:]]
    return PodFabric(
        gpus=gpus,
        rdma_attached=rdma,
        plugin=None if no_plugins else plugin,
        ofi_provider=ofi_provider,
        pinned_net=env.get("NCCL_NET") or None,
        nccl_debug=(env.get("NCCL_DEBUG") or "").strip().upper() or None,
        log_sidecar=any(c.get("name") == NCCL_LOG_CONTAINER for c in sidecars),
        missing=tuple(missing),
    )


def _gke_fabric(
    cluster: Cluster, pool: NodePool, pod_template: dict[str, Any], library_path: list[str]
) -> tuple[bool, str | None, list[str]]:
    """(RDMA NICs attached, the plugin NCCL can load, what the pool needs and the pod lacks)."""
    meta = pod_template.get("metadata") or {}
    spec = pod_template.get("spec") or {}
    main = (spec.get("containers") or [{}])[0]
    problems: list[str] = []
    try:
        nics = json.loads((meta.get("annotations") or {}).get(GKE_INTERFACES_ANNOTATION, "[]"))
    except ValueError:
        nics = []
    nics = nics if isinstance(nics, list) else []
    attached = {n.get("network") for n in nics if isinstance(n, dict)}
    wanted = {s.name for s in cluster.network.subnets[: cluster.network.rdma_nics]}
    rdma = bool(wanted) and wanted <= attached
    if not rdma and pool.transport in RDMA_TRANSPORTS:
        problems.append(
            f"RDMA NIC attachments ({GKE_INTERFACES_ANNOTATION} lacks "
            f"{', '.join(sorted(wanted - attached)) or 'networks'})"
        )
    plugin_problems = _gib_plugin(spec, main, library_path)
    if pool.transport == "gib":
        problems += plugin_problems
    return rdma, None if plugin_problems else "gIB", problems


def _eks_fabric(
    pool: NodePool, limits: dict[str, Any], library_path: list[str], ofi_provider: str | None
) -> tuple[bool, str | None, list[str]]:
    """(EFA devices attached, the plugin NCCL can load, what the pool needs and the pod lacks)."""
    problems: list[str] = []
    rdma = _count(limits.get(EFA_RESOURCE)) > 0
    if not rdma and pool.transport in RDMA_TRANSPORTS:
        problems.append(f"EFA devices ({EFA_RESOURCE} limit)")
    found = any(d in library_path for d in OFI_PLUGIN_DIRS)
    if pool.transport == "ofi-efa":
        if not found:
            problems.append(f"aws-ofi-nccl on the library path ({OFI_LIB} on LD_LIBRARY_PATH)")
        if ofi_provider and ofi_provider != "efa":
            problems.append(f"FI_PROVIDER={ofi_provider} selects a libfabric provider, not efa")
    return rdma, "Libfabric" if found else None, problems
