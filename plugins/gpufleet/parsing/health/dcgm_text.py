"""Parse the text table ``dcgmi diag -r N`` prints (DCGM 2.x/3.x and 4.x).

A function over the text handed in: no I/O. Rows are ``| name | value |`` inside ``+---+``
boxes; ``|-----  Deployment  ----+---|`` rows open a category. Read:

- metadata rows: ``DCGM Version``, ``Driver Version Detected``;
- a test row: ``| PCIe | Pass |``, ``| PCIe | Pass - All |``, ``| PCIe | Fail - GPU: 0 |`` (3.x:
  the status, and the GPUs it names), ``| Denylist | Skip |``;
- a per-GPU row (4.x): ``|  | GPU0: Pass |`` under its test;
- ``| Warning | GPU 0 <message> |`` / ``| Error | ...`` rows (3.x) and their continuation
  rows (empty name, wrapped text): the message goes to the GPU it names in the test above it.
  ``| Info | ... |`` rows are informational and not kept.

A test row whose value is not a status DCGM prints is refused into ``problems``.
"""

from __future__ import annotations

import re

from gpufleet.errors import ParseError
from gpufleet.parsing.health.dcgm import (
    DcgmDiagResult,
    DcgmGpuResult,
    DcgmTest,
    status_word,
    worst,
)

__all__ = ["parse_dcgm_diag_text"]

_SECTION = re.compile(r"^\s*[|+]-{2,}\s+(\S.*?)\s+-+\+")
_STATUS = re.compile(
    r"^(?P<word>[A-Za-z][A-Za-z ]*?)\s*(?:-\s*(?P<scope>All|GPUs?\s*:?\s*(?P<ids>[\d,\s]+)))?$"
)
_GPU_ROW = re.compile(r"^GPU\s*(?P<gpu>\d+)\s*:\s*(?P<word>[A-Za-z][A-Za-z ]*)$")
_MESSAGE_GPU = re.compile(r"^GPU\s*(?P<gpu>\d+)\b[:\s]*(?P<text>.*)$")
_METADATA = {"DCGM Version": "version", "Driver Version Detected": "driver"}
_IGNORED_NAMES = {"Diagnostic", "GPU Device IDs Detected", "GPU Device Serials", "Metadata"}
_MESSAGE_NAMES = {"warning": True, "error": True, "info": False}
_MAX_PROBLEMS = 16


class _Test:
    def __init__(self, name: str, category: str | None, status: str | None, ids: list[int]):
        self.name = name
        self.category = category
        self.status = status
        self.gpu_status: dict[int, str] = {gpu: status for gpu in ids if status is not None}
        self.messages: dict[int, list[str]] = {}

    def freeze(self) -> DcgmTest:
        gpus = sorted(set(self.gpu_status) | set(self.messages))
        results = tuple(
            DcgmGpuResult(
                gpu,
                self.gpu_status.get(gpu) or self.status or "fail",
                tuple(self.messages.get(gpu, ())),
            )
            for gpu in gpus
        )
        status = self.status or worst([r.status for r in results])
        return DcgmTest(self.name, self.category, status, results)


def _cells(line: str) -> tuple[str, str] | None:
    stripped = line.strip()
    if not stripped.startswith("|") or stripped.startswith("|-") or stripped.startswith("|="):
        return None
    parts = stripped.strip("|").split("|")
    if len(parts) < 2:
        return None
    return parts[0].strip(), "|".join(parts[1:]).strip()


def parse_dcgm_diag_text(text: str) -> DcgmDiagResult:
    """Per-test, per-GPU results of the ``dcgmi diag`` text table."""
    problems: list[str] = []
    meta: dict[str, str] = {}
    tests: list[_Test] = []
    category: str | None = None
    current: _Test | None = None
    # where a continuation row's text goes: (test, gpu, index of the message) or None
    target: tuple[_Test, int, int] | None = None
    for line in text.splitlines():
        section = _SECTION.match(line)
        if section:
            category = section.group(1).strip()
            target = None
            continue
        cells = _cells(line)
        if cells is None:
            continue
        name, value = cells
        if not name and not value:
            continue
        if name in _METADATA:
            meta[_METADATA[name]] = value
            continue
        if name in _IGNORED_NAMES or category == "Metadata":
            continue
        kind = _MESSAGE_NAMES.get(name.lower())
        if kind is not None:
            target = None
            found = _MESSAGE_GPU.match(value)
            if kind and current is not None and found:
                gpu = int(found.group("gpu"))
                said = current.messages.setdefault(gpu, [])
                said.append(found.group("text").strip())
                target = (current, gpu, len(said) - 1)
            elif kind and current is not None:
                problems.append(f"test {current.name!r}: message names no GPU: {value[:60]!r}")
            continue
        if not name:
            gpu_row = _GPU_ROW.match(value)
            if gpu_row and current is not None:
                status = status_word(gpu_row.group("word"))
                gpu = int(gpu_row.group("gpu"))
                if status is None:
                    problems.append(
                        f"test {current.name!r} GPU {gpu}: status {gpu_row.group('word')!r} "
                        "is not a word DCGM prints"
                    )
                else:
                    current.gpu_status[gpu] = status
                target = None
            elif target is not None:
                test, gpu, index = target
                test.messages[gpu][index] += value
            continue
        # a test row
        target = None
        found = _STATUS.match(value)
        status = status_word(found.group("word")) if found else None
        if status is None:
            problems.append(f"test {name!r}: {value[:40]!r} is not a status DCGM prints")
            current = None
            continue
        ids = [int(i) for i in re.findall(r"\d+", found.group("ids") or "")] if found else []
        current = _Test(name, category, status, ids)
        tests.append(current)
    if not tests:
        reason = "; ".join(problems[:_MAX_PROBLEMS])
        raise ParseError("no dcgmi diag test row found" + (f": {reason}" if reason else ""))
    return DcgmDiagResult(
        source="text",
        dcgm_version=meta.get("version") or None,
        driver_version=meta.get("driver") or None,
        tests=tuple(t.freeze() for t in tests),
        problems=tuple(dict.fromkeys(problems[:_MAX_PROBLEMS])),
    )
