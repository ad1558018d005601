"""Parsers for GPU health output: ``dcgmi diag`` (JSON and text), kernel-log Xid events,
``nvidia-smi -q -d ROW_REMAPPER,ECC``, ``nvidia-smi nvlink -e``, a gpufleet health check's
output holding them all (``parse_node_health``), and dcgm-exporter's ``/metrics`` text, read
passively while a job holds the GPUs (``parse_dcgm_exporter``). Functions over the text
handed in: no I/O."""

from gpufleet.parsing.health.dcgm import (
    DIAG_STATUSES,
    DcgmDiagResult,
    DcgmGpuResult,
    DcgmTest,
)
from gpufleet.parsing.health.dcgm_diag import parse_dcgm_diag
from gpufleet.parsing.health.dcgm_exporter import (
    DcgmExporterReport,
    ExporterGpu,
    ExporterLink,
    parse_dcgm_exporter,
)
from gpufleet.parsing.health.dcgm_json import parse_dcgm_diag_json
from gpufleet.parsing.health.dcgm_nvlink import parse_dcgmi_nvlink
from gpufleet.parsing.health.dcgm_text import parse_dcgm_diag_text
from gpufleet.parsing.health.node_events import announces_maintenance, xid_codes
from gpufleet.parsing.health.nvidia_smi import (
    GpuMemoryHealth,
    NvidiaSmiMemoryReport,
    parse_nvidia_smi_remap_ecc,
)
from gpufleet.parsing.health.nvlink import (
    NvlinkErrorReport,
    NvlinkGpuErrors,
    NvlinkLinkErrors,
    parse_nvlink_errors,
)
from gpufleet.parsing.health.report import NodeHealthReport, parse_node_health
from gpufleet.parsing.health.xid import XidEvent, XidLog, parse_xid_lines

__all__ = [
    "DIAG_STATUSES",
    "DcgmDiagResult",
    "DcgmExporterReport",
    "DcgmGpuResult",
    "DcgmTest",
    "ExporterGpu",
    "ExporterLink",
    "GpuMemoryHealth",
    "NodeHealthReport",
    "NvidiaSmiMemoryReport",
    "NvlinkErrorReport",
    "NvlinkGpuErrors",
    "NvlinkLinkErrors",
    "XidEvent",
    "XidLog",
    "parse_dcgm_diag",
    "parse_dcgm_diag_json",
    "parse_dcgm_diag_text",
    "parse_dcgm_exporter",
    "parse_dcgmi_nvlink",
    "parse_nvidia_smi_remap_ecc",
    "parse_node_health",
    "parse_nvlink_errors",
    "parse_xid_lines",
    "xid_codes",
    "announces_maintenance",
]
