"""Parse ``dcgmi diag`` output: the ``-j`` JSON of DCGM 2.x to 4.x, the text table, and the
errors ``dcgmi`` prints instead of either. This module holds the result model both forms'
parsers share and the JSON parser; the text table's is ``dcgm_text``, and ``dcgm_diag``
(``parse_dcgm_diag``) tells the forms apart.

Functions over the text handed in: no I/O. The result names, per test, the status DCGM gave
each GPU (``pass``/``fail``/``warn``/``skip``), the messages and DCGM error codes (``error_id``,
a ``dcgmError_t`` / ``DCGM_FR_*`` number) attached to it, the test's own status and the messages
and codes of the test that name no GPU. A test DCGM failed keeps ``status == "fail"`` even when
no GPU result under it fails (DCGM 4.x prints ``pcie | Fail`` above ``GPU0: Pass`` rows when
the failure is the test's own, e.g. an internal error): the whole node failed it.

Beside the tests, ``not_run`` says what did not run and why (:class:`NotRun`): DCGM's run
errors (``Error: Unable to complete diagnostic for group 2. Return: (-34) ...``, a JSON
``runtime_error``), with ``code`` the ``DCGM_ST_*`` name when the output gives the name, a
return number or ``errorString`` text this module knows; an output cut short (JSON that does
not close, a table whose box does not close: the last thing read is named); an output with no
test result; a run where every test was skipped. Output that is only such an error is a result
with ``tests=()``; output that is not ``dcgmi diag``'s at all is a :class:`ParseError` that
quotes what it saw. What was refused is named in ``problems``.

The words read (NVIDIA/DCGM ``dcgmi/Diag.cpp`` ``HelperDisplayDiagResult`` and, up to 3.x,
``HelperDisplayGpuResults``): ``Pass``, ``Fail``, ``Warn``, ``Skip``, ``Not Run`` (a test DCGM
did not run: read as ``skip``), each alone, with `` - All`` or with `` - GPU: 0`` /
`` - GPUs: 0, 1``; DCGM 4.x's entity rows ``GPU0: Pass`` (``CPU0: Fail``...). Any other word
(``Warning``, ``OK``, ``Excellent``) is refused into ``problems``, never guessed.

JSON shapes read (keys as in NVIDIA/DCGM ``nvvs/include/NvvsJsonStrings.h``):

- DCGM 2.x/3.x: ``{"DCGM GPU Diagnostic": {"test_categories": [{"category", "tests": [{"name",
  "results": [{"gpu_ids" | "gpu_id", "status", "info", "warnings": [str | {"warning",
  "error_id", "error_category", "error_severity"}]}]}]}], "version", ...}}``; the Deployment
  tests' results carry no GPU id (``gpu_id`` only beside an error): such a result is the
  test's own;
- DCGM 4.x: the same nesting under ``"DCGM Diagnostic"``, results per entity
  (``"entity_group": "GPU", "entity_group_id": 1, "entity_id": N``), a ``test_summary``
  ``{"status", "warnings"}`` per test (its warnings hold every error of the test, the ones of
  no entity only there), ``entity_groups`` and ``metadata`` (``version``, ``Driver Version
  Detected``) at the top level; a test with neither results nor summary is one DCGM did not
  run (``HelperJsonAddResult`` leaves ``Not Run`` out): ``skip``;
- a run error: ``{"DCGM Diagnostic" | "DCGM GPU Diagnostic": {"version", "runtime_error"}}``
  (``Diag::HelperDisplayFailureMessage``); ``-i N`` iterations: ``{"iterations": [...],
  "Overall Result", "warning"}``;
- also a flat ``{"tests": [...]}`` with ``"errors": [{"error_id", "category", "severity",
  "msg"}]`` per result.

Results of entities other than GPUs (CPU, NvSwitch, ConnectX) are not GPU results: one that
fails or warns is the test's (its status and messages go to the test, so a failing CPU fails
the test). A GPU id that is not a non-negative integer or an error code that is not one is
refused into ``problems`` (the result it belongs to is not read).

The level: ``dcgmi diag`` prints no run level in its table or JSON (``dcgmi/Diag.cpp``), so
``level`` is read only from a ``dcgmi diag -r N`` / ``--run N`` command line in the text
handed in (a pasted prompt, a wrapper's log line; ``quick``/``short``, ``medium``, ``long`` and
``xlong`` are DCGM's aliases for 1-4); ``None`` otherwise, never inferred from the tests that
ran.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gpufleet.errors import ParseError
from gpufleet.parsing.health.not_run import NotRun
from gpufleet.parsing.json_text import json_documents

__all__ = [
    "DCGM_RETURNS",
    "DIAG_STATUSES",
    "DcgmDiagResult",
    "DcgmGpuResult",
    "DcgmTest",
    "named_gpus",
    "parse_dcgm_diag_json",
    "run_errors",
    "run_level",
    "status_word",
]

DIAG_STATUSES = ("pass", "fail", "warn", "skip")
# the words dcgmi prints (dcgmi/Diag.cpp HelperDisplayDiagResult), any case; "Not Run" is a
# test DCGM did not run: a skip
_WORDS = {"pass": "pass", "fail": "fail", "warn": "warn", "skip": "skip", "not run": "skip"}
_RANK = {"fail": 3, "warn": 2, "pass": 1, "skip": 0}
_ROOTS = ("DCGM GPU Diagnostic", "DCGM Diagnostic")
_MAX_PROBLEMS = 16
RUN = "dcgmi diag"
BANNER = "Successfully ran diagnostic for group."  # the line dcgmi prints above its table

# dcgmReturn_t values dcgmi prints as "Return: (-NN)", from NVIDIA/DCGM dcgmlib/dcgm_structs.h
# (the same numbers from 2.4 to 4.x): only the ones a diagnostic run can end with.
DCGM_RETURNS = {
    -1: "DCGM_ST_BADPARAM",
    -3: "DCGM_ST_GENERIC_ERROR",
    -6: "DCGM_ST_NOT_SUPPORTED",
    -7: "DCGM_ST_INIT_ERROR",
    -8: "DCGM_ST_NVML_ERROR",
    -11: "DCGM_ST_TIMEOUT",
    -17: "DCGM_ST_NO_PERMISSION",
    -18: "DCGM_ST_GPU_IS_LOST",
    -19: "DCGM_ST_RESET_REQUIRED",
    -21: "DCGM_ST_CONNECTION_NOT_VALID",
    -22: "DCGM_ST_GPU_NOT_SUPPORTED",
    -23: "DCGM_ST_GROUP_INCOMPATIBLE",
    -29: "DCGM_ST_REQUIRES_ROOT",
    -30: "DCGM_ST_NVVS_ERROR",
    -33: "DCGM_ST_MODULE_NOT_LOADED",
    -34: "DCGM_ST_IN_USE",
    -35: "DCGM_ST_GROUP_IS_EMPTY",
    -39: "DCGM_ST_DIAG_ALREADY_RUNNING",
    -40: "DCGM_ST_DIAG_BAD_JSON",
    -41: "DCGM_ST_DIAG_BAD_LAUNCH",
    -47: "DCGM_ST_CHILD_NOT_KILLED",
    -49: "DCGM_ST_INSUFFICIENT_RESOURCES",
    -50: "DCGM_ST_PLUGIN_EXCEPTION",
    -51: "DCGM_ST_NVVS_ISOLATE_ERROR",
    -52: "DCGM_ST_NVVS_BINARY_NOT_FOUND",
    -53: "DCGM_ST_NVVS_KILLED",
    -54: "DCGM_ST_PAUSED",
    -57: "DCGM_ST_NVML_DRIVER_TIMEOUT",
    -58: "DCGM_ST_NVVS_NO_AVAILABLE_TEST",
    -66: "DCGM_ST_DIAG_STOPPED",
}
# errorString() texts of those codes (NVIDIA/DCGM dcgmlib/src/dcgm_errors.c), lower case; dcgmi
# prints them after "Return: (-NN)" or alone ("Aborting ... due to failure: <text>")
_RETURN_TEXTS = {
    "the requested operation could not be completed because the affected resource is in use": (
        "DCGM_ST_IN_USE"
    ),
    "a diag instance is already running, cannot run a new diag until the current one finishes": (
        "DCGM_ST_DIAG_ALREADY_RUNNING"
    ),
    "dcgm gpu diagnostic returned an error": "DCGM_ST_NVVS_ERROR",
    "the dcgm diagnostic was killed by a signal": "DCGM_ST_NVVS_KILLED",
    "the hostengine and all modules are paused": "DCGM_ST_PAUSED",
    "host engine connection invalid/disconnected": "DCGM_ST_CONNECTION_NOT_VALID",
    "error while launching the gpu diagnostic.": "DCGM_ST_DIAG_BAD_LAUNCH",
    "the gpu diagnostic returned json that cannot be parsed.": "DCGM_ST_DIAG_BAD_JSON",
    "the dcgm diagnostic was stopped": "DCGM_ST_DIAG_STOPPED",
    "exception thrown from a diagnostic plugin": "DCGM_ST_PLUGIN_EXCEPTION",
    "timeout": "DCGM_ST_TIMEOUT",
}
# dcgmi's own fixed run errors (dcgmi/Diag.cpp RunDiagOnce, dcgmi/Command.cpp Connect): the
# start of the line and the dcgmReturn_t dcgmi returns with it (None: it depends)
_DCGMI_ERRORS = (
    ("Error: Unable to complete diagnostic", None),
    (
        "Error: Diagnostic can only be performed on a homogeneous group",
        "DCGM_ST_GROUP_INCOMPATIBLE",
    ),
    (
        "Error: Diagnostic could not be run because the Tesla recommended driver",
        "DCGM_ST_NOT_SUPPORTED",
    ),
    ("Error: Diagnostic could not be run while DCGM is paused", "DCGM_ST_PAUSED"),
    ("Error: Unsupported entities are indicated", "DCGM_ST_BADPARAM"),
    ("Error: Unable to install diagnostic signal handlers", None),
    ("Error: Unable to start an embedded host engine", None),
    ("Error: Unable to connect to host engine", "DCGM_ST_CONNECTION_NOT_VALID"),
    (
        "Error: unable to establish a connection to the specified host",
        "DCGM_ST_CONNECTION_NOT_VALID",
    ),
    ("Error: unable to initialize DCGM", "DCGM_ST_INIT_ERROR"),
    ("Error: Could not stop the launched diagnostic", None),
    ("Aborting the iterative runs of the diagnostic due to failure", None),
    # NVVS refuses an unknown test name before it runs any (nvvs/src/NvidiaValidationSuite.cpp:
    # 'requested test "x" was not found among possible test choices', 4.x "requested test(s): ")
    ("Error: requested test", None),
)
# what dcgmi returns when the diagnostic ran and a test failed (Diag::GetFailureResult)
_TEST_FAILED = ("DCGM_ST_NVVS_ERROR", "DCGM_ST_NVVS_ISOLATE_ERROR")
_RETURN_NUMBER = re.compile(r"Return:\s*\(\s*(-?\d{1,3})\s*\)")
_ST_NAME = re.compile(r"\bDCGM_ST_[A-Z0-9_]+\b")
_MIG_ERROR = re.compile(r"MIG configuration is incompatible with the diagnostic", re.IGNORECASE)
_LEVEL = re.compile(
    r"\bdcgmi\b[^\n]*?\bdiag\b[^\n]*?(?:\s-r|\s--run)(?:\s+|=)?[\"']?(?P<level>[^\s\"',;]+)"
)
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


def _count(value: Any) -> int | None:
    """A non-negative integer (DCGM writes ids as numbers or digit strings)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and value.strip().isdigit() and len(value.strip()) <= 9:
        return int(value.strip())
    return None


