"""Parse the text table nccl-tests prints (``src/util.cu``, ``src/common.cu`` of nccl-tests)::

    # nccl-tests version 2.17.1 nccl-headers=22703 nccl-library=22703
    # Collective test starting: all_reduce_perf
    # nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 ...
    #  Rank  0 Group  0 Pid  12345 on node-a device  0 [0000:18:00] NVIDIA H200
    #       size         count      type   redop    root     time   algbw   busbw #wrong ...
           8             2     float     sum      -1    14.21    0.00    0.00      0 ...
    # Out of bounds values : 0 OK
    # Avg bus bandwidth    : 95.2214

Older versions lack the ``root`` and/or ``redop`` columns, print a float ``error`` column instead
of ``#wrong`` (read as described in :mod:`.cells`), print ``Rank N Pid ...`` without ``Group``.
Newer ones may append per-iteration columns (``i_min i_max i_p99 i_cv%``) and a ``timestamp``;
all are handled. Without a column header the columns are inferred from the rows (and a note says
so). A run whose footer is missing is ``truncated``; result lines cut short are dropped and
counted in a note. Functions over the string handed in: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from gpufleet.errors import ParseError
from gpufleet.parsing.nccl_tests.cells import (
    gpu_model_from_device_name,
    normalise_collective,
    single_model,
    to_float,
    to_int,
    wrong_from_count,
    wrong_from_error,
)
from gpufleet.parsing.nccl_tests.prefixes import strip_prefixes
from gpufleet.parsing.nccl_tests.results import NcclRun, NcclTestsResult, SizeRow

__all__ = ["parse_nccl_tests"]

_RANK_LINE = re.compile(
    r"^Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?(?:Pid\s+\d+\s+)?on\s+(\S+)\s+device\s+(\d+)\s+"
    r"\[([^\]]*)\]\s*(.*?)\s*$"
)
_NTHREAD = re.compile(r"^nThread\s+(\d+)\s+nGpus\s+(\d+)\b")
_STARTING = re.compile(r"^Collective test starting:\s*(\S+)")
_CONCLUDED = re.compile(r"^Collective test concluded:\s*(\S+)")
_OOB = re.compile(r"^Out of bounds values\s*:\s*(\d+)")
_AVG = re.compile(r"^Avg bus bandwidth\s*:\s*(\S+)")
_BINARY = re.compile(r"(?:^|[\s/])([a-z][a-z0-9_]*_perf)(?:_mpi)?(?=\s|$)")
_TIMESTAMP_TAIL = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_TIME_OF_DAY = re.compile(r"^\d{2}:\d{2}:\d{2}$")
_NUMERIC = re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?\*?$|^[-+]?(?:nan|inf)$", re.I)


def _is_numeric(token: str) -> bool:
    return bool(_NUMERIC.match(token)) or token.upper() == "N/A"


# --------------------------------------------------------------------------------------------
# the columns and one result row
# --------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Columns:
    """What the column header of a table says."""

    has_redop: bool = True
    has_root: bool = True
    error_column: bool = False  # old float "error"/"res" instead of "#wrong"
    side_width: int = 4  # 8 with the per-iteration columns
    timestamp: bool = False


def _parse_column_header(content: str) -> _Columns | None:
    tokens = content.split()
    lowered = [t.lower() for t in tokens]
    if "busbw" not in lowered or "algbw" not in lowered:
        return None
    if not (("size" in lowered and "count" in lowered) or ("bytes" in lowered and "n" in lowered)):
        return None
    first_time = next((i for i, t in enumerate(lowered) if t in ("time", "cputime")), len(lowered))
    leading = lowered[:first_time]
    return _Columns(
        has_redop=("redop" in leading or "op" in leading),
        has_root="root" in leading,
        error_column=("#wrong" not in lowered and ("error" in lowered or "res" in lowered)),
        side_width=8 if "i_min" in lowered else 4,
        timestamp="timestamp" in lowered,
    )


def _infer_columns(rest: list[str], has_redop: bool) -> _Columns:
    """The columns of a table printed without a header, guessed from one row's cells."""
    has_root = len(rest) % 4 == 1
    side_width = 8 if len(rest) - int(has_root) >= 16 else 4
    inferred = _Columns(
        has_redop=has_redop,
        has_root=has_root,
        error_column=False,
        side_width=side_width,
    )
    # guess the wrong-column kind from the cells: floats with exponents mean "error"
    cells = rest[int(has_root) + 3 :: side_width]
    inferred.error_column = any("e" in c.lower() and c.upper() != "N/A" for c in cells)
    return inferred


