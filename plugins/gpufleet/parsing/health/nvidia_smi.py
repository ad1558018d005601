"""Parse ``nvidia-smi -q -d ROW_REMAPPER,ECC,PAGE_RETIREMENT`` (or a full ``nvidia-smi -q``):
per GPU, the row-remapper state, the ECC error counters and the retired pages; and what of it is
not in the output.

Design: docs/design/gpu-health-parsers.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpufleet.errors import ParseError
from gpufleet.parsing.health.not_run import NotRun

__all__ = [
    "DEFAULT_SECTIONS",
    "SECTION_TITLES",
    "GpuMemoryHealth",
    "NvidiaSmiMemoryReport",
    "nvml_failure",
    "parse_nvidia_smi_remap_ecc",
]

SECTION_TITLES = {
    "ECC": "ECC Errors",
    "ROW_REMAPPER": "Remapped Rows",
    "PAGE_RETIREMENT": "Retired Pages",
}  # nvidia-smi -q -d NAME -> the section it prints per GPU
DEFAULT_SECTIONS = ("ROW_REMAPPER", "ECC", "PAGE_RETIREMENT")  # what the health check asks
_ATTACHED = re.compile(r"^Attached GPUs\s*:\s*(?P<n>\d{1,4})\s*$")
_FAILURES = (
    re.compile(r"^No devices were found\.?$"),
    re.compile(r"^NVIDIA-SMI has failed\b.*$"),
    # no NVML library to load (a container without the driver's libraries mounted):
    # NVIDIA/nvidia-docker#1163, projectbluefin/dakota#373
    re.compile(r"^NVIDIA-SMI couldn.t find libnvidia-ml\.so\b.*$"),
    re.compile(r"^Failed to initialize NVML\b.*$"),
    re.compile(r"^GPU access blocked by the operating system\.?$"),
    re.compile(
        r"^Unable to (?:determine|detect) the device handle for GPU\s*"
        r"(?P<bus>[0-9A-Fa-f]{3,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*:\s*.*$",
        re.I,
    ),
)

_GPU = re.compile(r"^GPU\s+(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")
_PAIR = re.compile(r"^(?P<key>[^:]+?)\s*:\s*(?P<value>.*?)\s*$")
_BANKS = re.compile(r"^(?P<n>\S+)\s+bank\(s\)$")
_MAX_PROBLEMS = 16


@dataclass(frozen=True, slots=True)
class GpuMemoryHealth:
    pci_bus: str  # as nvidia-smi writes it: "00000000:3B:00.0"
    remapped_correctable: int | None = None
    remapped_uncorrectable: int | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    bank_histogram: dict[str, int | None] = field(default_factory=dict)  # "max", "high", ...
    ecc_volatile: dict[str, int | None] = field(default_factory=dict)
    ecc_aggregate: dict[str, int | None] = field(default_factory=dict)
    retired_pages_sbe: int | None = None  # pages retired for multiple single-bit ECC errors
    retired_pages_dbe: int | None = None  # pages retired for a double-bit ECC error
    retirement_pending: bool | None = None  # "Pending Page Blacklist : Yes": reset to retire
    ecc_flags: dict[str, bool | None] = field(default_factory=dict)  # "sram_threshold_exceeded"


@dataclass(frozen=True, slots=True)
class NvidiaSmiMemoryReport:
    gpus: tuple[GpuMemoryHealth, ...]
    problems: tuple[str, ...] = ()
    not_run: tuple[NotRun, ...] = ()  # sections asked for and not there, a cut output, NVML


def nvml_failure(line: str, tool: str) -> NotRun | None:
    """The :class:`NotRun` that one of NVML's or the driver's failure messages says (``No
    devices were found``, ``Unable to determine the device handle for GPU ...``), or ``None``
    when ``line`` is none of them. ``tool`` names what did not run (``nvidia-smi -q``)."""
    for pattern in _FAILURES:
        found = pattern.match(line.strip())
        if found:
            bus = found.groupdict().get("bus")
            return NotRun(f"{tool} of GPU {bus}" if bus else tool, line.strip()[:200])
    return None


def snake(text: str) -> str:
    """A label nvidia-smi prints, as a key (``Remapping Failure`` -> ``remapping_failure``)."""
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


def count(value: str, what: str, problems: list[str]) -> tuple[bool, int | None]:
    """``(ok, count)`` of a counter nvidia-smi prints: ``N/A`` is ``(True, None)``; a value that
    is no non-negative integer (``-3``, ``1.5``, ``lots``) is a problem, named by ``what``."""
    if value.upper() == "N/A":
        return True, None
    if value.isdigit() and value.isascii() and len(value) <= 20:
        return True, int(value)
    problems.append(f"{what} {value[:24]!r} is not a non-negative integer")
    return False, None


def _flag(value: str, what: str, problems: list[str]) -> tuple[bool, bool | None]:
    word = value.lower()
    if word in ("yes", "no"):
        return True, word == "yes"
    if word == "n/a":
        return True, None
    problems.append(f"{what} {value[:24]!r} is not Yes or No")
    return False, None


class _Gpu:
    def __init__(self, bus: str) -> None:
        self.bus = bus
        self.fields: dict[str, object] = {}
        self.histogram: dict[str, int | None] = {}
        self.ecc: dict[str, dict[str, int | None]] = {"volatile": {}, "aggregate": {}}
        self.flags: dict[str, bool | None] = {}
        self.sections: dict[str, str] = {}  # lower-case title -> "block" or "n/a"
        self.seen: set[str] = set()  # the lines read, as "section / key"

    def freeze(self) -> GpuMemoryHealth:
        return GpuMemoryHealth(
            self.bus,
            bank_histogram=self.histogram,
            ecc_volatile=self.ecc["volatile"],
            ecc_aggregate=self.ecc["aggregate"],
            ecc_flags=self.flags,
            **self.fields,  # type: ignore[arg-type]
        )


_REMAP_COUNTS = {
    "correctable error": "remapped_correctable",
    "uncorrectable error": "remapped_uncorrectable",
}
_REMAP_FLAGS = {"pending": "remap_pending", "remapping failure occurred": "remap_failure"}
_RETIRED_COUNTS = {
    "single bit ecc": "retired_pages_sbe",
    "multiple single bit retirement": "retired_pages_sbe",
    "double bit ecc": "retired_pages_dbe",
    "double bit retirement": "retired_pages_dbe",
}
_RETIRED_PENDING = ("pending page blacklist", "pending", "pending page retirement")


def _take(gpu: _Gpu, path: list[str], key: str, value: str, problems: list[str]) -> None:
    """File one ``key : value`` line found under the headers ``path`` (lower case)."""
    what = f"GPU {gpu.bus}: {' / '.join([*path, key.lower()])}"
    low = " ".join(key.lower().split())
    if path:
        gpu.seen.add(f"{path[0]} / {low}")
    if not path and low in _TITLES:
        if value.upper() != "N/A":
            problems.append(f"{what} {value[:24]!r} is neither a section nor N/A")
        gpu.sections[low] = "n/a"
        return
    if path[:1] == ["retired pages"]:
        _retired(gpu, path[1:], low, value, what, problems)
    elif path[:1] == ["remapped rows"]:
        if path[1:] == ["bank remap availability histogram"]:
            banks = _BANKS.match(value)
            ok, number = count(banks.group("n") if banks else value, what, problems)
            if ok:
                gpu.histogram[snake(key)] = number
        elif len(path) == 1 and low in _REMAP_COUNTS:
            ok, number = count(value, what, problems)
            if ok:
                gpu.fields[_REMAP_COUNTS[low]] = number
        elif len(path) == 1 and low in _REMAP_FLAGS:
            ok, flag = _flag(value, what, problems)
            if ok:
                gpu.fields[_REMAP_FLAGS[low]] = flag
    elif path[:1] == ["ecc errors"] and len(path) >= 2 and path[1] in gpu.ecc:
        name = snake(" ".join([*path[2:], key]))
        if value.lower() in ("yes", "no"):
            gpu.flags[name] = value.lower() == "yes"
            return
        ok, number = count(value, what, problems)
        if ok:
            gpu.ecc[path[1]][name] = number


def _retired(gpu: _Gpu, sub: list[str], low: str, value: str, what: str, problems: list) -> None:
    """A ``Retired Pages`` line: its counts (``Single Bit ECC : 2``, or ``Retired Count`` under
    ``Multiple Single Bit Retirement``) and its pending flag."""
    label = low if not sub else sub[0] if low == "retired count" and len(sub) == 1 else None
    if label in _RETIRED_COUNTS:
        field_name = _RETIRED_COUNTS[label]
        ok, number = count(value, what, problems)
        if ok:
            gpu.fields[field_name] = number
        gpu.seen.add(f"retired pages / {field_name}")
    elif not sub and low in _RETIRED_PENDING:
        ok, flag = _flag(value, what, problems)
        if ok:
            gpu.fields["retirement_pending"] = flag
        gpu.seen.add("retired pages / retirement_pending")


_TITLES = {title.lower(): name for name, title in SECTION_TITLES.items()}
# the lines a section ends with, without which it was cut off (any one of each tuple)
_REQUIRED = {
    "remapped rows": (("pending",), ("remapping failure occurred",)),
    "retired pages": (("retired_pages_dbe",), ("retirement_pending",)),
}


def _missing(gpu: _Gpu, asked: tuple[str, ...]) -> list[NotRun]:
    """What of the sections ``asked`` (``-d`` names) ``gpu``'s block does not hold whole."""
    out: list[NotRun] = []
    remapper = gpu.sections.get("remapped rows") == "block"
    for name in (name for name in SECTION_TITLES if name in asked):  # nvidia-smi's order
        title = SECTION_TITLES[name]
        low = title.lower()
        what = f"{title} of GPU {gpu.bus}"
        state = gpu.sections.get(low)
        if state is None:
            if name == "PAGE_RETIREMENT" and remapper:
                continue  # Ampere and later remap rows; retired pages are N/A there
            out.append(NotRun(what, "not in the output"))
        elif state == "block" and low == "ecc errors":
            why = _ecc_cut(gpu)
            if why:
                out.append(NotRun(what, why))
        elif state == "block" and low in _REQUIRED:
            for options in _REQUIRED[low]:
                if not any(f"{low} / {key}" in gpu.seen for key in options):
                    out.append(NotRun(what, f"cut off: no {options[0]!r} line"))
                    break
    return out


