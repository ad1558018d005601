"""What ``dcgmi`` prints instead of a diagnostic, and the run level: DCGM's run errors as
:class:`NotRun` with their ``DCGM_ST_*`` code, and the ``-r N`` level of a ``dcgmi diag``
command line. Functions over the text handed in: no I/O.

A run error is a :class:`NotRun` of ``dcgmi diag`` (what the result's ``not_run`` means is said
in ``dcgm``): ``Error: Unable to complete diagnostic for group 2. Return: (-34) ...``, a JSON
``runtime_error``, with ``code`` the ``DCGM_ST_*`` name when the output gives the name, or a
return number or ``errorString`` text this module knows (:data:`DCGM_RETURNS`).

The level: ``dcgmi diag`` prints no run level in its table or JSON (``dcgmi/Diag.cpp``), so
``level`` is read only from a ``dcgmi diag -r N`` / ``--run N`` command line in the text
handed in (a pasted prompt, a wrapper's log line; ``quick``/``short``, ``medium``, ``long`` and
``xlong`` are DCGM's aliases for 1-4); ``None`` otherwise, never inferred from the tests that
ran.
"""

from __future__ import annotations

import re

from gpufleet.parsing.health.dcgm import BANNER, RUN
from gpufleet.parsing.health.not_run import NotRun

__all__ = ["DCGM_RETURNS", "TEST_FAILED", "error_code", "run_error", "run_errors", "run_level"]

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
TEST_FAILED = ("DCGM_ST_NVVS_ERROR", "DCGM_ST_NVVS_ISOLATE_ERROR")
_RETURN_NUMBER = re.compile(r"Return:\s*\(\s*(-?\d{1,3})\s*\)")
_ST_NAME = re.compile(r"\bDCGM_ST_[A-Z0-9_]+\b")
_MIG_ERROR = re.compile(r"MIG configuration is incompatible with the diagnostic", re.IGNORECASE)
_LEVEL = re.compile(
    r"\bdcgmi\b[^\n]*?\bdiag\b[^\n]*?(?:\s-r|\s--run)(?:\s+|=)?[\"']?(?P<level>[^\s\"',;]+)"
)

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


def run_error(message: str, problems: list[str] | None = None) -> NotRun:
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
            error = run_error(message, problems)
            if not (line.startswith("Aborting") and error.code in TEST_FAILED):
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
