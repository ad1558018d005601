"""Parse ``nvidia-smi -q -d ROW_REMAPPER,ECC`` (or a full ``nvidia-smi -q``): per GPU, the
row-remapper state and the ECC error counters.

A function over the text handed in: no I/O. ``nvidia-smi -q`` prints an indented tree; a GPU
starts at ``GPU 00000000:3B:00.0``. Read, per GPU:

- ``Remapped Rows``: ``Correctable Error``, ``Uncorrectable Error`` (rows remapped for each
  cause), ``Pending : Yes/No``, ``Remapping Failure Occurred : Yes/No`` and the ``Bank Remap
  Availability Histogram`` (``Max : 639 bank(s)`` ...);
- ``ECC Errors`` -> ``Volatile`` / ``Aggregate``: each counter under its own name in snake case
  (``sram_correctable``, ``sram_uncorrectable``, ``dram_correctable``, ``dram_uncorrectable``,
  newer drivers' ``sram_uncorrectable_parity`` ...); the older layout's ``Single Bit`` /
  ``Double Bit`` blocks as ``single_bit_<location>`` / ``double_bit_<location>``
  (``single_bit_total``, ``double_bit_device_memory`` ...).

``N/A`` (not supported, or ECC disabled) is ``None``. A count that is not a non-negative
integer, or a flag other than ``Yes``/``No``, is refused into ``problems`` and left out. Text
without a ``GPU xxxxxxxx:xx:xx.x`` header is a :class:`ParseError`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpufleet.errors import ParseError

__all__ = ["GpuMemoryHealth", "NvidiaSmiMemoryReport", "parse_nvidia_smi_remap_ecc"]

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


@dataclass(frozen=True, slots=True)
class NvidiaSmiMemoryReport:
    gpus: tuple[GpuMemoryHealth, ...]
    problems: tuple[str, ...] = ()


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

    def freeze(self) -> GpuMemoryHealth:
        return GpuMemoryHealth(
            self.bus,
            bank_histogram=self.histogram,
            ecc_volatile=self.ecc["volatile"],
            ecc_aggregate=self.ecc["aggregate"],
            **self.fields,  # type: ignore[arg-type]
        )


_REMAP_COUNTS = {
    "correctable error": "remapped_correctable",
    "uncorrectable error": "remapped_uncorrectable",
}
_REMAP_FLAGS = {"pending": "remap_pending", "remapping failure occurred": "remap_failure"}


def _take(gpu: _Gpu, path: list[str], key: str, value: str, problems: list[str]) -> None:
    """File one ``key : value`` line found under the headers ``path`` (lower case)."""
    what = f"GPU {gpu.bus}: {' / '.join([*path, key.lower()])}"
    low = key.lower()
    if path[:1] == ["remapped rows"]:
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
        ok, number = count(value, what, problems)
        if ok:
            gpu.ecc[path[1]][name] = number


def parse_nvidia_smi_remap_ecc(text: str) -> NvidiaSmiMemoryReport:
    """Row-remapper state and ECC counters per GPU of ``nvidia-smi -q`` text."""
    if isinstance(text, bytes | bytearray):
        text = text.decode("utf-8", errors="replace")
    gpus: list[_Gpu] = []
    problems: list[str] = []
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
        if current is None:
            continue
        indent = len(line) - len(line.lstrip())
        while headers and headers[-1][0] >= indent:
            headers.pop()
        pair = _PAIR.match(stripped)
        if pair is None or not pair.group("value"):
            headers.append((indent, " ".join(stripped.rstrip(":").split()).lower()))
            continue
        path = [name for _, name in headers]
        _take(current, path, pair.group("key").strip(), pair.group("value"), problems)
    if not gpus:
        raise ParseError(
            "no GPU found (expected nvidia-smi -q output with 'GPU 00000000:3B:00.0' headers)"
        )
    return NvidiaSmiMemoryReport(
        tuple(g.freeze() for g in gpus), tuple(dict.fromkeys(problems[:_MAX_PROBLEMS]))
    )