def _ecc_cut(gpu: _Gpu) -> str | None:
    """Why ``ECC Errors`` is not whole: ``Volatile`` and ``Aggregate`` must each end in the
    last counter of a known layout (``DRAM Uncorrectable``; pre-Ampere ``Double Bit / Total``)."""
    for scope in ("volatile", "aggregate"):
        counters = gpu.ecc[scope]
        if not counters:
            return f"cut off: no {scope.title()} counters"
        last = (
            "double_bit_total"
            if any(k.startswith("single_bit") for k in counters)
            else ("dram_uncorrectable")
        )
        if last not in counters:
            return (
                f"{scope.title()} ends without {last!r}: cut off, or a layout this parser "
                "does not know"
            )
    return None


def parse_nvidia_smi_remap_ecc(
    text: str, *, sections: tuple[str, ...] = DEFAULT_SECTIONS
) -> NvidiaSmiMemoryReport:
    """Row-remapper state, ECC counters and retired pages per GPU of ``nvidia-smi -q`` text,
    and (``not_run``) each of ``sections`` (the ``-d`` names asked for: ``ROW_REMAPPER``,
    ``ECC``, ``PAGE_RETIREMENT``) that a GPU's block lacks or that was cut off."""
    unknown = [name for name in sections if name not in SECTION_TITLES]
    if unknown:
        raise ValueError(
            f"unknown nvidia-smi -d section(s) {unknown} (known: {', '.join(SECTION_TITLES)})"
        )
    if isinstance(text, bytes | bytearray):
        text = text.decode("utf-8", errors="replace")
    gpus: list[_Gpu] = []
    problems: list[str] = []
    not_run: list[NotRun] = []
    attached: int | None = None
    current: _Gpu | None = None
    headers: list[tuple[int, str]] = []  # (indent, lower-case name) of open sections
    for line in text.splitlines():
        if not line.strip():
            continue
        stripped = line.strip()
        found = _GPU.match(stripped)
        if found:
            current = _Gpu(found.group("bus"))
            gpus.append(current)
            headers = []
            continue
        failure = nvml_failure(stripped, "nvidia-smi -q")
        if failure is not None:
            not_run.append(failure)
            continue
        if current is None:
            count_line = _ATTACHED.match(stripped)
            if count_line:
                attached = int(count_line.group("n"))
            continue
        indent = len(line) - len(line.lstrip())
        while headers and headers[-1][0] >= indent:
            headers.pop()
        pair = _PAIR.match(stripped)
        if pair is None or not pair.group("value"):
            name = " ".join(stripped.rstrip(":").split()).lower()
            if not headers and name in _TITLES:
                current.sections[name] = "block"
            headers.append((indent, name))
            continue
        path = [name for _, name in headers]
        _take(current, path, pair.group("key").strip(), pair.group("value"), problems)
    if not gpus and not not_run:
        raise ParseError(
            "no GPU found (expected nvidia-smi -q output with 'GPU 00000000:3B:00.0' headers, "
            "or one of NVML's messages such as 'No devices were found')"
        )
    if attached is not None and len(gpus) < attached:
        not_run.append(
            NotRun(
                "nvidia-smi -q",
                f"cut off: 'Attached GPUs : {attached}' but {len(gpus)} GPU block(s) in the output",
            )
        )
    for gpu in gpus:
        not_run += _missing(gpu, tuple(sections))
    return NvidiaSmiMemoryReport(
        tuple(g.freeze() for g in gpus),
        tuple(dict.fromkeys(problems[:_MAX_PROBLEMS])),
        tuple(dict.fromkeys(not_run)),
    )
