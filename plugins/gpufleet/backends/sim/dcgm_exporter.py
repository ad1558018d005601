"""What a simulated node's dcgm-exporter serves on ``/metrics``, in the exporter's own shape, so
the real parser (``gpufleet.parsing.health.parse_dcgm_exporter``) and the passive decision
(``gpufleet.domain.health.decide_passive``) run on it.

Design: docs/design/simulated-fleet.md.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable

from gpufleet.backends.base import PodInfo
from gpufleet.backends.sim.base import SimBackendBase
from gpufleet.backends.sim.gpu_health import (
    DRIVER_VERSION,
    NVLINKS,
    _bus,
    _Gpu,
    _uuid,
    gpu_states,
)
from gpufleet.backends.sim.output import GPU_NAMES
from gpufleet.domain.faults import Fault
from gpufleet.domain.health import XID_CATALOG
from gpufleet.errors import BackendError, CatalogError

HW_THERMAL = 0x40  # DCGM_CLOCKS_EVENT_REASON_HW_THERMAL
WINDOW_MS = 300000  # the exporter's default window for the DCGM_EXP_* counts
# (metric, Prometheus type, help) as dcgm-exporter's counters CSVs word them
_FIELDS = (
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_EXP_XID_ERRORS_COUNT", "gauge", "Count of XID Errors within user-specified time window"),
    (
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for uncorrectable errors",
    ),
    (
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for correctable errors",
    ),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed"),
    ("DCGM_FI_DEV_ROW_REMAP_PENDING", "gauge", "Whether remapping of rows is pending"),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Total number of double-bit volatile ECC errors."),
    ("DCGM_FI_DEV_ECC_DBE_VOL_DEV", "counter", "Device memory double bit volatile ECC errors."),
    ("DCGM_FI_DEV_ECC_DBE_VOL_SRM", "counter", "SRAM double bit volatile ECC errors."),
    (
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "counter",
        "Total number of NVLink flow-control CRC errors.",
    ),
    (
        "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
        "counter",
        "Total number of NVLink data CRC errors.",
    ),
    ("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "counter", "Total number of NVLink retries."),
    (
        "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
        "counter",
        "Total number of NVLink recovery errors.",
    ),
    ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "gauge", "Current clock event reasons (bitmask)."),
)
_LINK_STATE = ("DCGM_FI_DEV_NVLINK_GET_STATE", "gauge", "NVLink state (0 inactive, 1 active).")


def _labels(node: str, gpu: _Gpu, model: str) -> str:
    bus, device = _bus(gpu.index)
    return (
        f'gpu="{gpu.index}",UUID="{_uuid(node, gpu.index)}",'
        f'pci_bus_id="00000000:{bus:02X}:{device:02X}.0",device="nvidia{gpu.index}",'
        f'modelName="{model}",Hostname="{node}",DCGM_FI_DRIVER_VERSION="{DRIVER_VERSION}"'
    )


def _samples(name: str, gpu: _Gpu, labels: str, throttling: bool) -> list[str]:
    """The GPU's sample lines of metric ``name``."""
    last = gpu.xids[-1] if gpu.xids else 0
    if name == "DCGM_FI_DEV_XID_ERRORS":
        entry = XID_CATALOG.get(last)
        said = entry.meaning if entry else ("No Error" if last == 0 else "Xid event")
        return [f'{name}{{{labels},err_code="{last}",err_msg="{said}"}} {last}']
    if name == "DCGM_EXP_XID_ERRORS_COUNT":
        window = f'window_size_in_ms="{WINDOW_MS}"'
        counts = Counter(gpu.xids)
        if not counts:
            return [f"{name}{{{labels},{window}}} 0"]
        return [f'{name}{{{labels},{window},xid="{x}"}} {n}' for x, n in sorted(counts.items())]
    value = {
        "DCGM_FI_DEV_GPU_TEMP": 91 if throttling else 63,
        "DCGM_FI_DEV_GPU_UTIL": 98,
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": gpu.remapped_uncorrectable,
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": int(gpu.remap_failure),
        "DCGM_FI_DEV_ROW_REMAP_PENDING": int(gpu.remap_pending),
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": gpu.dram_uncorrectable + gpu.sram_uncorrectable,
        "DCGM_FI_DEV_ECC_DBE_VOL_DEV": gpu.dram_uncorrectable,
        "DCGM_FI_DEV_ECC_DBE_VOL_SRM": gpu.sram_uncorrectable,
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": HW_THERMAL if throttling else 0,
    }.get(name, 0)
    return [f"{name}{{{labels}}} {value}"]


