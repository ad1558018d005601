"""nccl-tests output (``all_reduce_perf`` and friends), in either form it is printed.

- ``results``: the typed result, :class:`NcclTestsResult` of :class:`NcclRun` of :class:`SizeRow`
  (and the refused :class:`InvalidRow`);
- ``cells``: reading one value (figure, count, ``#wrong``/``error`` cell, GPU model, collective
  name) the same way in both formats, refusing a value that cannot be true;
- ``checks``: what makes a whole run untrustworthy (refused rows, sizes out of order);
- ``prefixes``: launcher and log-collector prefixes stripped from each text line;
- ``text_rows``: one line of the text table (column header, result row);
- ``text_table``: the text table (:func:`parse_nccl_tests`);
- ``json_report``: the ``-J`` JSON report (:func:`parse_nccl_tests_json`);
- ``any_format``: either, told apart by the first character (:func:`parse_nccl_tests_any`).

Functions over the text or JSON handed in: no I/O, no Airflow, and nothing of ours but
``gpufleet.errors`` and these modules. Nothing is guessed: a field the output does not show is
``None``.
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
