"""Parse the text table nccl-tests prints (``src/util.cu``, ``src/common.cu`` of nccl-tests).

Design: docs/design/parsers.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpufleet.errors import ParseError
from gpufleet.parsing.nccl_tests.cells import (
    count,
    figure,
    gpu_model_from_device_name,
    normalise_collective,
    single_model,
)
from gpufleet.parsing.nccl_tests.checks import invalid_rows_problem, size_order_problems
from gpufleet.parsing.nccl_tests.prefixes import strip_prefixes
from gpufleet.parsing.nccl_tests.results import InvalidRow, NcclRun, NcclTestsResult, SizeRow
from gpufleet.parsing.nccl_tests.text_rows import (
    Columns,
    is_row_shaped,
    parse_column_header,
    parse_row,
)

__all__ = ["parse_nccl_tests"]

_RANK_LINE = re.compile(
    r"^Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?(?:Pid\s+\d+\s+)?on\s+(\S+)\s+device\s+(\d+)\s+"
    r"\[([^\]]*)\]\s*(.*?)\s*$"
)
_NTHREAD = re.compile(r"^nThread\s+(\d+)\s+nGpus\s+(\d+)\b")
_STARTING = re.compile(r"^Collective test starting:\s*(\S+)")
_CONCLUDED = re.compile(r"^Collective test concluded:\s*(\S+)")
_OOB = re.compile(r"^Out of bounds values\s*:\s*(\S+)")
_AVG = re.compile(r"^Avg bus bandwidth\s*:\s*(\S+)")
_BINARY = re.compile(r"(?:^|[\s/])([a-z][a-z0-9_]*_perf)(?:_mpi)?(?=\s|$)")
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
    columns: Columns | None = None
    rows: list[SizeRow] = field(default_factory=list)
    invalid: list[InvalidRow] = field(default_factory=list)
    avg: float | None = None
    oob: int | None = None
    avg_seen: bool = False
    oob_seen: bool = False
    footer_problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    dropped: int = 0
    last_dropped: str | None = None
    inferred: bool = False

    def is_empty(self) -> bool:
        return not (self.rows or self.invalid or self.nthread_seen or self.ranks or self.columns)

    def build(self) -> NcclRun:
        notes = list(self.notes)
        ranks: int | None = len(self.ranks) if self.ranks else None
        if self.device_list_cut:
            ranks = None
            notes.append("device list cut short ('...'): rank count unknown")
        model = single_model(self.device_models, notes)
        problems: list[str] = []
        if self.dropped:
            problems.append(
                f"{self.dropped} incomplete result line(s) dropped, last: {self.last_dropped!r}"
            )
        refused = invalid_rows_problem(self.invalid)
        if refused:
            problems.append(refused)
        if not (self.avg_seen and self.oob_seen):
            missing = [
                name
                for name, seen in (
                    ("'# Out of bounds values'", self.oob_seen),
                    ("'# Avg bus bandwidth'", self.avg_seen),
                )
                if not seen
            ]
            problems.append("output ends before the footer (" + ", ".join(missing) + " missing)")
        problems.extend(self.footer_problems)
        truncated = bool(problems)  # every problem so far means the figures are not the whole run
        problems.extend(size_order_problems(self.rows))
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
            invalid_rows=tuple(self.invalid),
            problems=tuple(problems),
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
        if (body[0].isdigit() or body[0] in "+-") and self._result_line(body):
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
        row = parse_row(body, run.columns)
        if row is not None:
            if run.columns is None and not run.inferred:
                run.inferred = True
                run.notes.append("no column header seen: columns inferred from the rows")
            if isinstance(row, InvalidRow):
                run.invalid.append(row)
            else:
                run.rows.append(row)
            return True
        if is_row_shaped(body.split()):
            run.dropped += 1
            run.last_dropped = body[:120]
            return True
        return False

    def _starting(self, body: str) -> bool:
        match = _STARTING.match(body)
        if not match:
            return False
        if self.run.rows or self.run.invalid or self.run.nthread_seen:
            self.finish()
        self.run.collective = normalise_collective(match.group(1))
        self.pending_collective = None
        return True

    def _nthread(self, body: str) -> bool:
        if not _NTHREAD.match(body):
            return False
        if self.run.rows or self.run.invalid or self.run.nthread_seen:
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
        columns = parse_column_header(body)
        if columns is None:
            return False
        if self.run.rows or self.run.invalid:
            self.finish()
            if self.pending_collective:
                self.run.collective = self.pending_collective
                self.pending_collective = None
        self.run.columns = columns
        return True

    def _footer(self, body: str) -> bool:
        """The two footer lines; a value that cannot be true is refused (``None``, a problem)."""
        run = self.run
        match = _OOB.match(body)
        if match:
            run.oob, why = count(match.group(1), "'# Out of bounds values'")
            run.oob_seen = True
        else:
            match = _AVG.match(body)
            if not match:
                return False
            run.avg, why = figure(match.group(1), "'# Avg bus bandwidth'")
            run.avg_seen = True
        if why:
            run.footer_problems.append(f"the footer's {why}")
        return True

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
        if self.run.rows or self.run.invalid:
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
