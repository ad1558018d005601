"""Parse storage benchmark output: fio ``--output-format=json`` and IOR's text report.

Design: docs/design/parsers.md.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from gpufleet.errors import ParseError
from gpufleet.parsing.json_text import json_documents

__all__ = ["StorageResult", "parse_fio_json", "parse_ior"]

MIB = float(2**20)
_MAX_PROBLEMS = 8


@dataclass(frozen=True, slots=True)
class StorageResult:
    read_mib_s: float | None
    write_mib_s: float | None
    read_iops: float | None
    write_iops: float | None
    problems: tuple[str, ...] = ()  # what was refused and why; empty for a clean result


def _value(value: Any, name: str, problems: list[str]) -> float | None:
    """A finite, non-negative number; ``None`` when absent; a problem when it cannot be true."""
    if value is None:
        return None
    shown = str(value)[:32]
    try:
        number = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError, OverflowError):
        number = math.nan
    if not math.isfinite(number):
        problems.append(f"{name} {shown} is not a finite number")
        return None
    if number < 0:
        problems.append(f"{name} {shown} is negative")
        return None
    return number


# --------------------------------------------------------------------------------------------
# fio
# --------------------------------------------------------------------------------------------


def _job_name(job: dict[str, Any], index: int) -> str:
    name = job.get("jobname")
    label = f"{name}"[:64] if isinstance(name, str) and name else f"#{index}"
    host = job.get("hostname")
    return f"{label!r} on {host}" if isinstance(host, str) and host else repr(label)


def _job_figures(job: dict[str, Any]) -> tuple[dict[str, tuple[float, float, bool]], list[str]]:
    """Per direction ``(bytes/s, IOPS, moved any data)`` of one job, and why it cannot be
    counted (an error it reported, a figure that cannot be true)."""
    why: list[str] = []
    error = job.get("error")
    if error is not None and (isinstance(error, bool) or not isinstance(error, int)):
        why.append(f"error {str(error)[:32]!r} is not an error number")
    elif error:
        why.append(f"reported error {error}")
    figures: dict[str, tuple[float, float, bool]] = {}
    for direction in ("read", "write"):
        stats = job.get(direction)
        if not isinstance(stats, dict):
            continue
        bw_bytes = _value(stats.get("bw_bytes"), f"{direction}.bw_bytes", why)
        if bw_bytes is None:
            bw_kib = _value(stats.get("bw"), f"{direction}.bw", why)
            bw_bytes = bw_kib * 1024.0 if bw_kib is not None else None
        iops = _value(stats.get("iops"), f"{direction}.iops", why)
        io_bytes = _value(stats.get("io_bytes"), f"{direction}.io_bytes", why)
        if io_bytes is None:
            io_kib = _value(stats.get("io_kbytes"), f"{direction}.io_kbytes", why)
            io_bytes = io_kib * 1024.0 if io_kib is not None else None
        moved = (io_bytes or 0) > 0 or (bw_bytes or 0) > 0 or (iops or 0) > 0
        figures[direction] = (bw_bytes or 0.0, iops or 0.0, moved)
    return figures, why


def _fio_sum(jobs: list[dict[str, Any]]) -> tuple[StorageResult, int]:
    """Sum the jobs that can be counted; ``(result, jobs counted)``."""
    totals = {"read": [0.0, 0.0, False], "write": [0.0, 0.0, False]}
    problems: list[str] = []
    counted = 0
    for index, job in enumerate(jobs):
        figures, why = _job_figures(job)
        if why:
            if len(problems) < _MAX_PROBLEMS:
                problems.append(f"fio job {_job_name(job, index)} not counted: {'; '.join(why)}")
            continue
        counted += 1
        for direction, (bw, iops, moved) in figures.items():
            total = totals[direction]
            total[0] += bw
            total[1] += iops
            total[2] = bool(total[2]) or moved

    def mib_and_iops(direction: str) -> tuple[float | None, float | None]:
        bw, iops, moved = totals[direction]
        return (float(bw) / MIB, float(iops)) if moved else (None, None)

    read_mib, read_iops = mib_and_iops("read")
    write_mib, write_iops = mib_and_iops("write")
    return StorageResult(read_mib, write_mib, read_iops, write_iops, tuple(problems)), counted


def parse_fio_json(text: str) -> StorageResult:
    """Read and write MiB/s and IOPS from fio JSON output (noise around the JSON tolerated)."""
    if isinstance(text, bytes | bytearray):
        text = text.decode("utf-8", errors="replace")
    documents = [d for d in json_documents(text) if "jobs" in d or "client_stats" in d]
    if not documents:
        raise ParseError(
            "no fio JSON found (expected an object with 'jobs'; run fio with --output-format=json)"
        )
    document = documents[0]
    jobs: list[dict[str, Any]]
    clients = document.get("client_stats")
    if isinstance(clients, list) and clients:
        aggregate = [
            c for c in clients if isinstance(c, dict) and c.get("jobname") == "All clients"
        ]
        jobs = aggregate or [c for c in clients if isinstance(c, dict)]
    else:
        raw_jobs = document.get("jobs")
        jobs = [j for j in raw_jobs if isinstance(j, dict)] if isinstance(raw_jobs, list) else []
    if not jobs:
        raise ParseError("fio JSON holds no jobs")
    result, counted = _fio_sum(jobs)
    if not counted:
        raise ParseError("no fio job can be counted: " + " | ".join(result.problems))
    return result


# --------------------------------------------------------------------------------------------
# IOR
# --------------------------------------------------------------------------------------------

_MAX_LINE = re.compile(r"^\s*Max (Write|Read):\s*(\S+)\s*MiB/sec", re.MULTILINE)
_TABLE_END = ("Max", "Summary", "Operation", "access", "Finished", "Test")


def _table_rows(lines: list[str], header_index: int) -> tuple[list[str], list[list[str]]]:
    """The ``write``/``read`` rows under a table header, skipping IOR's commentary lines."""
    header = lines[header_index].split()
    rows: list[list[str]] = []
    for line in lines[header_index + 1 :]:
        tokens = line.split()
        if not tokens:
            continue
        word = tokens[0]
        if word in ("write", "read"):
            rows.append(tokens)
        elif word in _TABLE_END:
            break
    return header, rows


