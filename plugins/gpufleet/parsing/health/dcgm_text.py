"""Parse the text table ``dcgmi diag -r N`` prints (DCGM 2.x, 3.x and 4.x).

Design: docs/design/gpu-health-parsers.md.
"""

from __future__ import annotations

import re

from gpufleet.errors import ParseError
from gpufleet.parsing.health.dcgm import (
    BANNER,
    MAX_PROBLEMS,
    RUN,
    DcgmDiagResult,
    DcgmTest,
    DcgmTestBuilder,
    named_gpus,
    nothing_ran,
    status_word,
    worst,
)
from gpufleet.parsing.health.dcgm_errors import run_errors, run_level
from gpufleet.parsing.health.not_run import NotRun

__all__ = ["parse_dcgm_diag_text"]

_SECTION = re.compile(r"^\s*[|+]-{2,}\s+(\S.*?)\s+-+\+")
_BORDER = re.compile(r"^\s*\+[-=+]+\+\s*$")
_STATUS = re.compile(
    r"^(?P<word>[A-Za-z][A-Za-z ]*?)\s*"
    r"(?:-\s*(?P<scope>All|GPUs?\s*:?\s*(?P<ids>\d+(?:\s*,\s*\d+)*)\s*,?))?$"
)
_ENTITY_ROW = re.compile(
    r"^(?P<group>GPU|vGPU|Switch|GPU_I|GPU_CI|LINK|CPU|CPU_CORE|ConnectX|None)(?P<id>\d+)"
    r"\s*:\s*(?P<word>[A-Za-z][A-Za-z ]*)$"
)
_MESSAGE_NAME = re.compile(
    r"^(?P<kind>Warning|Error|Info)(?:\s*:\s*(?P<group>[A-Za-z_]+?)(?P<id>\d+))?$", re.IGNORECASE
)
_CODE_ROW = re.compile(r"^Code:\s*\(\d+\)$")
_METADATA = {"DCGM Version": "version", "Driver Version Detected": "driver"}
_OTHER_METADATA = re.compile(
    r"^(?:.* Device IDs Detected|GPU Device Serials|Number of CPUs Detected|"
    r"(?:CPU )?EUD (?:Test|Package) Version|Metadata)$"
)
_WRAP = 45  # dcgmi wraps messages at DATA_INFO_TAG_LEN characters


class _Test(DcgmTestBuilder):
    def __init__(
        self, name: str, category: str | None, status: str, ids: list[int], every: bool = False
    ) -> None:
        super().__init__(name, category)
        self.row_status = status
        self.every = every  # "Pass - All", "Fail - All": the status of every GPU of the run
        self.rows: list[str] = [status]  # the test row and 2.x/3.x continuation status rows
        for gpu in ids:
            self.gpu(gpu, status, [])
        # messages as read: [kind, GPU of the name cell, other entity label, text]
        self.said: list[list[object]] = []
        self.last = f"test {name!r}"

    def named(self) -> set[int]:
        """The GPUs this test names: its rows' GPUs and the GPUs its messages name."""
        found = set(self.gpu_status)
        for _kind, gpu, _label, text in self.said:
            found |= {gpu} if isinstance(gpu, int) else set(named_gpus(" ".join(str(text).split())))
        return found

    def done(self, every_gpu: set[int]) -> DcgmTest:
        if self.every:  # "X - All": every GPU the output names has this status in this test
            for unlisted in every_gpu - set(self.gpu_status):
                self.gpu(unlisted, self.row_status, [])
        for _kind, gpu, label, text in self.said:
            message = " ".join(str(text).split())
            if not message:
                continue
            if isinstance(gpu, int):
                self.gpu(gpu, None, [(message, None)])
            elif label:
                self.own_said.append((f"{label}: {message}", None))
            else:
                self.own(None, [(message, None)])
        self.summary = worst(self.rows)
        frozen = self.freeze()
        return frozen


def _cells(line: str) -> tuple[str, str, str] | None:
    """``(name, value, raw value)`` of a ``| name | value |`` row; the raw value keeps the
    spaces a wrapped message's chunk starts with."""
    stripped = line.strip()
    if not stripped.startswith("|") or stripped.startswith("|-") or stripped.startswith("|="):
        return None
    parts = stripped[1:].split("|")
    if stripped.endswith("|"):
        parts = parts[:-1]
    if len(parts) < 2:
        return None
    raw = "|".join(parts[1:])
    raw = raw[1:] if raw.startswith(" ") else raw
    # a chunk of a wrapped message is the first 45 characters of the cell, spaces included
    chunk = raw if len(raw.rstrip()) > _WRAP else raw[:_WRAP]
    return parts[0].strip(), raw.strip(), chunk


