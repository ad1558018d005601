"""Parse the ``dcgmi diag -j`` JSON into the result model of ``dcgm``. A function over the
text handed in: no I/O.

Design: docs/design/gpu-health-parsers.md.
"""

from __future__ import annotations

import re
from typing import Any

from gpufleet.errors import ParseError
from gpufleet.parsing.health.dcgm import (
    ENTITY_GROUPS,
    MAX_PROBLEMS,
    RUN,
    DcgmDiagResult,
    DcgmTest,
    DcgmTestBuilder,
    clip,
    nothing_ran,
    status_word,
)
from gpufleet.parsing.health.dcgm_errors import TEST_FAILED, run_error, run_level
from gpufleet.parsing.health.not_run import NotRun
from gpufleet.parsing.json_text import json_documents

__all__ = ["looks_like_json", "parse_dcgm_diag_json"]

_ROOTS = ("DCGM GPU Diagnostic", "DCGM Diagnostic")


def _count(value: Any) -> int | None:
    """A non-negative integer (DCGM writes ids as numbers or digit strings)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and value.strip().isdigit() and len(value.strip()) <= 9:
        return int(value.strip())
    return None


def _entity(result: dict[str, Any], where: str, problems: list[str]) -> tuple[str, Any] | None:
    """What a result is about: ``("gpu", [ids])``, ``("other", "CPU 0")`` for a non-GPU entity,
    ``("none", None)`` for the test's own result (no id at all); ``None`` when refused."""
    if "entity_group" in result or "entity_id" in result or "entity_group_id" in result:
        group = result.get("entity_group")
        group_id: Any = result.get("entity_group_id")  # JSON: any value
        if not isinstance(group, str):
            group = ENTITY_GROUPS.get(group_id, "GPU" if group_id is None else str(group_id))
        entity = _count(result.get("entity_id"))
        if group.strip().upper() != "GPU":
            return "other", f"{group.strip()} {result.get('entity_id')}"
        if entity is None:
            problems.append(f"{where}: entity_id {clip(result.get('entity_id'))!r} is not a GPU id")
            return None
        return "gpu", [entity]
    if "gpu_ids" not in result and "gpu_id" not in result:
        return "none", None
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
        problems.append(f"{where}: GPU ids {clip(raw)!r} are not non-negative integers")
        return None
    return "gpu", [i for i in ids if i is not None]


def _messages(
    result: dict[str, Any], where: str, problems: list[str]
) -> list[tuple[str, int | None]] | None:
    """DCGM's warnings and errors of one result: ``(message, error code or None)``; ``None``
    when an error code cannot be one."""
    said: list[tuple[str, int | None]] = []
    for key in ("warnings", "errors"):
        entries = result.get(key)
        if isinstance(entries, str | dict):
            entries = [entries]
        if not isinstance(entries, list):
            continue
        for entry in entries:
            if isinstance(entry, str):
                if entry.strip():
                    said.append((entry.strip(), None))
                continue
            if not isinstance(entry, dict):
                continue
            # 3.x writes a Deployment test's message under "warnings" inside the entry
            text = next(
                (
                    entry[k]
                    for k in ("warning", "msg", "message", "error", "warnings")
                    if isinstance(entry.get(k), str)
                ),
                None,
            )
            code: int | None = None
            for code_key in ("error_id", "error_code"):
                if code_key not in entry:
                    continue
                code = _count(entry[code_key])
                if code is None:
                    problems.append(
                        f"{where}: {code_key} {clip(entry[code_key])!r} is not a DCGM error code"
                    )
                    return None
                break
            if (isinstance(text, str) and text.strip()) or code is not None:
                said.append(((text or "").strip(), code))
    return said


def _read_test(test: dict[str, Any], category: str | None, problems: list[str]) -> DcgmTest | None:
    name = test.get("name")
    if not isinstance(name, str) or not name.strip():
        problems.append(f"a test without a name in category {category!r} not read")
        return None
    name = name.strip()
    built = DcgmTestBuilder(name, category)
    results = test.get("results")
    for index, result in enumerate(results if isinstance(results, list) else []):
        if not isinstance(result, dict):
            continue
        where = f"test {name!r} result #{index}"
        status = status_word(result.get("status"))
        if status is None:
            problems.append(
                f"{where}: status {clip(result.get('status'))!r} is not a word DCGM prints"
            )
            continue
        about = _entity(result, where, problems)
        said = _messages(result, where, problems)
        if about is None or said is None:
            continue
        kind, ids = about
        if kind == "gpu":
            for gpu in ids:
                built.gpu(gpu, status, said)
        elif kind == "other":
            built.other(ids, status, said)
        else:
            built.own(status, said)
    summary = test.get("test_summary")
    if isinstance(summary, dict) and "status" in summary:
        built.summary = status_word(summary.get("status"))
        if built.summary is None:
            problems.append(
                f"test {name!r}: summary status {clip(summary.get('status'))!r} "
                "is not a word DCGM prints"
            )
        # the summary repeats every error of the test; the ones of no entity are only here
        said = _messages(summary, f"test {name!r} summary", problems) or []
        known = {item for items in built.gpu_said.values() for item in items}
        known |= set(built.own_said)
        known |= {(t.split(": ", 1)[-1], c) for t, c in built.own_said}
        built.own(None, [item for item in said if item not in known])
    return built.freeze()


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


