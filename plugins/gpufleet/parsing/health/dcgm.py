"""Parse ``dcgmi diag`` output: the ``-j`` JSON of DCGM 3.x and 4.x, and the text table.

Functions over the text handed in: no I/O. The result names, per test, the status DCGM gave
each GPU (``pass``/``fail``/``warn``/``skip``), the messages and DCGM error codes (``error_id``,
a ``dcgmError_t`` / ``DCGM_FR_*`` number) attached to it, and the test's overall status. What
was refused is named in ``problems``; input holding no diagnostic at all is a :class:`ParseError`.

JSON shapes read (keys as in NVIDIA/DCGM ``nvvs/include/NvvsJsonStrings.h``):

- DCGM 3.x: ``{"DCGM GPU Diagnostic": {"test_categories": [{"category", "tests": [{"name",
  "results": [{"gpu_ids" | "gpu_id", "status", "info", "warnings": [str | {"warning",
  "error_id", "error_category", "error_severity"}]}]}]}], "version", ...}}``;
- DCGM 4.x: the same nesting under ``"DCGM Diagnostic"``, results per entity
  (``"entity_group": "GPU", "entity_group_id": 1, "entity_id": N``), a ``test_summary``
  ``{"status"}`` per test, ``entity_groups`` and ``metadata`` (``version``, ``Driver Version
  Detected``) at the top level;
- also a flat ``{"tests": [...]}`` with ``"errors": [{"error_id", "category", "severity",
  "msg"}]`` per result.

Results of entities other than GPUs (CPU, NvSwitch) are not GPU results and are left out. A
status word DCGM never prints, a GPU id that is not a non-negative integer, or an error code
that is not one is refused into ``problems`` (the result it belongs to is not read).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gpufleet.errors import ParseError
from gpufleet.parsing.json_text import json_documents

__all__ = [
    "DIAG_STATUSES",
    "DcgmDiagResult",
    "DcgmGpuResult",
    "DcgmTest",
    "parse_dcgm_diag",
    "status_word",
]

DIAG_STATUSES = ("pass", "fail", "warn", "skip")
# the words dcgmi prints (any case); "Not Run" is a test DCGM did not run: a skip
_WORDS = {
    "pass": "pass",
    "fail": "fail",
    "warn": "warn",
    "warning": "warn",
    "skip": "skip",
    "not run": "skip",
}
_RANK = {"fail": 3, "warn": 2, "pass": 1, "skip": 0}
_ROOTS = ("DCGM GPU Diagnostic", "DCGM Diagnostic")
_MAX_PROBLEMS = 16


@dataclass(frozen=True, slots=True)
class DcgmGpuResult:
    gpu: int
    status: str  # one of DIAG_STATUSES
    messages: tuple[str, ...] = ()  # DCGM's warnings / errors for this GPU
    error_codes: tuple[int, ...] = ()  # DCGM error ids (dcgmError_t)


@dataclass(frozen=True, slots=True)
class DcgmTest:
    name: str
    category: str | None
    status: str | None  # the test as a whole (DCGM's summary, else the worst GPU status)
    gpus: tuple[DcgmGpuResult, ...] = ()


@dataclass(frozen=True, slots=True)
class DcgmDiagResult:
    source: str  # "json" or "text"
    dcgm_version: str | None
    driver_version: str | None
    tests: tuple[DcgmTest, ...]
    problems: tuple[str, ...] = ()

    @property
    def failures(self) -> tuple[tuple[str, DcgmGpuResult], ...]:
        """``(test name, GPU result)`` for every GPU a test failed."""
        return tuple(
            (test.name, gpu) for test in self.tests for gpu in test.gpus if gpu.status == "fail"
        )

    @property
    def failing_gpus(self) -> tuple[int, ...]:
        return tuple(sorted({gpu.gpu for _, gpu in self.failures}))


def status_word(word: Any) -> str | None:
    """DCGM's status word as one of :data:`DIAG_STATUSES`; ``None`` for a word it never prints."""
    if not isinstance(word, str):
        return None
    return _WORDS.get(" ".join(word.split()).lower())