def _parse_side(tokens: list[str], columns: _Columns, dtype: str | None) -> tuple[Any, ...]:
    time_us = to_float(tokens[0])
    algbw = to_float(tokens[1])
    busbw = to_float(tokens[2])
    if columns.error_column:
        wrong = wrong_from_error(tokens[3], dtype)
    else:
        wrong = wrong_from_count(tokens[3])
    return time_us, algbw, busbw, wrong


def _parse_row(content: str, columns: _Columns | None) -> SizeRow | None:
    """Parse one result line; None when it is not a complete row."""
    tokens = content.split()
    if len(tokens) < 7 or not tokens[0].isdigit() or not tokens[1].isdigit():
        return None
    if _is_numeric(tokens[2]):
        return None  # the type column is a word
    size, count, dtype = int(tokens[0]), int(tokens[1]), tokens[2]
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
    oop = _parse_side(rest[:4], columns, dtype)
    ip = _parse_side(rest[width : width + 4], columns, dtype)
    return SizeRow(size, count, dtype, redop, root, *oop, *ip)


# --------------------------------------------------------------------------------------------
# one run (table) being read
# --------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _RunBuilder:
    collective: str | None = None
    nthread_seen: bool = False
    ranks: set[int] = field(default_factory=set)
    device_models: list[str | None] = field(default_factory=list)
    device_list_cut: bool = False
    columns: _Columns | None = None
    rows: list[SizeRow] = field(default_factory=list)
    avg: float | None = None
    oob: int | None = None
    avg_seen: bool = False
    oob_seen: bool = False
    notes: list[str] = field(default_factory=list)
    dropped: int = 0
    last_dropped: str | None = None
    inferred: bool = False

    def is_empty(self) -> bool:
        return not (self.rows or self.nthread_seen or self.ranks or self.columns)

    def build(self) -> NcclRun:
        notes = list(self.notes)
        ranks: int | None = len(self.ranks) if self.ranks else None
        if self.device_list_cut:
            ranks = None
            notes.append("device list cut short ('...'): rank count unknown")
        model = single_model(self.device_models, notes)
        truncated = False
        if self.dropped:
            notes.append(
                f"{self.dropped} incomplete result line(s) dropped, last: {self.last_dropped!r}"
            )
        if not (self.avg_seen and self.oob_seen):
            truncated = True
            missing = [
                name
                for name, seen in (
                    ("'# Out of bounds values'", self.oob_seen),
                    ("'# Avg bus bandwidth'", self.avg_seen),
                )
                if not seen
            ]
            notes.append("output ends before the footer (" + ", ".join(missing) + " missing)")
        if not self.rows:
            notes.append("no result rows")
        return NcclRun(
            collective=self.collective,
            ranks=ranks,
            gpu_model=model,
            rows=tuple(self.rows),
            avg_busbw_gbps=self.avg,
            out_of_bounds=self.oob,
            truncated=truncated,
            notes=tuple(notes),
        )


# --------------------------------------------------------------------------------------------
# the whole output: one handler per kind of line
# --------------------------------------------------------------------------------------------


