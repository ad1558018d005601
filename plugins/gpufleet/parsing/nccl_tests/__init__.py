"""nccl-tests output (``all_reduce_perf`` and friends), in either form it is printed.

No I/O, no Airflow, nothing of ours but ``gpufleet.errors`` and these modules. Design, with
what each module holds: docs/design/parsers.md.
"""

from gpufleet.parsing.nccl_tests.any_format import parse_nccl_tests_any
from gpufleet.parsing.nccl_tests.cells import gpu_model_from_device_name
from gpufleet.parsing.nccl_tests.json_report import parse_nccl_tests_json
from gpufleet.parsing.nccl_tests.results import InvalidRow, NcclRun, NcclTestsResult, SizeRow
from gpufleet.parsing.nccl_tests.text_table import parse_nccl_tests

__all__ = [
    "InvalidRow",
    "NcclRun",
    "NcclTestsResult",
    "SizeRow",
    "gpu_model_from_device_name",
    "parse_nccl_tests",
    "parse_nccl_tests_any",
    "parse_nccl_tests_json",
]