def _link_samples(node: str, gpu: _Gpu, model: str) -> list[str]:
    bus, device = _bus(gpu.index)
    name = _LINK_STATE[0]
    return [
        f'{name}{{nvlink="{link}",gpu="{gpu.index}",gpu_uuid="{_uuid(node, gpu.index)}",'
        f'pci_bus_id="00000000:{bus:02X}:{device:02X}.0",device="nvidia{gpu.index}",'
        f'model_name="{model}",hostname="{node}"}} {0 if link == gpu.link_down else 1}'
        for link in range(NVLINKS)
    ]


def dcgm_exporter_metrics(node: str, faults: Iterable[Fault], *, gpu_model: str, gpus: int) -> str:
    """What ``node``'s dcgm-exporter serves with ``faults`` (its GPU faults) in force."""
    state, throttling = gpu_states(node, faults, gpus)
    model = GPU_NAMES.get(gpu_model, f"NVIDIA {gpu_model}")
    lines: list[str] = []
    for name, kind, said in _FIELDS:
        lines += [f"# HELP {name} {said}", f"# TYPE {name} {kind}"]
        for gpu in state:
            lines += _samples(name, gpu, _labels(node, gpu, model), throttling)
    lines += [f"# HELP {_LINK_STATE[0]} {_LINK_STATE[2]}", f"# TYPE {_LINK_STATE[0]} gauge"]
    for gpu in state:
        lines += _link_samples(node, gpu, model)
    return "\n".join(lines) + "\n"


class SimGpuMetrics(SimBackendBase):
    """``gpu_metrics`` of a simulated cluster (a base of ``SimClusterBackend``)."""

    def gpu_metrics(self, node: str) -> str | None:
        """The node's dcgm-exporter text; None for a node the cluster does not have, or with
        ``sim: {dcgm_exporter: false}``. A node that is not Ready: its pod cannot be reached."""
        self._api_call("proxy to the dcgm-exporter pod")
        if self.cluster.sim is not None and not self.cluster.sim.dcgm_exporter:
            return None
        from gpufleet.backends.sim.cloud import SimCloudBackend  # it imports the cluster's

        SimCloudBackend(self.cluster, self.state).settle_nodes()  # reboots and repairs done
        return self._metrics(node)

    def _metrics(self, node: str) -> str | None:
        """The node's exporter text as the nodes stand (settled by the caller)."""
        with self.state.read() as conn:
            row = conn.execute(
                "SELECT pool, ready FROM nodes WHERE cluster=? AND name=?",
                (self.cluster.name, node),
            ).fetchone()
        if row is None:
            return None
        try:
            pool = self.cluster.pool(row["pool"])
        except CatalogError:
            return None
        if not row["ready"]:
            raise BackendError(
                f"sim {self.cluster.name}: the dcgm-exporter pod on node {node} cannot be "
                "reached: the node is NotReady"
            )
        faults = self.faults(pool.name).gpu_faults_of(node)
        return dcgm_exporter_metrics(node, faults, gpu_model=pool.gpu.model, gpus=pool.gpu.count)

    # --- the event path's interval scrape (docs/events.md) ------------------------------------

    def dcgm_exporters(self) -> dict[str, PodInfo]:
        """The exporter DaemonSet's pods, one per node of the cluster's pools (the GPU
        operator's: ``gpu-operator/nvidia-dcgm-exporter-<hash>``): Running on a Ready node,
        ``Unknown`` on one that is not (its kubelet does not report). None with
        ``sim: {dcgm_exporter: false}``."""
        self._api_call("list dcgm-exporter pods")
        if self.cluster.sim is not None and not self.cluster.sim.dcgm_exporter:
            return {}
        from gpufleet.backends.sim.cloud import SimCloudBackend

        SimCloudBackend(self.cluster, self.state).settle_nodes()
        with self.state.read() as conn:
            rows = conn.execute(
                "SELECT name, ready FROM nodes WHERE cluster=? ORDER BY name", (self.cluster.name,)
            ).fetchall()
        out = {}
        for row in rows:
            suffix = hashlib.sha256(row["name"].encode()).hexdigest()[:5]
            out[row["name"]] = PodInfo(
                f"nvidia-dcgm-exporter-{suffix}",
                row["name"],
                "Running" if row["ready"] else "Unknown",
                {"app": "nvidia-dcgm-exporter"},
                namespace="gpu-operator",
                owner_kind="DaemonSet",
            )
        return out

    def exporter_metrics(self, pod: PodInfo) -> str:
        """What the exporter pod serves: its node's metrics (``gpu_metrics``); a pod whose node
        is gone or not Ready cannot be read. The round's list settled the nodes already."""
        self._api_call("proxy to the dcgm-exporter pod")
        text = self._metrics(str(pod.node))
        if text is None:
            raise BackendError(
                f"sim {self.cluster.name}: dcgm-exporter pod {pod.namespace}/{pod.name}: "
                f"node {pod.node} is gone"
            )
        return text
