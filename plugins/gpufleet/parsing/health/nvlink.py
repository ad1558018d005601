"""Parse ``nvidia-smi nvlink -e`` (``--errorcounters``): per GPU, per NVLink, the error counters.

A function over the text handed in: no I/O. A GPU starts at its header line
``GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)``; under it each counter is a line
``Link 0: Replay Errors: 0``. Counters are filed under a short name:

- current drivers: ``Replay Errors`` -> ``replay``, ``Recovery Errors`` -> ``recovery``,
  ``CRC Errors`` -> ``crc``;
- older drivers: ``Replay Error Counter`` -> ``replay``, ``Recovery Error Counter`` ->
  ``recovery``, ``Data CRC Error Counter`` -> ``crc_data``, ``Flit CRC Error Counter`` ->
  ``crc_flit``;
- any other counter under its own name in snake case.

``N/A`` as a counter's value is ``None``. A whole link shown as ``Link 3: <inactive>`` is
``inactive``, ``Link 3: N/A`` is ``not_supported``; neither has counters. A count that is not a
non-negative integer is refused into ``problems`` and left out. Text without a ``GPU N:`` header
is a :class:`ParseError`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpufleet.errors import ParseError
from gpufleet.parsing.health.nvidia_smi import count, snake

__all__ = ["NvlinkErrorReport", "NvlinkGpuErrors", "NvlinkLinkErrors", "parse_nvlink_errors"]

_GPU = re.compile(
    r"^GPU\s+(?P<index>\d{1,4}):\s*(?P<name>.*?)\s*(?:\(UUID:\s*(?P<uuid>[^)\s]+)\s*\))?\s*$"
)
_LINK = re.compile(r"^Link\s+(?P<link>\d{1,3}):\s*(?P<rest>.*?)\s*$")
_COUNTER = re.compile(r"^(?P<key>[^:]+?)\s*:\s*(?P<value>.*?)$")
_NAMES = {
    "replay errors": "replay",
    "replay error counter": "replay",
    "recovery errors": "recovery",
    "recovery error counter": "recovery",
    "crc errors": "crc",
    "data crc error counter": "crc_data",
    "flit crc error counter": "crc_flit",
}
_MAX_PROBLEMS = 16


@dataclass(frozen=True, slots=True)
class NvlinkLinkErrors:
    link: int
    counters: dict[str, int | None] = field(default_factory=dict)  # "replay", "crc", ...
    inactive: bool = False  # "Link N: <inactive>"
    not_supported: bool = False  # "Link N: N/A"


@dataclass(frozen=True, slots=True)
class NvlinkGpuErrors:
    index: int  # nvidia-smi's GPU index, as in "GPU 0:"
    name: str | None
    uuid: str | None
    links: tuple[NvlinkLinkErrors, ...] = ()


@dataclass(frozen=True, slots=True)
class NvlinkErrorReport:
    gpus: tuple[NvlinkGpuErrors, ...]
    problems: tuple[str, ...] = ()


class _Gpu:
    def __init__(self, index: int, name: str | None, uuid: str | None) -> None:
        self.index, self.name, self.uuid = index, name, uuid
        self.links: dict[int, dict[str, object]] = {}

    def link(self, number: int) -> dict[str, object]:
        return self.links.setdefault(number, {"counters": {}})

    def freeze(self) -> NvlinkGpuErrors:
        return NvlinkGpuErrors(
            self.index,
            self.name,
            self.uuid,
            tuple(NvlinkLinkErrors(n, **fields) for n, fields in self.links.items()),  # type: ignore[arg-type]
        )


def _take(gpu: _Gpu, number: int, rest: str, problems: list[str]) -> None:
    link = gpu.link(number)
    if rest.lower() == "<inactive>":
        link["inactive"] = True
        return
    if rest.upper() == "N/A":
        link["not_supported"] = True
        return
    pair = _COUNTER.match(rest)
    if pair is None:
        problems.append(f"GPU {gpu.index}: link {number}: {rest[:40]!r} is no counter")
        return
    key = " ".join(pair.group("key").split())
    name = _NAMES.get(key.lower(), snake(key))
    counters: dict[str, int | None] = link["counters"]  # type: ignore[assignment]
    ok, value = count(
        pair.group("value").strip(), f"GPU {gpu.index}: link {number}: {key}", problems
    )
    if ok:
        counters[name] = value


def parse_nvlink_errors(text: str) -> NvlinkErrorReport:
    """NVLink error counters per GPU and link of ``nvidia-smi nvlink -e`` text."""
    if isinstance(text, bytes | bytearray):
        text = text.decode("utf-8", errors="replace")
    gpus: list[_Gpu] = []
    problems: list[str] = []
    current: _Gpu | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        header = _GPU.match(stripped)
        if header:
            current = _Gpu(
                int(header.group("index")), header.group("name") or None, header.group("uuid")
            )
            gpus.append(current)
            continue
        found = _LINK.match(stripped)
        if found and current is not None:
            _take(current, int(found.group("link")), found.group("rest"), problems)
    if not gpus:
        raise ParseError(
            "no GPU found (expected nvidia-smi nvlink -e output with "
            "'GPU 0: <name> (UUID: GPU-...)' headers)"
        )
    return NvlinkErrorReport(
        tuple(g.freeze() for g in gpus), tuple(dict.fromkeys(problems[:_MAX_PROBLEMS]))
    )
