"""Parse storage benchmark output: fio ``--output-format=json`` and IOR's text report.

Functions over the text handed in: no Airflow, no I/O. Throughput is MiB/s (2**20 bytes per
second); IOPS are operations per second. A direction the benchmark did not exercise is
``None``, not ``0``.

fio: the job list is summed (with ``group_reporting`` it holds one aggregate per group); in
client/server mode the ``All clients`` aggregate of ``client_stats`` is used when present.
``bw_bytes`` (bytes/s) is preferred; older fio only has ``bw`` (KiB/s). The JSON may be preceded
by warnings (``fio: ...``, ``note: ...``) or followed by text; the first JSON object holding jobs
is used.

IOR: ``Max Write: 1234.56 MiB/sec (1294.51 MB/sec)`` / ``Max Read:`` lines (the best of all
iterations; with several tests in one run, the best over tests). Without them, the ``Summary of
all tests`` table (``Max(MiB)``, ``Max(OPs)``) and then the per-iteration results table
(``access bw(MiB/s) IOPS ...``; the maximum over iterations) are used. IOPS come from the
``Max(OPs)`` column or the results table's ``IOPS`` column.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from gpufleet.errors import ParseError

__all__ = ["StorageResult", "parse_fio_json", "parse_ior"]

MIB = float(2**20)


@dataclass(frozen=True, slots=True)
class StorageResult:
    read_mib_s: float | None
    write_mib_s: float | None
    read_iops: float | None
    write_iops: float | None


def _num(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


# --------------------------------------------------------------------------------------------
# fio
# --------------------------------------------------------------------------------------------


def _fio_documents(text: str) -> list[dict[str, Any]]:
    """Every JSON object in ``text`` that starts at the beginning of a line."""
    decoder = json.JSONDecoder()
    documents: list[dict[str, Any]] = []
    position = 0
    while True:
        brace = text.find("{", position)
        if brace < 0:
            break
        if brace > 0 and text[brace - 1] not in "\n\r":
            position = brace + 1
            continue
        try:
            document, end = decoder.raw_decode(text, brace)
        except json.JSONDecodeError:
            position = brace + 1
            continue
        if isinstance(document, dict):
            documents.append(document)
        position = end
    return documents


def _fio_direction(jobs: list[dict[str, Any]], direction: str) -> tuple[float | None, float | None]:
    total_bw = 0.0
    total_iops = 0.0
    moved = False
    seen = False
    for job in jobs:
        stats = job.get(direction)
        if not isinstance(stats, dict):
            continue
        seen = True
        bw_bytes = _num(stats.get("bw_bytes"))
        if bw_bytes is None:
            bw_kib = _num(stats.get("bw"))
            bw_bytes = bw_kib * 1024.0 if bw_kib is not None else None
        iops = _num(stats.get("iops"))
        io_bytes = _num(stats.get("io_bytes"))
        if io_bytes is None:
            io_kib = _num(stats.get("io_kbytes"))
            io_bytes = io_kib * 1024.0 if io_kib is not None else None
        if (io_bytes or 0) > 0 or (bw_bytes or 0) > 0 or (iops or 0) > 0:
            moved = True
        total_bw += bw_bytes or 0.0
        total_iops += iops or 0.0
    if not seen or not moved:
        return None, None
    return total_bw / MIB, total_iops


def parse_fio_json(text: str) -> StorageResult:
    """Read and write MiB/s and IOPS from fio JSON output (noise around the JSON tolerated)."""
    if isinstance(text, bytes | bytearray):
        text = text.decode("utf-8", errors="replace")
    documents = [d for d in _fio_documents(text) if "jobs" in d or "client_stats" in d]
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
    read_mib, read_iops = _fio_direction(jobs, "read")
    write_mib, write_iops = _fio_direction(jobs, "write")
    return StorageResult(read_mib, write_mib, read_iops, write_iops)


# --------------------------------------------------------------------------------------------
# IOR
# --------------------------------------------------------------------------------------------

_MAX_LINE = re.compile(r"^\s*Max (Write|Read):\s*([0-9.eE+-]+)\s*MiB/sec", re.MULTILINE)


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
        elif word in ("Max", "Summary", "Operation", "access", "Finished", "Test"):
            break
    return header, rows


def _column(header: list[str], *names: str) -> int | None:
    lowered = [h.lower() for h in header]
    for name in names:
        if name.lower() in lowered:
            return lowered.index(name.lower())
    return None


def parse_ior(text: str) -> StorageResult:
    """Read and write MiB/s (and IOPS where shown) from IOR's text output."""
    if isinstance(text, bytes | bytearray):
        text = text.decode("utf-8", errors="replace")
    maxima: dict[str, float] = {}
    for kind, value in _MAX_LINE.findall(text):
        number = _num(value)
        if number is not None:
            key = kind.lower()
            maxima[key] = max(number, maxima.get(key, number))

    lines = text.splitlines()
    summary_bw: dict[str, float] = {}
    summary_ops: dict[str, float] = {}
    result_bw: dict[str, float] = {}
    result_ops: dict[str, float] = {}
    for index, line in enumerate(lines):
        tokens = line.split()
        if not tokens:
            continue
        first = tokens[0].lower()
        if first == "operation" and "Max(MiB)" in line:
            header, rows = _table_rows(lines, index)
            bw_col = _column(header, "Max(MiB)")
            ops_col = _column(header, "Max(OPs)")
            for row in rows:
                kind = row[0]
                for col, store in ((bw_col, summary_bw), (ops_col, summary_ops)):
                    if col is not None and col < len(row):
                        number = _num(row[col])
                        if number is not None:
                            store[kind] = max(number, store.get(kind, number))
        elif first == "access" and any(t.lower().startswith("bw(mib") for t in tokens):
            header, rows = _table_rows(lines, index)
            bw_col = next((i for i, h in enumerate(header) if h.lower().startswith("bw(mib")), None)
            ops_col = _column(header, "IOPS")
            for row in rows:
                kind = row[0]
                for col, store in ((bw_col, result_bw), (ops_col, result_ops)):
                    if col is not None and col < len(row):
                        number = _num(row[col])
                        if number is not None:
                            store[kind] = max(number, store.get(kind, number))

    def pick(kind: str) -> tuple[float | None, float | None]:
        bw = maxima.get(kind, summary_bw.get(kind, result_bw.get(kind)))
        ops = summary_ops.get(kind, result_ops.get(kind))
        return bw, ops

    read_bw, read_ops = pick("read")
    write_bw, write_ops = pick("write")
    if read_bw is None and write_bw is None:
        raise ParseError(
            "no IOR results found (expected 'Max Write:'/'Max Read:' lines or a results table)"
        )
    return StorageResult(read_bw, write_bw, read_ops, write_ops)
