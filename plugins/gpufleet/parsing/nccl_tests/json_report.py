"""Parse the ``-J file.json`` report of current nccl-tests.

One document per run: ``config`` (``nthreads``, ``ngpus``, one ``devices`` record per process),
``args``, ``results`` (one record per message size with ``out_of_place`` / ``in_place`` sides),
``out_of_bounds`` and ``average_bus_bandwidth``. Several concatenated documents (or a list of
them) give several runs. A document cut short is repaired up to its last complete record and its
run is marked ``truncated``; so is a run without the two summary objects. Values are read as in
:mod:`.cells`. Functions over the object or text handed in: no I/O.
"""

from __future__ import annotations

import json
from typing import Any

from gpufleet.errors import ParseError
from gpufleet.parsing.nccl_tests.cells import (
    gpu_model_from_device_name,
    normalise_collective,
    single_model,
    to_float,
    to_int,
)
from gpufleet.parsing.nccl_tests.results import NcclRun, NcclTestsResult, SizeRow

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


# --------------------------------------------------------------------------------------------
# one document -> one run
# --------------------------------------------------------------------------------------------


def _ranks_and_model(doc: dict[str, Any], notes: list[str]) -> tuple[int | None, str | None]:
    config = doc.get("config") if isinstance(doc.get("config"), dict) else {}
    devices = config.get("devices", doc.get("devices"))
    devices = devices if isinstance(devices, list) else []
    ranks: int | None = None
    nthreads = to_int(config.get("nthreads"))
    ngpus = to_int(config.get("ngpus"))
    if devices and nthreads and ngpus:
        # one device record per process (the first line of each process's block)
        ranks = len(devices) * nthreads * ngpus
    models = [
        gpu_model_from_device_name(d.get("device_info")) for d in devices if isinstance(d, dict)
    ]
    return ranks, single_model(models, notes)


def _side_from_json(side: Any) -> tuple[Any, ...]:
    if not isinstance(side, dict):
        return (None, None, None, None)
    time_us = to_float(side.get("time", side.get("cpu_time")))
    wrong_raw = side.get("nwrong", side.get("wrong"))
    wrong = None if wrong_raw is None else to_int(to_float(wrong_raw))
    return time_us, to_float(side.get("alg_bw")), to_float(side.get("bus_bw")), wrong


def _row_from_json(item: dict[str, Any]) -> SizeRow | None:
    size = to_int(item.get("size"))
    if size is None:
        return None
    return SizeRow(
        size,
        to_int(item.get("count")),
        item.get("type") if isinstance(item.get("type"), str) else None,
        item.get("redop") if isinstance(item.get("redop"), str) else None,
        to_int(item.get("root")),
        *_side_from_json(item.get("out_of_place")),
        *_side_from_json(item.get("in_place")),
    )


def _rows_and_collective(doc: dict[str, Any]) -> tuple[list[SizeRow], str | None]:
    """The result rows; the collective from ``args[0]``, else from the first row's experiment."""
    collective = None
    args = doc.get("args")
    if isinstance(args, list) and args and isinstance(args[0], str):
        collective = normalise_collective(args[0])
    rows: list[SizeRow] = []
    results = doc.get("results")
    for item in results if isinstance(results, list) else []:
        if not isinstance(item, dict):
            continue
        row = _row_from_json(item)
        if row is None:
            continue
        rows.append(row)
        if collective is None:
            name = item.get("experiment_name")
            if isinstance(name, str) and name.endswith("_perf"):
                collective = normalise_collective(name)
    return rows, collective


def _run_from_json(doc: dict[str, Any], repaired: bool) -> NcclRun:
    notes: list[str] = []
    ranks, model = _ranks_and_model(doc, notes)
    rows, collective = _rows_and_collective(doc)
    oob_obj = doc.get("out_of_bounds")
    avg_obj = doc.get("average_bus_bandwidth")
    oob = to_int(oob_obj.get("count")) if isinstance(oob_obj, dict) else None
    avg = to_float(avg_obj.get("bandwidth")) if isinstance(avg_obj, dict) else None
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