def worst(statuses: list[str]) -> str | None:
    return max(statuses, key=_RANK.__getitem__) if statuses else None


def _clip(value: Any, limit: int = 40) -> str:
    text = str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _count(value: Any) -> int | None:
    """A non-negative integer (DCGM writes ids as numbers or digit strings)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and value.strip().isdigit() and len(value.strip()) <= 9:
        return int(value.strip())
    return None


def _gpu_ids(result: dict[str, Any], where: str, problems: list[str]) -> list[int] | None:
    """The GPUs a result is about; ``[]`` for a non-GPU entity, ``None`` when refused."""
    if "entity_group" in result or "entity_id" in result:
        group = result.get("entity_group")
        group_id = result.get("entity_group_id")
        is_gpu = (isinstance(group, str) and group.strip().upper() == "GPU") or (
            group is None and group_id in (None, 1)
        )
        if not is_gpu:
            return []
        entity = _count(result.get("entity_id"))
        if entity is None:
            problems.append(
                f"{where}: entity_id {_clip(result.get('entity_id'))!r} is not a GPU id"
            )
            return None
        return [entity]
    raw = result.get("gpu_ids", result.get("gpu_id"))
    items: list[Any]
    if isinstance(raw, list):
        items = raw
    elif isinstance(raw, str):
        items = [part for part in raw.split(",") if part.strip()]
    else:
        items = [raw]
    ids = [_count(item) for item in items]
    if not items or any(i is None for i in ids):
        problems.append(f"{where}: GPU ids {_clip(raw)!r} are not non-negative integers")
        return None
    return [i for i in ids if i is not None]


def _messages(
    result: dict[str, Any], where: str, problems: list[str]
) -> tuple[list[str], list[int]] | None:
    """DCGM's warnings and errors of one result: ``(messages, error codes)``; ``None`` when an
    error code cannot be one."""
    messages: list[str] = []
    codes: list[int] = []
    for key in ("warnings", "errors"):
        entries = result.get(key)
        if isinstance(entries, str | dict):
            entries = [entries]
        if not isinstance(entries, list):
            continue
        for entry in entries:
            if isinstance(entry, str):
                messages.append(entry.strip())
                continue
            if not isinstance(entry, dict):
                continue
            text = next(
                (entry[k] for k in ("warning", "msg", "message", "error") if k in entry), None
            )
            if isinstance(text, str) and text.strip():
                messages.append(text.strip())
            for code_key in ("error_id", "error_code"):
                if code_key not in entry:
                    continue
                code = _count(entry[code_key])
                if code is None:
                    problems.append(
                        f"{where}: {code_key} {_clip(entry[code_key])!r} is not a DCGM error code"
                    )
                    return None
                codes.append(code)
                break
    return messages, codes


def _read_test(test: dict[str, Any], category: str | None, problems: list[str]) -> DcgmTest | None:
    name = test.get("name")
    if not isinstance(name, str) or not name.strip():
        problems.append(f"a test without a name in category {category!r} not read")
        return None
    name = name.strip()
    gpus: dict[int, DcgmGpuResult] = {}
    results = test.get("results")
    for index, result in enumerate(results if isinstance(results, list) else []):
        if not isinstance(result, dict):
            continue
        where = f"test {name!r} result #{index}"
        status = status_word(result.get("status"))
        if status is None:
            problems.append(
                f"{where}: status {_clip(result.get('status'))!r} is not a word DCGM prints"
            )
            continue
        ids = _gpu_ids(result, where, problems)
        said = _messages(result, where, problems)
        if ids is None or said is None:
            continue
        messages, codes = said
        for gpu in ids:
            before = gpus.get(gpu)
            if before is not None:  # the same GPU twice: keep the worse status, all messages
                status_here = worst([before.status, status]) or status
                messages_here = before.messages + tuple(messages)
                codes_here = before.error_codes + tuple(codes)
            else:
                status_here, messages_here, codes_here = status, tuple(messages), tuple(codes)
            gpus[gpu] = DcgmGpuResult(gpu, status_here, messages_here, codes_here)
    summary = test.get("test_summary")
    overall: str | None = None
    if isinstance(summary, dict) and "status" in summary:
        overall = status_word(summary.get("status"))
        if overall is None:
            problems.append(
                f"test {name!r}: summary status {_clip(summary.get('status'))!r} "
                "is not a word DCGM prints"
            )
    if overall is None:
        overall = worst([g.status for g in gpus.values()])
    ordered = tuple(gpus[k] for k in sorted(gpus))
    return DcgmTest(name, category, overall, ordered)


def _diag_root(document: dict[str, Any]) -> dict[str, Any] | None:
    for key in _ROOTS:
        if isinstance(document.get(key), dict):
            return document[key]
    if isinstance(document.get("tests"), list) or isinstance(document.get("test_categories"), list):
        return document
    return None


def _string(*candidates: Any) -> str | None:
    for value in candidates:
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def parse_dcgm_diag_json(text: str) -> DcgmDiagResult:
    """Per-test, per-GPU results of ``dcgmi diag -j`` (DCGM 3.x or 4.x)."""
    documents = [(d, root) for d in json_documents(text) if (root := _diag_root(d)) is not None]
    if not documents:
        raise ParseError("no dcgmi diag JSON found (expected 'DCGM GPU Diagnostic' or 'tests')")
    document, root = documents[0]
    problems: list[str] = []
    tests: list[DcgmTest] = []
    categories = root.get("test_categories")
    if isinstance(categories, list):
        pairs = [
            (c.get("category") if isinstance(c.get("category"), str) else None, t)
            for c in categories
            if isinstance(c, dict) and isinstance(c.get("tests"), list)
            for t in c["tests"]
        ]
    else:
        pairs = [(None, t) for t in root.get("tests", [])]
    for category, test in pairs:
        if isinstance(test, dict) and (read := _read_test(test, category, problems)) is not None:
            tests.append(read)
    metadata = document.get("metadata") if isinstance(document.get("metadata"), dict) else {}
    if not tests:
        reason = "; ".join(problems[:_MAX_PROBLEMS]) or "it holds no tests"
        raise ParseError(f"no dcgmi diag test can be read: {reason}")
    return DcgmDiagResult(
        source="json",
        dcgm_version=_string(root.get("version"), metadata.get("version"), document.get("version")),
        driver_version=_string(
            root.get("Driver Version Detected"),
            metadata.get("Driver Version Detected"),
            root.get("driver_version"),
            document.get("driver_version"),
        ),
        tests=tuple(tests),
        problems=tuple(dict.fromkeys(problems[:_MAX_PROBLEMS])),
    )


_TABLE_LINE = re.compile(r"^\s*[|+]", re.MULTILINE)


def parse_dcgm_diag(text: str) -> DcgmDiagResult:
    """``dcgmi diag`` output in either form: JSON (``-j``) when it holds a diagnostic document,
    else the text table."""
    from gpufleet.parsing.health.dcgm_text import parse_dcgm_diag_text

    if isinstance(text, bytes | bytearray):
        text = text.decode("utf-8", errors="replace")
    if re.search(r"^\s*\{", text, re.MULTILINE) and any(
        _diag_root(d) for d in json_documents(text)
    ):
        return parse_dcgm_diag_json(text)
    if _TABLE_LINE.search(text):
        return parse_dcgm_diag_text(text)
    raise ParseError(
        "no dcgmi diag output found (expected '-j' JSON or the '| Diagnostic | Result |' table)"
    )
