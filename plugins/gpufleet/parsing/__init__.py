"""Parsers for what benchmarks, NCCL and the GPU health tools print.

Functions over text: no I/O (but ``classify_nccl_log_file``), no Airflow, no clients, nothing
of ours but ``gpufleet.errors`` and ``gpufleet.parsing``. Design: docs/design/parsers.md.
"""

from gpufleet.errors import ParseError
from gpufleet.parsing.health import (
    DcgmDiagResult,
    DcgmGpuResult,
    DcgmTest,
    GpuMemoryHealth,
    NvidiaSmiMemoryReport,
    NvlinkErrorReport,
    NvlinkGpuErrors,
    NvlinkLinkErrors,
    XidEvent,
    XidLog,
    parse_dcgm_diag,
    parse_nvidia_smi_remap_ecc,
    parse_nvlink_errors,
    parse_xid_lines,
)
from gpufleet.parsing.nccl_log import (
    TRANSPORT_CLASSES,
    NcclLogInfo,
    classify_nccl_log,
    classify_nccl_log_file,
    classify_network_name,
)
from gpufleet.parsing.nccl_tests import (
    InvalidRow,
    NcclRun,
    NcclTestsResult,
    SizeRow,
    gpu_model_from_device_name,
    parse_nccl_tests,
    parse_nccl_tests_any,
    parse_nccl_tests_json,
)
from gpufleet.parsing.storage import StorageResult, parse_fio_json, parse_ior

__all__ = [
    "TRANSPORT_CLASSES",
    "DcgmDiagResult",
    "DcgmGpuResult",
    "DcgmTest",
    "GpuMemoryHealth",
    "InvalidRow",
    "NcclLogInfo",
    "NcclRun",
    "NcclTestsResult",
    "NvidiaSmiMemoryReport",
    "NvlinkErrorReport",
    "NvlinkGpuErrors",
    "NvlinkLinkErrors",
    "ParseError",
    "SizeRow",
    "StorageResult",
    "XidEvent",
    "XidLog",
    "classify_nccl_log",
    "classify_nccl_log_file",
    "classify_network_name",
    "gpu_model_from_device_name",
    "parse_dcgm_diag",
    "parse_fio_json",
    "parse_ior",
    "parse_nccl_tests",
    "parse_nccl_tests_any",
    "parse_nccl_tests_json",
    "parse_nvidia_smi_remap_ecc",
    "parse_nvlink_errors",
    "parse_xid_lines",
]