def parse_dcgm_diag_text(text: str) -> DcgmDiagResult:  # noqa: C901  one branch per line shape of the dcgmi diag table
    """Per-test, per-GPU results of the ``dcgmi diag`` text table, with its run errors and
    what is missing from a table cut short."""
    problems: list[str] = []
    meta: dict[str, str] = {}
    tests: list[_Test] = []
    category: str | None = None
    current: _Test | None = None
    target: list[object] | None = None  # the message a continuation row goes on
    skip_continuation = False  # an Info message's rows
    started = closed = refused = False
    last_row = ""
    cut: str | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        section = _SECTION.match(line)
        if section:
            started, closed = True, False
            category = section.group(1).strip()
            target, skip_continuation = None, False
            continue
        if _BORDER.match(line):
            started, closed = True, True
            continue
        if stripped == BANNER:
            started = True
            continue
        cells = _cells(line)
        if cells is None:
            continue
        started, closed = True, False
        if not stripped.endswith("|"):
            cut = f"a row cut short ({stripped[:60]!r})"
        name, value, chunk = cells
        if not name and not value:
            continue
        last_row = stripped
        if name == "Diagnostic" and value == "Result":
            continue  # the header (3.x also has a test named Diagnostic)
        if name in _METADATA:
            meta[_METADATA[name]] = value
            continue
        if category == "Metadata" or _OTHER_METADATA.match(name):
            continue
        message = _MESSAGE_NAME.match(name)
        if message:
            target, skip_continuation = None, message.group("kind").lower() == "info"
            if skip_continuation:
                continue
            if current is None:
                problems.append(f"a '{message.group('kind')}' row before any test: {value[:60]!r}")
                continue
            group, number = message.group("group"), message.group("id")
            gpu = int(number) if group and group.upper() == "GPU" else None
            label = f"{group}{number}" if group and gpu is None else None
            target = [message.group("kind"), gpu, label, chunk]
            current.said.append(target)
            current.last = f"test {current.name!r} {message.group('kind')} message"
            continue
        if not name:
            if current is None:
                if not refused:  # the rows of a refused test are refused with it
                    problems.append(f"a row before any test: {value[:60]!r}")
                continue
            entity = _ENTITY_ROW.match(value)
            found = _STATUS.match(value) if entity is None else None
            if entity:
                target, skip_continuation = None, False
                status = status_word(entity.group("word"))
                label = f"{entity.group('group')}{entity.group('id')}"
                if status is None:
                    problems.append(
                        f"test {current.name!r} {label}: status {entity.group('word')!r} "
                        "is not a word DCGM prints"
                    )
                elif entity.group("group") == "GPU":
                    current.gpu(int(entity.group("id")), status, [])
                else:
                    current.other(label, status, [])
                    current.rows.append(status)
                current.last = f"test {current.name!r} {label}"
            elif found and found.group("scope") and status_word(found.group("word")):
                target, skip_continuation = None, False
                status = status_word(found.group("word"))
                assert status is not None
                for gpu in _ids(found.group("ids")):
                    current.gpu(gpu, status, [])
                current.rows.append(status)
                current.last = f"test {current.name!r} row {value!r}"
            elif target is not None:
                target[3] = str(target[3]) + chunk
            elif skip_continuation or _CODE_ROW.match(value):
                continue
            else:
                problems.append(f"test {current.name!r}: row {value[:60]!r} not read")
            continue
        # a test row
        target, skip_continuation = None, False
        found = _STATUS.match(value)
        status = status_word(found.group("word")) if found else None
        if status is None or found is None:
            problems.append(f"test {name!r}: {value[:40]!r} is not a status DCGM prints")
            current, refused = None, True
            continue
        refused = False
        current = _Test(
            name, category, status, _ids(found.group("ids")), found.group("scope") == "All"
        )
        tests.append(current)
    not_run = run_errors(text, problems)
    if started and not closed and cut is None:
        cut = "the table's box does not close"
    if cut is not None:
        last = tests[-1].last if tests else (f"row {last_row[:60]!r}" if last_row else "nothing")
        not_run.append(NotRun(RUN, f"the output is cut short: {cut}; last read: {last}"))
    if not tests and not started and not not_run:
        reason = "; ".join(problems[:MAX_PROBLEMS])
        raise ParseError("no dcgmi diag test row found" + (f": {reason}" if reason else ""))
    every_gpu = set().union(*(t.named() for t in tests)) if tests else set()
    frozen = [t.done(every_gpu) for t in tests]
    not_run += nothing_ran(frozen, not_run, problems)
    level = run_level(text, problems)
    return DcgmDiagResult(
        source="text",
        dcgm_version=meta.get("version") or None,
        driver_version=meta.get("driver") or None,
        tests=tuple(frozen),
        problems=tuple(dict.fromkeys(problems[:MAX_PROBLEMS])),
        level=level,
        not_run=tuple(dict.fromkeys(not_run)),
    )


def _ids(ids: str | None) -> list[int]:
    return [int(i) for i in re.findall(r"\d+", ids or "")]