def _column(header: list[str], *names: str) -> int | None:
    lowered = [h.lower() for h in header]
    for name in names:
        if name.lower() in lowered:
            return lowered.index(name.lower())
    return None


def _read_table(
    lines: list[str],
    index: int,
    columns: tuple[int | None, int | None],
    stores: tuple[dict[str, float], dict[str, float]],
    problems: list[str],
) -> None:
    """Keep the best value of each column per operation; a row cut off (fewer columns than its
    header) is not read, a value that cannot be true is refused."""
    header, rows = _table_rows(lines, index)
    for row in rows:
        kind = row[0]
        if len(row) < len(header):
            problems.append(
                f"IOR {kind} row cut off ({len(row)} of {len(header)} columns): "
                f"{' '.join(row)[:80]!r} not read"
            )
            continue
        for col, store in zip(columns, stores, strict=True):
            if col is None:
                continue
            number = _value(row[col], f"IOR {kind} {header[col]}", problems)
            if number is not None:
                store[kind] = max(number, store.get(kind, number))


def parse_ior(text: str) -> StorageResult:
    """Read and write MiB/s (and IOPS where shown) from IOR's text output."""
    if isinstance(text, bytes | bytearray):
        text = text.decode("utf-8", errors="replace")
    problems: list[str] = []
    maxima: dict[str, float] = {}
    for kind, value in _MAX_LINE.findall(text):
        number = _value(value, f"'Max {kind}:'", problems)
        if number is not None:
            key = kind.lower()
            maxima[key] = max(number, maxima.get(key, number))

    lines = text.splitlines()
    summary: tuple[dict[str, float], dict[str, float]] = ({}, {})
    results: tuple[dict[str, float], dict[str, float]] = ({}, {})
    for index, line in enumerate(lines):
        tokens = line.split()
        if not tokens:
            continue
        first = tokens[0].lower()
        if first == "operation" and "Max(MiB)" in line:
            columns = (_column(tokens, "Max(MiB)"), _column(tokens, "Max(OPs)"))
            _read_table(lines, index, columns, summary, problems)
        elif first == "access" and any(t.lower().startswith("bw(mib") for t in tokens):
            bw_col = next((i for i, t in enumerate(tokens) if t.lower().startswith("bw(mib")), None)
            _read_table(lines, index, (bw_col, _column(tokens, "IOPS")), results, problems)

    def pick(kind: str) -> tuple[float | None, float | None]:
        bw = maxima.get(kind, summary[0].get(kind, results[0].get(kind)))
        ops = summary[1].get(kind, results[1].get(kind))
        return bw, ops

    read_bw, read_ops = pick("read")
    write_bw, write_ops = pick("write")
    if read_bw is None and write_bw is None:
        if problems:
            raise ParseError("no IOR result can be read: " + "; ".join(problems[:_MAX_PROBLEMS]))
        raise ParseError(
            "no IOR results found (expected 'Max Write:'/'Max Read:' lines or a results table)"
        )
    return StorageResult(
        read_bw, write_bw, read_ops, write_ops, tuple(dict.fromkeys(problems[:_MAX_PROBLEMS]))
    )
