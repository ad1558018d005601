"""Parsers for what benchmarks and NCCL print: nccl-tests, NCCL INFO logs, fio and IOR.

Functions over text and JSON: no I/O beyond what the caller hands in, no Airflow, no clients,
and nothing of ours but ``gpufleet.errors``. Each parser raises :class:`gpufleet.errors.ParseError`
with a one-line reason when its input holds nothing it recognises; fields the input does not
show are ``None``, never guessed.
"""

from gpufleet.errors import ParseError
from gpufleet.parsing.nccl_log import (
    TRANSPORT_CLASSES,
    NcclLogInfo,
    classify_nccl_log,
    classify_nccl_log_file,
    classify_network_name,
)
from gpufleet.parsing.nccl_tests import (
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
    "NcclLogInfo",
    "NcclRun",
    "NcclTestsResult",
    "ParseError",
    "SizeRow",
    "StorageResult",
    "classify_nccl_log",
    "classify_nccl_log_file",
    "classify_network_name",
    "gpu_model_from_device_name",
    "parse_fio_json",
    "parse_ior",
    "parse_nccl_tests",
    "parse_nccl_tests_any",
    "parse_nccl_tests_json",
]