class _TableReader:
    """Reads the output line by line; each handler says whether the line was its kind."""

    def __init__(self) -> None:
        self.runs: list[NcclRun] = []
        self.run = _RunBuilder()
        self.pending_collective: str | None = None  # a binary name seen before its run starts

    def finish(self) -> None:
        """Close the run being read (if it holds anything) and start a new one."""
        if not self.run.is_empty():
            self.runs.append(self.run.build())
        self.run = _RunBuilder()

    def line(self, raw: str) -> None:
        content = strip_prefixes(raw).rstrip()
        if not content:
            return
        body = content.lstrip("#").strip()
        if not body or "NCCL INFO" in body or "NCCL WARN" in body:
            return
        if body[0].isdigit() and self._result_line(body):
            return
        for handler in (
            self._starting,
            self._nthread,
            self._rank,
            self._column_header,
            self._footer,
            self._concluded,
        ):
            if handler(body):
                return
        if not content.startswith("#"):
            self._binary_name(body)

    def _result_line(self, body: str) -> bool:
        run = self.run
        row = _parse_row(body, run.columns)
        if row is not None:
            if run.columns is None and not run.inferred:
                run.inferred = True
                run.notes.append("no column header seen: columns inferred from the rows")
            run.rows.append(row)
            return True
        tokens = body.split()
        if len(tokens) >= 3 and tokens[0].isdigit() and tokens[1].isdigit():
            run.dropped += 1
            run.last_dropped = body[:120]
            return True
        return False

    def _starting(self, body: str) -> bool:
        match = _STARTING.match(body)
        if not match:
            return False
        if self.run.rows or self.run.nthread_seen:
            self.finish()
        self.run.collective = normalise_collective(match.group(1))
        self.pending_collective = None
        return True

    def _nthread(self, body: str) -> bool:
        if not _NTHREAD.match(body):
            return False
        if self.run.rows or self.run.nthread_seen:
            self.finish()
        self.run.nthread_seen = True
        if self.run.collective is None and self.pending_collective:
            self.run.collective = self.pending_collective
            self.pending_collective = None
        return True

    def _rank(self, body: str) -> bool:
        match = _RANK_LINE.match(body)
        if match:
            self.run.ranks.add(int(match.group(1)))
            self.run.device_models.append(gpu_model_from_device_name(match.group(5)))
            return True
        if body.endswith("...") and body.startswith("Rank"):
            self.run.device_list_cut = True
            return True
        return False

    def _column_header(self, body: str) -> bool:
        columns = _parse_column_header(body)
        if columns is None:
            return False
        if self.run.rows:
            self.finish()
            if self.pending_collective:
                self.run.collective = self.pending_collective
                self.pending_collective = None
        self.run.columns = columns
        return True

    def _footer(self, body: str) -> bool:
        match = _OOB.match(body)
        if match:
            self.run.oob = int(match.group(1))
            self.run.oob_seen = True
            return True
        match = _AVG.match(body)
        if match:
            self.run.avg = to_float(match.group(1))
            self.run.avg_seen = True
            return True
        return False

    def _concluded(self, body: str) -> bool:
        match = _CONCLUDED.match(body)
        if not match:
            return False
        if self.run.collective is None:
            self.run.collective = normalise_collective(match.group(1))
        return True

    def _binary_name(self, body: str) -> None:
        """A command line naming the binary (``.../all_reduce_perf -b 8 ...``)."""
        match = _BINARY.search(body)
        if not match:
            return
        name = normalise_collective(match.group(1))
        if self.run.rows:
            self.finish()
            self.run.collective = name
        elif self.run.collective is None and not self.run.nthread_seen:
            self.run.collective = name
        else:
            self.pending_collective = name


def parse_nccl_tests(text: str) -> NcclTestsResult:
    """Parse the text output of one or more nccl-tests runs.

    A new run starts at a ``# nThread ... nGpus ...`` header, at ``# Collective test starting``,
    at a binary-name line (``.../all_reduce_perf -b 8 ...``) or at a column header that follows
    result rows. Raises :class:`ParseError` when the text holds no nccl-tests output at all.
    """
    if not isinstance(text, str):
        raise ParseError("nccl-tests output must be text")
    reader = _TableReader()
    for raw in text.splitlines():
        reader.line(raw)
    reader.finish()
    if not reader.runs:
        raise ParseError(
            "no nccl-tests output found (expected '# nThread ...' / result rows / footer)"
        )
    return NcclTestsResult(runs=tuple(reader.runs))