# --- run errors and the level --------------------------------------------------------------


def error_code(message: str) -> str | None:
    """The ``DCGM_ST_*`` name a run error gives: its name, its ``Return: (-NN)`` number or its
    ``errorString`` text; ``None`` when it gives none this module knows."""
    named = _ST_NAME.search(message)
    if named:
        return named.group(0)
    number = _RETURN_NUMBER.search(message)
    if number and int(number.group(1)) in DCGM_RETURNS:
        return DCGM_RETURNS[int(number.group(1))]
    lowered = " ".join(message.split()).lower()
    for text, code in _RETURN_TEXTS.items():
        if text in lowered and (text != "timeout" or lowered.rstrip(".").endswith("timeout")):
            return code
    for start, fixed in _DCGMI_ERRORS:
        if fixed and lowered.startswith(start.lower()):
            return fixed
    return None


def _run_error(message: str, problems: list[str] | None = None) -> NotRun:
    message = " ".join(message.split())
    code = error_code(message)
    number = _RETURN_NUMBER.search(message)
    if code is None and number and problems is not None:
        problems.append(
            f"dcgmi diag returned {number.group(1)}, a dcgmReturn_t this parser does not map "
            "(see dcgmlib/dcgm_structs.h)"
        )
    return NotRun(RUN, message, code)


