"""Parse ``dcgmi diag`` output: the ``-j`` JSON of DCGM 2.x to 4.x, the text table, and the
errors ``dcgmi`` prints instead of either. This module holds the result model both forms'
parsers share.

Design: docs/design/gpu-health-parsers.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gpufleet.parsing.health.not_run import NotRun

__all__ = [
    "DIAG_STATUSES",
    "DcgmDiagResult",
    "DcgmGpuResult",
    "DcgmTest",
    "named_gpus",
    "MAX_PROBLEMS",
    "RUN",
    "DcgmTestBuilder",
    "clip",
    "nothing_ran",
    "status_word",
]

DIAG_STATUSES = ("pass", "fail", "warn", "skip")
# the words dcgmi prints (dcgmi/Diag.cpp HelperDisplayDiagResult), any case; "Not Run" is a
# test DCGM did not run: a skip
_WORDS = {"pass": "pass", "fail": "fail", "warn": "warn", "skip": "skip", "not run": "skip"}
_RANK = {"fail": 3, "warn": 2, "pass": 1, "skip": 0}
MAX_PROBLEMS = 16  # problems kept per parse
RUN = "dcgmi diag"
BANNER = "Successfully ran diagnostic for group."  # the line dcgmi prints above its table

# a GPU named in a message, in DCGM's spellings: "GPU 0", "GPU0", "gpu 0", "GPU ID: 0",
# "GPU: 0", "GPUs: 0, 1", "gpuId 0", "for GPU 0", "on GPU 0", and 2.x's "GPU 0GPU 0's NvLink"
# (DCGM 2.4 glued the GPU prefix to the message); not a size ("GPU 80GB")
_NAMED_GPU = re.compile(
    r"(?<![A-Za-z])GPU(?:s|\s*ID|Id)?\s*[:#]?\s*"
    r"(?P<ids>\d{1,4}(?:\s*,\s*\d{1,4}(?![\d.]))*)(?![\d.])(?!\s?(?:GB|MB|GiB|MiB)\b)",
    re.IGNORECASE,
)
# DCGM's entity groups (dcgmlib/dcgm_fields.h dcgm_field_entity_group_t; names as
# DcgmFieldsGetEntityGroupString prints them)
ENTITY_GROUPS = {
    0: "None",
    1: "GPU",
    2: "vGPU",
    3: "Switch",
    4: "GPU_I",
    5: "GPU_CI",
    6: "LINK",
    7: "CPU",
    8: "CPU_CORE",
    9: "ConnectX",
}


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
    status: str | None  # the test as a whole (DCGM's own, else the worst result under it)
    gpus: tuple[DcgmGpuResult, ...] = ()
    messages: tuple[str, ...] = ()  # warnings / errors that name no GPU (the test's own)
    error_codes: tuple[int, ...] = ()  # DCGM error ids of those

    @property
    def failing_gpus(self) -> tuple[int, ...]:
        return tuple(gpu.gpu for gpu in self.gpus if gpu.status == "fail")

    @property
    def whole_node(self) -> bool:
        """The test failed and names no failing GPU: the node failed it as a whole."""
        return self.status == "fail" and not self.failing_gpus


@dataclass(frozen=True, slots=True)
class DcgmDiagResult:
    source: str  # "json" or "text"
    dcgm_version: str | None
    driver_version: str | None
    tests: tuple[DcgmTest, ...]
    problems: tuple[str, ...] = ()
    level: int | None = None  # the run level the output states (a "dcgmi diag -r N" line)
    not_run: tuple[NotRun, ...] = ()  # what did not run and why (DCGM_ST_* in code)

    @property
    def failures(self) -> tuple[tuple[str, DcgmGpuResult], ...]:
        """``(test name, GPU result)`` for every GPU a test failed."""
        return tuple(
            (test.name, gpu) for test in self.tests for gpu in test.gpus if gpu.status == "fail"
        )

    @property
    def failing_gpus(self) -> tuple[int, ...]:
        return tuple(sorted({gpu.gpu for _, gpu in self.failures}))

    @property
    def failed_tests(self) -> tuple[str, ...]:
        """Every test DCGM failed, with or without a failing GPU under it."""
        return tuple(test.name for test in self.tests if test.status == "fail")

    @property
    def whole_node_failures(self) -> tuple[DcgmTest, ...]:
        """Tests that failed without naming a failing GPU: the whole node failed them."""
        return tuple(test for test in self.tests if test.whole_node)

    @property
    def skipped_tests(self) -> tuple[str, ...]:
        return tuple(test.name for test in self.tests if test.status == "skip")

    @property
    def skipped_all(self) -> bool:
        """Tests were read and DCGM skipped (or did not run) every one of them."""
        return bool(self.tests) and all(test.status == "skip" for test in self.tests)


def status_word(word: Any) -> str | None:
    """DCGM's status word as one of :data:`DIAG_STATUSES`; ``None`` for a word it never prints."""
    if not isinstance(word, str):
        return None
    return _WORDS.get(" ".join(word.split()).lower())


