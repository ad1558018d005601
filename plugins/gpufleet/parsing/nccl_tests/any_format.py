"""Parse nccl-tests output without knowing its form: ``-J`` JSON or the text table."""

from __future__ import annotations

from gpufleet.errors import ParseError
from gpufleet.parsing.json_text import JsonRefused
from gpufleet.parsing.nccl_tests.json_report import parse_nccl_tests_json
from gpufleet.parsing.nccl_tests.results import NcclTestsResult
from gpufleet.parsing.nccl_tests.text_table import parse_nccl_tests

__all__ = ["parse_nccl_tests_any"]


def parse_nccl_tests_any(text: str) -> NcclTestsResult:
    """Parse nccl-tests output in either form: JSON (``-J``) or the text table.

    Text starting with ``{`` is JSON and its errors are raised; text starting with ``[`` is tried
    as JSON and then as a text table (a line may begin with a launcher tag such as ``[0]``),
    unless the JSON was refused as something no benchmark writes (non-finite, huge, deep).
    """
    if isinstance(text, bytes | bytearray):
        text = text.decode("utf-8", errors="replace")
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            return parse_nccl_tests_json(stripped)
        except JsonRefused:
            raise
        except ParseError:
            if stripped.startswith("{"):
                raise
    return parse_nccl_tests(text)