def run_errors(text: str, problems: list[str] | None = None) -> list[NotRun]:
    """The run errors ``dcgmi diag`` printed in ``text`` instead of results: its ``Error: ...``
    lines (continued by the ``Return: ...`` or system-error line after them), a ``DCGM_ST_*``
    name, a MIG configuration refusal. Each is a :class:`NotRun` of ``dcgmi diag``."""
    found: list[NotRun] = []
    lines = text.splitlines()
    # a bare "Error: <system error>" (3.x prints NVVS's system error so) is DCGM's when it speaks
    # of DCGM's parts or the text ran dcgmi diag; "Error: file not found" alone is not
    dcgm_said = bool(_DCGM_WORDS.search(text)) or bool(_LEVEL.search(text)) or "dcgmi" in text
    index = 0
    while index < len(lines):
        line = lines[index].strip()
        index += 1
        known = any(line.lower().startswith(start.lower()) for start, _ in _DCGMI_ERRORS)
        if known or (line.startswith("Error: ") and (_RETURN_NUMBER.search(line) or dcgm_said)):
            message = line
            # dcgmi ends the "Unable to complete" line with a newline before the system errors
            while index < len(lines) and lines[index].strip() and _continues(lines[index]):
                message += " " + lines[index].strip()
                index += 1
            error = _run_error(message, problems)
            if not (line.startswith("Aborting") and error.code in _TEST_FAILED):
                found.append(error)  # an aborted -i N run that failed a test is no NotRun
        elif _MIG_ERROR.search(line):
            # an NVVS system error (nvvs/src/NvidiaValidationSuite.cpp): it prints no return code
            found.append(NotRun(RUN, line, None))
        elif (
            (named := _ST_NAME.search(line))
            and named.group(0) != "DCGM_ST_OK"
            and not line.startswith(("|", "{", '"'))
        ):
            found.append(NotRun(RUN, line, named.group(0)))
    return found