def worst(statuses: list[str]) -> str | None:
    return max(statuses, key=_RANK.__getitem__) if statuses else None


def named_gpus(text: str) -> tuple[int, ...]:
    """The GPUs a DCGM message names, in any of DCGM's spellings, in order, once each."""
    found: list[int] = []
    for match in _NAMED_GPU.finditer(text):
        for part in match.group("ids").split(","):
            gpu = int(part)
            if gpu not in found:
                found.append(gpu)
    return tuple(found)


def clip(value: Any, limit: int = 40) -> str:
    """``value`` as text of at most ``limit`` characters (cut with ``...``): what a problem
    quotes of a value it refuses."""
    text = str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class DcgmTestBuilder:
    """One test's results as they are read (JSON or text), frozen into a :class:`DcgmTest`."""

    def __init__(self, name: str, category: str | None) -> None:
        self.name = name
        self.category = category
        self.gpu_status: dict[int, str] = {}
        self.gpu_said: dict[int, list[tuple[str, int | None]]] = {}
        self.own_said: list[tuple[str, int | None]] = []
        self.statuses: list[str] = []  # results that are the test's own or of other entities
        self.summary: str | None = None

    def gpu(self, gpu: int, status: str | None, said: list[tuple[str, int | None]]) -> None:
        if status is not None:
            before = self.gpu_status.get(gpu)
            self.gpu_status[gpu] = (worst([before, status]) or status) if before else status
        self.gpu_said.setdefault(gpu, []).extend(said)

    def own(self, status: str | None, said: list[tuple[str, int | None]]) -> None:
        """A result or message that is the test's: GPUs it names get it, else the test."""
        if status is not None:
            self.statuses.append(status)
        for text, code in said:
            gpus = named_gpus(text)
            if gpus:
                for gpu in gpus:
                    self.gpu_said.setdefault(gpu, []).append((text, code))
            else:
                self.own_said.append((text, code))

    def other(self, label: str, status: str, said: list[tuple[str, int | None]]) -> None:
        """A non-GPU entity's result (CPU, NvSwitch): the test's when it is not a pass."""
        if status in ("pass", "skip") and not said:
            return
        self.statuses.append(status)
        if status in ("fail", "warn"):
            self.own_said.append((f"{label}: {status.capitalize()}", None))
        self.own_said.extend((f"{label}: {text}", code) for text, code in said)

    def freeze(self) -> DcgmTest:
        own_status = worst(self.statuses)  # the test's own results and non-GPU entities'
        status = self.summary or worst(
            [s for s in (own_status,) if s is not None] + list(self.gpu_status.values())
        )
        if own_status == "fail":
            status = "fail"  # a failing result of the test's own or of a CPU/NvSwitch
        if status is None:
            status = "skip"  # no result at all: a test DCGM did not run
        seen = {text for said in self.gpu_said.values() for text, _ in said}
        results = []
        for gpu in sorted(set(self.gpu_status) | set(self.gpu_said)):
            said = list(dict.fromkeys(self.gpu_said.get(gpu, [])))
            results.append(
                DcgmGpuResult(
                    gpu,
                    self.gpu_status.get(gpu) or own_status or status,
                    tuple(text for text, _ in said if text),
                    tuple(code for _, code in said if code is not None),
                )
            )
        own = [item for item in dict.fromkeys(self.own_said) if item[0] not in seen]
        return DcgmTest(
            self.name,
            self.category,
            status,
            tuple(results),
            tuple(text for text, _ in own if text),
            tuple(code for _, code in own if code is not None),
        )


_INTERNAL = re.compile(r"\binternal error\b", re.IGNORECASE)
DCGM_FR_INTERNAL = 44  # dcgmlib/dcgm_errors.h: "There was an internal error during the test"


def nothing_ran(tests: list[DcgmTest], not_run: list[NotRun], problems: list[str]) -> list[NotRun]:
    """NotRuns the tests imply: a run with no test result, a run where DCGM skipped every test,
    and each test DCGM reports an internal error in (the test did not run to a verdict: its
    status stays as DCGM printed it)."""
    found: list[NotRun] = []
    if not tests and not not_run:
        reason = "; ".join(problems[:3])
        found.append(
            NotRun(RUN, "the output holds no test result" + (f" ({reason})" if reason else ""))
        )
    if tests and all(test.status == "skip" for test in tests):
        names = ", ".join(test.name for test in tests[:6]) + (", ..." if len(tests) > 6 else "")
        found.append(NotRun(RUN, f"DCGM skipped every test ({names}): nothing was checked"))
    for test in tests:
        said = list(test.messages) + [m for gpu in test.gpus for m in gpu.messages]
        codes = list(test.error_codes) + [c for gpu in test.gpus for c in gpu.error_codes]
        internal = next((m for m in said if _INTERNAL.search(m)), None)
        if internal is not None or DCGM_FR_INTERNAL in codes:
            why = internal or f"error id {DCGM_FR_INTERNAL} (DCGM_FR_INTERNAL)"
            found.append(
                NotRun(f"{RUN} test {test.name!r}", f"DCGM reported an internal error: {why}")
            )
    return found
