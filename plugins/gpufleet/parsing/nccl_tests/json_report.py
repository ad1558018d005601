"""Parse the ``-J file.json`` report of current nccl-tests.

One document per run: ``config`` (``nthreads``, ``ngpus``, one ``devices`` record per process),
``args``, ``results`` (one record per message size with ``out_of_place`` / ``in_place`` sides),
``out_of_bounds`` and ``average_bus_bandwidth``. Several concatenated documents (or a list of
them) give several runs. A document cut short is repaired up to its last complete record and its
run is marked ``truncated``; so is a run without the two summary objects, or with a summary value
or a result record that cannot be true (refused into ``invalid_rows``: a negative, non-finite --
nccl-tests writes NaN as the string ``"nan"`` -- or non-numeric figure, a size or ``nwrong``
that is not a whole non-negative number). ``config.nthreads``/``ngpus`` that are not positive
whole numbers give no rank count and a problem. JSON no benchmark writes (``NaN`` literals,
numbers overflowing to infinity, huge integers, deep nesting) is a :class:`ParseError`
(:mod:`gpufleet.parsing.json_text`). Values are read as in :mod:`.cells`. Functions over the
object or text handed in: no I/O.
"""

from __future__ import annotations

import json
from typing import Any

from gpufleet.errors import ParseError
from gpufleet.parsing.json_text import raw_decode
from gpufleet.parsing.nccl_tests.cells import (
    clip,
    count,
    figure,
    gpu_model_from_device_name,
    normalise_collective,
    single_model,
    to_int,
    wrong_from_count,
)
from gpufleet.parsing.nccl_tests.checks import invalid_rows_problem, size_order_problems
from gpufleet.parsing.nccl_tests.results import InvalidRow, NcclRun, NcclTestsResult, SizeRow

__all__ = ["parse_nccl_tests_json"]


# --------------------------------------------------------------------------------------------
# decoding (several documents, a truncated last one)
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
    documents: list[Any] = []
    position = 0
    while position < len(stripped):
        try:
            document, end = raw_decode(stripped, position)
        except json.JSONDecodeError:
            repaired = _close_truncated_json(stripped[position:])
            if repaired is None:
                break
            try:
                documents.append(raw_decode(repaired)[0])
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


# --------------------------------------------------------------------------------------------
# one document -> one run
# --------------------------------------------------------------------------------------------


def _positive(config: dict[str, Any], key: str, problems: list[str]) -> int | None:
    """``config[key]`` as a positive whole number; a value that is not one is a problem."""
    if key not in config:
        return None
    value, why = count(config[key], f"config.{key}")
    if why is None and value == 0:
        why = f"config.{key} 0 is not a positive number"
    if why:
        problems.append(f"{why}: rank count unknown")
        return None
    return value


def _ranks_and_model(
    doc: dict[str, Any], notes: list[str], problems: list[str]
) -> tuple[int | None, str | None]:
    raw = doc.get("config")
    config: dict[str, Any] = raw if isinstance(raw, dict) else {}
    devices = config.get("devices", doc.get("devices"))
    devices = devices if isinstance(devices, list) else []
    ranks: int | None = None
    nthreads = _positive(config, "nthreads", problems)
    ngpus = _positive(config, "ngpus", problems)
    if devices and nthreads and ngpus:
        # one device record per process (the first line of each process's block)
        ranks = len(devices) * nthreads * ngpus
    models = [
        gpu_model_from_device_name(d.get("device_info")) for d in devices if isinstance(d, dict)
    ]
    return ranks, single_model(models, notes)


def _side_from_json(side: Any, name: str, reasons: list[str]) -> tuple[Any, ...]:
    """``(time, alg_bw, bus_bw, nwrong)`` of one side (``null``: not run, all ``None``)."""
    if side is None:
        return (None, None, None, None)
    if not isinstance(side, dict):
        reasons.append(f"{name} is not an object")
        return (None, None, None, None)
    values: list[Any] = []
    time_key = "time" if "time" in side else "cpu_time"
    for key in (time_key, "alg_bw", "bus_bw"):
        value, why = figure(side.get(key), key)
        values.append(value)
        if why:
            reasons.append(f"{name} {why}")
    wrong, why = wrong_from_count(side.get("nwrong", side.get("wrong")), "nwrong")
    if why:
        reasons.append(f"{name} {why}")
    return (*values, wrong)


