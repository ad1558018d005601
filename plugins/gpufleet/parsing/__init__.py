"""Parsers for what benchmarks and NCCL print: nccl-tests, NCCL INFO logs, fio and IOR.

- ``nccl_tests/``: nccl-tests results, the text table and the ``-J`` JSON report apart;
- ``nccl_log/``: the transport NCCL used, read from ``NCCL_DEBUG=INFO`` output;
- ``storage``: fio JSON and IOR text;
- ``health/``: ``dcgmi diag`` (JSON and text), kernel-log Xid events, ``nvidia-smi -q``'s
  row-remapper and ECC counters and ``nvidia-smi nvlink -e``'s NVLink error counters;
- ``json_text``: decoding JSON, refusing what no benchmark writes (non-finite, huge, deep).

Functions over the text and JSON the caller hands in: no I/O, except
:func:`classify_nccl_log_file`, which opens the log file it is given. No Airflow, no clients,
and nothing of ours but ``gpufleet.errors`` and ``gpufleet.parsing`` itself (the bottom layer, with
``gpufleet.domain``). Each parser raises :class:`gpufleet.errors.ParseError` with a one-line
reason when its input holds nothing it recognises; fields the input does not show are ``None``,
never guessed. A figure that cannot be true (negative, non-finite, a fractional count) is never
returned as a figure: it is refused, and the result says so in its ``problems``.
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
