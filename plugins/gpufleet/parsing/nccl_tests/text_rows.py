"""One line of the nccl-tests text table: the column header, and a result row.

The column header says which columns a table has (``redop``/``root`` or not, the old float
``error`` column or ``#wrong``, per-iteration columns, a trailing ``timestamp``); without one the
columns are inferred from a row. A result row is a :class:`~.results.SizeRow` when every figure
in it can be true and an :class:`~.results.InvalidRow` (with the reasons) when one cannot; a line
cut short or of another shape is ``None``. Values are read as in :mod:`.cells`. Functions over
the string handed in: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gpufleet.parsing.nccl_tests.cells import (
    clip,
    count,
    figure,
    to_int,
    wrong_from_count,
    wrong_from_error,
)
from gpufleet.parsing.nccl_tests.results import InvalidRow, SizeRow

__all__ = ["Columns", "is_row_shaped", "parse_column_header", "parse_row"]

_TIMESTAMP_TAIL = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_TIME_OF_DAY = re.compile(r"^\d{2}:\d{2}:\d{2}$")
_SIGNED_WHOLE = re.compile(r"^[-+]?\d+$")
_NUMERIC = re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?\*?$|^[-+]?(?:nan|inf)$", re.I)


def _is_numeric(token: str) -> bool:
    return bool(_NUMERIC.match(token)) or token.upper() == "N/A"


@dataclass(slots=True)
class Columns:
    """What the column header of a table says."""

    has_redop: bool = True
    has_root: bool = True
    error_column: bool = False  # old float "error"/"res" instead of "#wrong"
    side_width: int = 4  # 8 with the per-iteration columns
    timestamp: bool = False


def parse_column_header(content: str) -> Columns | None:
    tokens = content.split()
    lowered = [t.lower() for t in tokens]
    if "busbw" not in lowered or "algbw" not in lowered:
        return None
    if not (("size" in lowered and "count" in lowered) or ("bytes" in lowered and "n" in lowered)):
        return None
    first_time = next((i for i, t in enumerate(lowered) if t in ("time", "cputime")), len(lowered))
    leading = lowered[:first_time]
    return Columns(
        has_redop=("redop" in leading or "op" in leading),
        has_root="root" in leading,
        error_column=("#wrong" not in lowered and ("error" in lowered or "res" in lowered)),
        side_width=8 if "i_min" in lowered else 4,
        timestamp="timestamp" in lowered,
    )


def _infer_columns(rest: list[str], has_redop: bool) -> Columns:
    """The columns of a table printed without a header, guessed from one row's cells."""
    has_root = len(rest) % 4 == 1
    side_width = 8 if len(rest) - int(has_root) >= 16 else 4
    inferred = Columns(
        has_redop=has_redop,
        has_root=has_root,
        error_column=False,
        side_width=side_width,
    )
    # guess the wrong-column kind from the cells: floats with exponents mean "error"
    cells = rest[int(has_root) + 3 :: side_width]
    inferred.error_column = any("e" in c.lower() and c.upper() != "N/A" for c in cells)
    return inferred


def _parse_side(
    tokens: list[str], columns: Columns, dtype: str | None, side: str, reasons: list[str]
) -> tuple[Any, ...]:
    """``(time, algbw, busbw, wrong)`` of one side; why a value cannot be true goes to
    ``reasons``."""
    values: list[Any] = []
    for token, name in zip(tokens[:3], ("time", "algbw", "busbw"), strict=True):
        value, why = figure(token, name)
        values.append(value)
        if why:
            reasons.append(f"{side} {why}")
    if columns.error_column:
        wrong, why = wrong_from_error(tokens[3], dtype)
    else:
        wrong, why = wrong_from_count(tokens[3])
    if why:
        reasons.append(f"{side} {why}")
    return (*values, wrong)


def is_row_shaped(tokens: list[str]) -> bool:
    """Size and count first (signed: a negative size is refused, not skipped)."""
    return (
        len(tokens) >= 3
        and bool(_SIGNED_WHOLE.match(tokens[0]))
        and bool(_SIGNED_WHOLE.match(tokens[1]))
    )


def parse_row(content: str, columns: Columns | None) -> SizeRow | InvalidRow | None:
    """Parse one result line; None when it is not a complete row, an InvalidRow when a value
    in it cannot be true."""
    tokens = content.split()
    if len(tokens) < 7 or not is_row_shaped(tokens):
        return None
    if _is_numeric(tokens[2]):
        return None  # the type column is a word
    dtype = tokens[2]
    index = 3
    redop: str | None = None
    if (columns is not None and columns.has_redop) or (
        columns is None and not _is_numeric(tokens[3])
    ):
        if _is_numeric(tokens[3]):
            return None
        redop = tokens[3]
        index = 4
    rest = tokens[index:]
    if len(rest) >= 2 and _TIMESTAMP_TAIL.match(rest[-2]) and _TIME_OF_DAY.match(rest[-1]):
        rest = rest[:-2]
    if columns is None:
        columns = _infer_columns(rest, has_redop=redop is not None)
    root: int | None = None
    if columns.has_root:
        if not rest:
            return None
        root = to_int(rest[0])
        if root is None:
            return None
        rest = rest[1:]
    width = columns.side_width
    if len(rest) != 2 * width or not all(_is_numeric(t) for t in rest):
        return None  # cut short, or not a result line
    reasons: list[str] = []
    size, why = count(tokens[0], "size")
    if why:
        reasons.append(why)
    elements, why = count(tokens[1], "count")
    if why:
        reasons.append(why)
    if root is not None and root < -1:
        reasons.append(f"root {root} is below -1")
    oop = _parse_side(rest[:4], columns, dtype, "out-of-place", reasons)
    ip = _parse_side(rest[width : width + 4], columns, dtype, "in-place", reasons)
    if reasons or size is None:
        return InvalidRow(size, tuple(reasons), clip(content))
    return SizeRow(size, elements, dtype, redop, root, *oop, *ip)