_DCGM_WORDS = re.compile(r"\b(?:DCGM|NVVS|nvvs|diagnostic|plugins?|host ?engine)\b", re.IGNORECASE)


def _continues(line: str) -> bool:
    """A line that goes on a dcgmi error message (not a new message, table or JSON)."""
    stripped = line.strip()
    if stripped.startswith(BANNER) or _MIG_ERROR.search(stripped):
        return False  # the system errors after "Return: (-NN)" are "Error: ..." lines: kept
    return not stripped.startswith(("|", "+", "{", "}", "$", "#")) and not any(
        stripped.lower().startswith(start.lower()) for start, _ in _DCGMI_ERRORS
    )


# dcgmi diag -r takes these names for the levels ("The names quick and short, medium, long, and
# xlong are aliases for levels 1 through 4": the dcgmi diag reference, docs.nvidia.com/datacenter/
# dcgm/latest/reference/command-line-reference/dcgmi/dcgmi-diag.html)
_LEVEL_NAMES = {"quick": 1, "short": 1, "medium": 2, "long": 3, "xlong": 4}


def run_level(text: str, problems: list[str]) -> int | None:
    """The level of a ``dcgmi diag -r N`` / ``--run N`` command line in ``text`` (1-4, or DCGM's
    names for them: ``short``, ``long``...); ``None`` when there is none, it names tests instead of
    a level, or two lines disagree."""
    levels = {m.group("level").lower() for m in _LEVEL.finditer(text)}
    numbers = {_LEVEL_NAMES.get(v, int(v) if v.isdigit() else 0) for v in levels} & {1, 2, 3, 4}
    if len(numbers) > 1:
        problems.append(
            f"several dcgmi diag run levels in the output ({', '.join(map(str, sorted(numbers)))})"
            ": no level read"
        )
        return None
    return numbers.pop() if numbers else None


# --- JSON ----------------------------------------------------------------------------------


def _entity(result: dict[str, Any], where: str, problems: list[str]) -> tuple[str, Any] | None:
    """What a result is about: ``("gpu", [ids])``, ``("other", "CPU 0")`` for a non-GPU entity,
    ``("none", None)`` for the test's own result (no id at all); ``None`` when refused."""
    if "entity_group" in result or "entity_id" in result or "entity_group_id" in result:
        group = result.get("entity_group")
        group_id = result.get("entity_group_id")
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
            self.gpu_status[gpu] = worst([before, status]) if before else status  # type: ignore[list-item]
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
            stopped = _run_error(document["warning"], problems)
            if stopped.code not in _TEST_FAILED:
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
            not_run.append(_run_error(error, problems))
        tests += _tests_of(root, problems)
        metadata = document.get("metadata") if isinstance(document.get("metadata"), dict) else {}
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
        problems=tuple(dict.fromkeys(problems[:_MAX_PROBLEMS])),
        level=level,
        not_run=tuple(dict.fromkeys(not_run)),
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


def looks_like_json(text: str) -> bool:
    """Whether ``text`` holds a ``dcgmi diag -j`` document, or the start of one."""
    if not re.search(r"^\s*\{", text, re.MULTILINE):
        return False
    return any(_diag_root(d) for d in json_documents(text)) or bool(_JSON_SIGN.search(text))