def _tests_of(root: dict[str, Any], problems: list[str]) -> list[DcgmTest]:
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
        listed = root.get("tests")
        pairs = [(None, t) for t in (listed if isinstance(listed, list) else [])]
    for category, test in pairs:
        if isinstance(test, dict) and (read := _read_test(test, category, problems)) is not None:
            tests.append(read)
    return tests


_JSON_SIGN = re.compile(r'"(?:DCGM GPU Diagnostic|DCGM Diagnostic|test_categories)"')
_JSON_NAME = re.compile(r'"name"\s*:\s*"([^"]{1,80})"')


def _truncated_json(text: str) -> NotRun:
    names = _JSON_NAME.findall(text)
    last = f"; last test named: {names[-1]!r}" if names else "; no test was named before it"
    return NotRun(RUN, "the -j JSON is cut short: the document does not close" + last)


def parse_dcgm_diag_json(text: str) -> DcgmDiagResult:
    """Per-test, per-GPU results of ``dcgmi diag -j`` (DCGM 2.x to 4.x), its run errors, or
    what is missing from a document cut short."""
    problems: list[str] = []
    not_run: list[NotRun] = []
    documents: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for document in json_documents(text):
        runs = document.get("iterations")
        for one in runs if isinstance(runs, list) else [document]:
            if isinstance(one, dict) and (root := _diag_root(one)) is not None:
                documents.append((one, root))
        if isinstance(runs, list) and isinstance(document.get("warning"), str):
            # -i N: dcgmi stopped the iterations with errorString(ret) as the warning; a failed
            # test (DCGM_ST_NVVS_ERROR / _ISOLATE_ERROR) is in the iterations' results instead
            stopped = run_error(document["warning"], problems)
            if stopped.code not in TEST_FAILED:
                not_run.append(stopped)
    if not documents:
        for document in json_documents(text):
            for key in _ROOTS:
                if key in document:  # a whole document, but not the object dcgmi writes
                    raise ParseError(
                        f"the dcgmi diag JSON's {key!r} holds a {type(document[key]).__name__}, "
                        "not the object dcgmi writes (test_categories under it): not read"
                    )
        if _JSON_SIGN.search(text):
            level = run_level(text, problems)
            return DcgmDiagResult(
                "json", None, None, (), tuple(problems), level, (_truncated_json(text),)
            )
        raise ParseError("no dcgmi diag JSON found (expected 'DCGM GPU Diagnostic' or 'tests')")
    tests: list[DcgmTest] = []
    version = driver = None
    for document, root in documents:
        error = root.get("runtime_error")
        if isinstance(error, str) and error.strip():
            not_run.append(run_error(error, problems))
        tests += _tests_of(root, problems)
        raw = document.get("metadata")
        metadata = raw if isinstance(raw, dict) else {}
        version = version or _string(
            metadata.get("version"), root.get("version"), document.get("version")
        )
        driver = driver or _string(
            root.get("Driver Version Detected"),
            metadata.get("Driver Version Detected"),
            root.get("driver_version"),
            document.get("driver_version"),
        )
    # a document that does not close after the ones that did
    tail = text[text.rfind("}") + 1 :] if "}" in text else text
    if re.search(r"^\s*\{", tail, re.MULTILINE) and _JSON_SIGN.search(tail):
        not_run.append(_truncated_json(tail))
    not_run += nothing_ran(tests, not_run, problems)
    level = run_level(text, problems)
    return DcgmDiagResult(
        source="json",
        dcgm_version=version,
        driver_version=driver,
        tests=tuple(tests),
        problems=tuple(dict.fromkeys(problems[:MAX_PROBLEMS])),
        level=level,
        not_run=tuple(dict.fromkeys(not_run)),
    )


def looks_like_json(text: str) -> bool:
    """Whether ``text`` holds a ``dcgmi diag -j`` document, or the start of one."""
    if not re.search(r"^\s*\{", text, re.MULTILINE):
        return False
    return any(_diag_root(d) for d in json_documents(text)) or bool(_JSON_SIGN.search(text))