def _row_from_json(item: Any) -> SizeRow | InvalidRow:
    if not isinstance(item, dict):
        return InvalidRow(None, ("result record is not an object",), clip(repr(item)))
    reasons: list[str] = []
    size, why = count(item.get("size"), "size")
    if why or size is None:
        reasons.append(why or "no size")
    elements, why = count(item.get("count"), "count")
    if why:
        reasons.append(why)
    oop = _side_from_json(item.get("out_of_place"), "out_of_place", reasons)
    ip = _side_from_json(item.get("in_place"), "in_place", reasons)
    if reasons or size is None:
        return InvalidRow(size, tuple(reasons), clip(json.dumps(item, default=str)))
    return SizeRow(
        size,
        elements,
        item.get("type") if isinstance(item.get("type"), str) else None,
        item.get("redop") if isinstance(item.get("redop"), str) else None,
        to_int(item.get("root")),
        *oop,
        *ip,
    )


def _rows_and_collective(
    doc: dict[str, Any],
) -> tuple[list[SizeRow], list[InvalidRow], str | None]:
    """The result rows (and the refused ones); the collective from ``args[0]``, else from the
    first record's experiment name."""
    collective = None
    args = doc.get("args")
    if isinstance(args, list) and args and isinstance(args[0], str):
        collective = normalise_collective(args[0])
    rows: list[SizeRow] = []
    invalid: list[InvalidRow] = []
    results = doc.get("results")
    for item in results if isinstance(results, list) else []:
        row = _row_from_json(item)
        if isinstance(row, InvalidRow):
            invalid.append(row)
            continue
        rows.append(row)
        if collective is None:
            name = item.get("experiment_name")
            if isinstance(name, str) and name.endswith("_perf"):
                collective = normalise_collective(name)
    return rows, invalid, collective


def _summary(doc: dict[str, Any], problems: list[str]) -> tuple[int | None, float | None]:
    """``out_of_bounds.count`` and ``average_bus_bandwidth.bandwidth``; a missing or impossible
    value is a problem (and the run is then truncated: its summary is not whole)."""
    oob_obj = doc.get("out_of_bounds")
    avg_obj = doc.get("average_bus_bandwidth")
    if not isinstance(oob_obj, dict) or not isinstance(avg_obj, dict):
        problems.append("JSON document has no out_of_bounds / average_bus_bandwidth summary")
        oob_obj = oob_obj if isinstance(oob_obj, dict) else {}
        avg_obj = avg_obj if isinstance(avg_obj, dict) else {}
    oob, why = count(oob_obj.get("count"), "out_of_bounds.count")
    if why:
        problems.append(f"the summary's {why}")
    avg, why = figure(avg_obj.get("bandwidth"), "average_bus_bandwidth.bandwidth")
    if why:
        problems.append(f"the summary's {why}")
    return oob, avg


def _run_from_json(doc: dict[str, Any], repaired: bool) -> NcclRun:
    notes: list[str] = []
    problems: list[str] = []
    ranks, model = _ranks_and_model(doc, notes, problems)
    rows, invalid, collective = _rows_and_collective(doc)
    rank_problems = len(problems)
    if repaired:
        problems.append("JSON document was cut short; parsed up to its last complete record")
    oob, avg = _summary(doc, problems)
    refused = invalid_rows_problem(invalid)
    if refused:
        problems.append(refused)
    # cut short, summary missing or impossible, rows refused: the figures are not the whole run
    truncated = len(problems) > rank_problems
    problems.extend(size_order_problems(rows))
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
        invalid_rows=tuple(invalid),
        problems=tuple(problems),
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
