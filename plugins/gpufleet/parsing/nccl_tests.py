"""Parse nccl-tests output (``all_reduce_perf`` and friends): the text table and the ``-J`` JSON.

Pure domain code: no Airflow, no I/O beyond the string handed in.

Text format (``src/util.cu`` / ``src/common.cu`` of NVIDIA/nccl-tests)::

    # nccl-tests version 2.17.1 nccl-headers=22703 nccl-library=22703
    # Collective test starting: all_reduce_perf
    # nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 ...
    #  Rank  0 Group  0 Pid  12345 on node-a device  0 [0000:18:00] NVIDIA H200
    #       size         count      type   redop    root     time   algbw   busbw #wrong ...
           8             2     float     sum      -1    14.21    0.00    0.00      0 ...
    # Out of bounds values : 0 OK
    # Avg bus bandwidth    : 95.2214

Older versions lack the ``root`` and/or ``redop`` columns, print a float ``error`` column instead
of ``#wrong``, print ``Rank N Pid ...`` without ``Group``. Newer ones may append per-iteration
columns (``i_min i_max i_p99 i_cv%``) and a ``timestamp``; all are handled.

Rules worth knowing:

* The old float ``error`` column is the largest absolute deviation, not a count. It is mapped to
  ``0`` wrong when it is within the tolerance nccl-tests itself applies for the data type
  (``deltaMaxValue``: 16-bit floats 5e-2, float 1e-5, double 1e-12, integer types exact; unknown
  types 1e-5) and to ``1`` ("at least one wrong element") when it exceeds it or carries the ``*``
  failure mark that later versions print. ``N/A`` (``-c 0``) is ``None``.
* ``NcclRun.wrong`` is ``None`` when every row reports ``N/A``; otherwise the sum of the known ones.
* Nothing is guessed: a field the output does not show is ``None``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gpufleet.errors import ParseError

__all__ = [
    "NcclRun",
    "NcclTestsResult",
    "SizeRow",
    "gpu_model_from_device_name",
    "parse_nccl_tests",
    "parse_nccl_tests_any",
    "parse_nccl_tests_json",
]


# --------------------------------------------------------------------------------------------
# data model
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SizeRow:
    """One message size of one run; ``oop_*`` is out-of-place, ``ip_*`` in-place. GB/s = 1e9 B/s."""

    size_bytes: int
    count: int | None
    dtype: str | None
    redop: str | None
    root: int | None
    oop_time_us: float | None
    oop_algbw_gbps: float | None
    oop_busbw_gbps: float | None
    oop_wrong: int | None
    ip_time_us: float | None
    ip_algbw_gbps: float | None
    ip_busbw_gbps: float | None
    ip_wrong: int | None

    @property
    def best_busbw_gbps(self) -> float | None:
        """The larger of the out-of-place and in-place bus bandwidth shown."""
        values = [v for v in (self.oop_busbw_gbps, self.ip_busbw_gbps) if v is not None]
        return max(values) if values else None

    @property
    def best_time_us(self) -> float | None:
        """The smaller of the out-of-place and in-place time shown."""
        values = [v for v in (self.oop_time_us, self.ip_time_us) if v is not None]
        return min(values) if values else None


@dataclass(frozen=True, slots=True)
class NcclRun:
    """One invocation of one nccl-tests binary (one table)."""

    collective: str | None
    ranks: int | None
    gpu_model: str | None
    rows: tuple[SizeRow, ...]
    avg_busbw_gbps: float | None
    out_of_bounds: int | None
    truncated: bool
    notes: tuple[str, ...] = ()

    @property
    def largest_size_bytes(self) -> int | None:
        return max((r.size_bytes for r in self.rows), default=None)

    @property
    def busbw_at_largest_gbps(self) -> float | None:
        """Best bus bandwidth at the largest message size (best over rows of that size)."""
        largest = self.largest_size_bytes
        if largest is None:
            return None
        values = [
            r.best_busbw_gbps
            for r in self.rows
            if r.size_bytes == largest and r.best_busbw_gbps is not None
        ]
        return max(values) if values else None

    @property
    def max_busbw_gbps(self) -> float | None:
        values = [r.best_busbw_gbps for r in self.rows if r.best_busbw_gbps is not None]
        return max(values) if values else None

    @property
    def wrong(self) -> int | None:
        """Wrong elements over all rows and both placements.

        ``None`` when no row reports a count (every ``#wrong`` is ``N/A``, i.e. ``-c 0``, or there
        are no rows); otherwise the sum of the counts shown (``N/A`` cells contribute nothing).
        """
        known = [w for r in self.rows for w in (r.oop_wrong, r.ip_wrong) if w is not None]
        return sum(known) if known else None

    def busbw_at_or_above(self, min_size_bytes: int) -> list[float]:
        """Best bus bandwidth of every row whose size is at least ``min_size_bytes``, in order."""
        return [
            r.best_busbw_gbps
            for r in self.rows
            if r.size_bytes >= min_size_bytes and r.best_busbw_gbps is not None
        ]

    def latency_up_to(self, max_size_bytes: int) -> list[tuple[int, float]]:
        """``(size, best time in us)`` of every row whose size is at most ``max_size_bytes``."""
        return [
            (r.size_bytes, r.best_time_us)
            for r in self.rows
            if r.size_bytes <= max_size_bytes and r.best_time_us is not None
        ]


@dataclass(frozen=True, slots=True)
class NcclTestsResult:
    runs: tuple[NcclRun, ...]


# --------------------------------------------------------------------------------------------
# small helpers shared by the text and JSON parsers
# --------------------------------------------------------------------------------------------

_VENDOR_PREFIXES = ("NVIDIA ", "Tesla ", "Quadro ", "AMD ")
_MODEL_TOKEN = re.compile(r"^[A-Z]{1,3}\d{1,4}[A-Za-z]{0,3}$")


def gpu_model_from_device_name(name: str | None) -> str | None:
    """``"NVIDIA H100 80GB HBM3"`` -> ``"H100"``; ``"NVIDIA A100-SXM4-40GB"`` -> ``"A100"``.

    A name whose first word is not a model code (``"NVIDIA GeForce RTX 4090"``) is returned
    without the vendor prefix (``"GeForce RTX 4090"``) rather than guessed at.
    """
    if not name:
        return None
    text = name.strip()
    changed = True
    while changed:
        changed = False
        for prefix in _VENDOR_PREFIXES:
            if text.startswith(prefix):
                text = text[len(prefix) :].strip()
                changed = True
    if not text:
        return None
    first = text.split()[0].split("-")[0]
    if _MODEL_TOKEN.match(first):
        return first
    return text


def _to_float(token: Any) -> float | None:
    """A finite float, or None for ``N/A``, ``nan``, ``inf``, empty or junk."""
    if token is None or isinstance(token, bool):
        return None
    try:
        value = float(token)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _to_int(token: Any) -> int | None:
    if token is None or isinstance(token, bool):
        return None
    if isinstance(token, int):
        return token
    text = str(token).strip()
    try:
        return int(text)
    except ValueError:
        value = _to_float(text)
        if value is None or value != int(value):
            return None
        return int(value)


def _normalise_collective(name: str | None) -> str | None:
    if not name:
        return None
    base = name.strip().strip("\"'").rsplit("/", 1)[-1]
    if base.endswith("_mpi"):
        base = base[: -len("_mpi")]
    return base or None


def _single_model(models: Iterable[str | None], notes: list[str]) -> str | None:
    distinct = sorted({m for m in models if m})
    if len(distinct) == 1:
        return distinct[0]
    if len(distinct) > 1:
        notes.append("mixed GPU models: " + ", ".join(distinct))
    return None


# Tolerances nccl-tests applies to the old float "error" column (deltaMaxValue in common.cu).
_ERROR_TOLERANCE = {
    "half": 5e-2,
    "float16": 5e-2,
    "fp16": 5e-2,
    "bfloat16": 5e-2,
    "bf16": 5e-2,
    "float": 1e-5,
    "float32": 1e-5,
    "fp32": 1e-5,
    "double": 1e-12,
    "float64": 1e-12,
    "fp64": 1e-12,
}
_INTEGER_TYPES = {"int8", "uint8", "char", "int", "int32", "uint32", "int64", "uint64"}
_DEFAULT_ERROR_TOLERANCE = 1e-5


def _wrong_from_error(token: str, dtype: str | None) -> int | None:
    """Map an old float ``error`` cell to a wrong count: 0 within tolerance, 1 beyond it."""
    text = token.strip()
    if text.upper() == "N/A":
        return None
    flagged = text.endswith("*")
    value = _to_float(text.rstrip("*"))
    if value is None:
        return None
    if flagged:
        return 1
    key = (dtype or "").lower()
    if key in _INTEGER_TYPES:
        return 0 if value == 0 else 1
    tolerance = _ERROR_TOLERANCE.get(key, _DEFAULT_ERROR_TOLERANCE)
    return 0 if abs(value) <= tolerance else 1


def _wrong_from_count(token: str) -> int | None:
    text = token.strip()
    if text.upper() == "N/A":
        return None
    value = _to_float(text.rstrip("*"))
    if value is None:
        return None
    return int(round(value))


# --------------------------------------------------------------------------------------------
# text parser
# --------------------------------------------------------------------------------------------

# Launcher and collector prefixes, tried repeatedly at the start of each line.
_CRI_PREFIX = re.compile(r"^\d{4}-\d{2}-\d{2}T\S+ (?:stdout|stderr) [FP] ")  # /var/log/pods
_TS_PREFIX = re.compile(
    r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?\s+"
)
_OMPI_PREFIX = re.compile(r"^\[\d+,\d+\]<(?:stdout|stderr)>:\s?")
_BRACKET_PREFIX = re.compile(r"^\[[^\]\s]{1,64}\]:?\s?")
_SRUN_PREFIX = re.compile(r"^\s*\d+:\s")
_HOST_PREFIX = re.compile(r"^[A-Za-z0-9][\w.\-]{0,62}:\s")


def _strip_prefixes(line: str) -> str:
    text = line.rstrip("\r\n")
    for _ in range(4):
        stripped = text.lstrip()
        if not stripped or stripped[0] == "#":
            return stripped
        for pattern in (
            _CRI_PREFIX,
            _TS_PREFIX,
            _OMPI_PREFIX,
            _BRACKET_PREFIX,
            _SRUN_PREFIX,
            _HOST_PREFIX,
        ):
            match = pattern.match(stripped)
            if match:
                prefix = match.group(0).strip()
                rest = stripped[match.end() :]
                if prefix.startswith("[") and prefix in rest:
                    # interleaved writes repeat the tag mid-line: "...  -1[0]    1626.5 ..."
                    rest = rest.replace(prefix, " ")
                text = rest
                break
        else:
            return stripped
    return text.lstrip()


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
        model = _single_model(self.device_models, notes)
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


def _parse_side(tokens: list[str], columns: _Columns, dtype: str | None) -> tuple[Any, ...]:
    time_us = _to_float(tokens[0])
    algbw = _to_float(tokens[1])
    busbw = _to_float(tokens[2])
    if columns.error_column:
        wrong = _wrong_from_error(tokens[3], dtype)
    else:
        wrong = _wrong_from_count(tokens[3])
    return time_us, algbw, busbw, wrong


def _parse_row(content: str, builder: _RunBuilder) -> SizeRow | None:
    """Parse one result line; None when it is not a complete row."""
    tokens = content.split()
    if len(tokens) < 7 or not tokens[0].isdigit() or not tokens[1].isdigit():
        return None
    if _is_numeric(tokens[2]):
        return None  # the type column is a word
    size, count, dtype = int(tokens[0]), int(tokens[1]), tokens[2]
    columns = builder.columns
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
        has_root = len(rest) % 4 == 1
        side_width = 8 if len(rest) - int(has_root) >= 16 else 4
        inferred = _Columns(
            has_redop=redop is not None,
            has_root=has_root,
            error_column=False,
            side_width=side_width,
        )
        # guess the wrong-column kind from the cells: floats with exponents mean "error"
        cells = rest[int(has_root) + 3 :: side_width]
        inferred.error_column = any("e" in c.lower() and c.upper() != "N/A" for c in cells)
        columns = inferred
    root: int | None = None
    if columns.has_root:
        if not rest:
            return None
        root = _to_int(rest[0])
        if root is None:
            return None
        rest = rest[1:]
    width = columns.side_width
    if len(rest) != 2 * width or not all(_is_numeric(t) for t in rest):
        return None  # cut short, or not a result line
    oop = _parse_side(rest[:4], columns, dtype)
    ip = _parse_side(rest[width : width + 4], columns, dtype)
    return SizeRow(size, count, dtype, redop, root, *oop, *ip)


def parse_nccl_tests(text: str) -> NcclTestsResult:
    """Parse the text output of one or more nccl-tests runs.

    A new run starts at a ``# nThread ... nGpus ...`` header, at ``# Collective test starting``,
    at a binary-name line (``.../all_reduce_perf -b 8 ...``) or at a column header that follows
    result rows. Raises :class:`ParseError` when the text holds no nccl-tests output at all.
    """
    if not isinstance(text, str):
        raise ParseError("nccl-tests output must be text")
    runs: list[NcclRun] = []
    builder = _RunBuilder()
    pending_collective: str | None = None

    def finish() -> None:
        nonlocal builder
        if not builder.is_empty():
            runs.append(builder.build())
        builder = _RunBuilder()

    for raw in text.splitlines():
        content = _strip_prefixes(raw).rstrip()
        if not content:
            continue
        body = content.lstrip("#").strip()
        if not body:
            continue
        if "NCCL INFO" in body or "NCCL WARN" in body:
            continue

        if body[0].isdigit():
            row = _parse_row(body, builder)
            if row is not None:
                if builder.columns is None and not builder.inferred:
                    builder.inferred = True
                    builder.notes.append("no column header seen: columns inferred from the rows")
                builder.rows.append(row)
                continue
            tokens = body.split()
            if len(tokens) >= 3 and tokens[0].isdigit() and tokens[1].isdigit():
                builder.dropped += 1
                builder.last_dropped = body[:120]
                continue

        match = _STARTING.match(body)
        if match:
            if builder.rows or builder.nthread_seen:
                finish()
            builder.collective = _normalise_collective(match.group(1))
            pending_collective = None
            continue
        match = _NTHREAD.match(body)
        if match:
            if builder.rows or builder.nthread_seen:
                finish()
            builder.nthread_seen = True
            if builder.collective is None and pending_collective:
                builder.collective = pending_collective
                pending_collective = None
            continue
        match = _RANK_LINE.match(body)
        if match:
            builder.ranks.add(int(match.group(1)))
            builder.device_models.append(gpu_model_from_device_name(match.group(5)))
            continue
        if body.endswith("...") and body.startswith("Rank"):
            builder.device_list_cut = True
            continue
        columns = _parse_column_header(body)
        if columns is not None:
            if builder.rows:
                finish()
                if pending_collective:
                    builder.collective = pending_collective
                    pending_collective = None
            builder.columns = columns
            continue
        match = _OOB.match(body)
        if match:
            builder.oob = int(match.group(1))
            builder.oob_seen = True
            continue
        match = _AVG.match(body)
        if match:
            builder.avg = _to_float(match.group(1))
            builder.avg_seen = True
            continue
        match = _CONCLUDED.match(body)
        if match:
            if builder.collective is None:
                builder.collective = _normalise_collective(match.group(1))
            continue
        if content.startswith("#"):
            continue
        match = _BINARY.search(body)
        if match:
            name = _normalise_collective(match.group(1))
            if builder.rows:
                finish()
                builder.collective = name
            elif builder.collective is None and not builder.nthread_seen:
                builder.collective = name
            else:
                pending_collective = name
            continue

    finish()
    if not runs:
        raise ParseError(
            "no nccl-tests output found (expected '# nThread ...' / result rows / footer)"
        )
    return NcclTestsResult(runs=tuple(runs))


# --------------------------------------------------------------------------------------------
# JSON parser (-J file.json)
# --------------------------------------------------------------------------------------------


def _close_truncated_json(text: str) -> str | None:
    """Cut a truncated JSON document after its last complete object and close what is open."""
    stack: list[str] = []
    in_string = False
    escaped = False
    best: tuple[int, list[str]] | None = None
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            continue
        if ch == '"':
            in_string = True
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]":
            if not stack:
                return None
            stack.pop()
            if stack:
                best = (i + 1, list(stack))
            else:
                return None  # complete document: nothing to repair
    if best is None:
        return None
    end, open_stack = best
    return text[:end] + "".join(reversed(open_stack))


def _load_json_documents(text: str) -> tuple[list[Any], bool]:
    """All JSON documents in ``text`` (concatenated files allowed); flag True when repaired."""
    stripped = text.strip()
    decoder = json.JSONDecoder()
    documents: list[Any] = []
    position = 0
    while position < len(stripped):
        try:
            document, end = decoder.raw_decode(stripped, position)
        except json.JSONDecodeError:
            repaired = _close_truncated_json(stripped[position:])
            if repaired is None:
                break
            try:
                documents.append(json.loads(repaired))
            except json.JSONDecodeError:
                break
            return documents, True
        documents.append(document)
        position = end
        while position < len(stripped) and stripped[position] in " \t\r\n,":
            position += 1
    if not documents:
        raise ParseError("not valid nccl-tests JSON (cannot decode the document)")
    return documents, False


def _side_from_json(side: Any) -> tuple[Any, ...]:
    if not isinstance(side, dict):
        return (None, None, None, None)
    time_us = _to_float(side.get("time", side.get("cpu_time")))
    wrong_raw = side.get("nwrong", side.get("wrong"))
    wrong = None if wrong_raw is None else _to_int(_to_float(wrong_raw))
    return time_us, _to_float(side.get("alg_bw")), _to_float(side.get("bus_bw")), wrong


def _run_from_json(doc: dict[str, Any], repaired: bool) -> NcclRun:
    notes: list[str] = []
    config = doc.get("config") if isinstance(doc.get("config"), dict) else {}
    devices = config.get("devices", doc.get("devices"))
    devices = devices if isinstance(devices, list) else []
    ranks: int | None = None
    nthreads = _to_int(config.get("nthreads"))
    ngpus = _to_int(config.get("ngpus"))
    if devices and nthreads and ngpus:
        # one device record per process (the first line of each process's block)
        ranks = len(devices) * nthreads * ngpus
    models = [
        gpu_model_from_device_name(d.get("device_info")) for d in devices if isinstance(d, dict)
    ]
    model = _single_model(models, notes)

    collective = None
    args = doc.get("args")
    if isinstance(args, list) and args and isinstance(args[0], str):
        collective = _normalise_collective(args[0])

    rows: list[SizeRow] = []
    results = doc.get("results")
    for item in results if isinstance(results, list) else []:
        if not isinstance(item, dict):
            continue
        size = _to_int(item.get("size"))
        if size is None:
            continue
        oop = _side_from_json(item.get("out_of_place"))
        ip = _side_from_json(item.get("in_place"))
        root = _to_int(item.get("root"))
        rows.append(
            SizeRow(
                size,
                _to_int(item.get("count")),
                item.get("type") if isinstance(item.get("type"), str) else None,
                item.get("redop") if isinstance(item.get("redop"), str) else None,
                root,
                *oop,
                *ip,
            )
        )
        if collective is None:
            name = item.get("experiment_name")
            if isinstance(name, str) and name.endswith("_perf"):
                collective = _normalise_collective(name)

    oob_obj = doc.get("out_of_bounds")
    avg_obj = doc.get("average_bus_bandwidth")
    oob = _to_int(oob_obj.get("count")) if isinstance(oob_obj, dict) else None
    avg = _to_float(avg_obj.get("bandwidth")) if isinstance(avg_obj, dict) else None
    truncated = repaired or not isinstance(oob_obj, dict) or not isinstance(avg_obj, dict)
    if repaired:
        notes.append("JSON document was cut short; parsed up to its last complete record")
    elif truncated:
        notes.append("JSON document has no out_of_bounds / average_bus_bandwidth summary")
    errors = doc.get("errors")
    if isinstance(errors, list):
        notes.extend(f"error: {e}" for e in errors if isinstance(e, str) and e)
    if not rows:
        notes.append("no result rows")
    return NcclRun(
        collective=collective,
        ranks=ranks,
        gpu_model=model,
        rows=tuple(rows),
        avg_busbw_gbps=avg,
        out_of_bounds=oob,
        truncated=truncated,
        notes=tuple(notes),
    )


def parse_nccl_tests_json(obj_or_text: Any) -> NcclTestsResult:
    """Parse the ``-J`` JSON of current nccl-tests (a dict, a list of dicts, or their text).

    Several concatenated documents give several runs; a document cut short is repaired up to its
    last complete record and the run is marked truncated.
    """
    repaired = False
    if isinstance(obj_or_text, bytes | bytearray):
        obj_or_text = obj_or_text.decode("utf-8", errors="replace")
    if isinstance(obj_or_text, str):
        documents, repaired = _load_json_documents(obj_or_text)
    elif isinstance(obj_or_text, dict):
        documents = [obj_or_text]
    elif isinstance(obj_or_text, list):
        documents = list(obj_or_text)
    else:
        raise ParseError(f"cannot read nccl-tests JSON from a {type(obj_or_text).__name__}")
    flat: list[dict[str, Any]] = []
    for document in documents:
        if isinstance(document, list):
            flat.extend(d for d in document if isinstance(d, dict))
        elif isinstance(document, dict):
            flat.append(document)
    runs = [
        _run_from_json(doc, repaired and i == len(flat) - 1)
        for i, doc in enumerate(flat)
        if "results" in doc or "config" in doc
    ]
    if not runs:
        raise ParseError("JSON holds no nccl-tests results (no 'results' or 'config' key)")
    return NcclTestsResult(runs=tuple(runs))


def parse_nccl_tests_any(text: str) -> NcclTestsResult:
    """Parse nccl-tests output in either form: JSON (``-J``) or the text table."""
    if isinstance(text, bytes | bytearray):
        text = text.decode("utf-8", errors="replace")
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            return parse_nccl_tests_json(stripped)
        except ParseError:
            if stripped.startswith("{"):
                raise
    return parse_nccl_tests(text)
