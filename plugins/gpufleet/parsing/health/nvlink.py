"""Parse ``nvidia-smi nvlink -e`` (``--errorcounters``) and ``nvidia-smi nvlink -s``
(``--status``): per GPU, per NVLink, the error counters and the link's state.

Design: docs/design/gpu-health-parsers.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpufleet.errors import ParseError
from gpufleet.parsing.health.not_run import NotRun
from gpufleet.parsing.health.nvidia_smi import count, nvml_failure, snake

__all__ = [
    "LINK_STATES",
    "NvlinkErrorReport",
    "NvlinkGpuErrors",
    "NvlinkLinkErrors",
    "parse_nvlink_errors",
]

LINK_STATES = ("up", "down", "disabled")  # "disabled": dcgmi's X, a link turned off, no fault
_GPU = re.compile(
    r"^GPU\s+(?P<index>\d{1,4}):\s*(?P<name>.*?)\s*(?:\(UUID:\s*(?P<uuid>[^)\s]+)\s*\))?\s*$"
)
_LINK = re.compile(r"^Link\s+(?P<link>\d{1,3}):\s*(?P<rest>.*?)\s*$")
_COUNTER = re.compile(r"^(?P<key>[^:]+?)\s*:\s*(?P<value>.*?)$")
_MAKE_SURE = re.compile(r"^Make sure that the latest NVIDIA driver is installed and running\.?$")
_SPEED = re.compile(r"^(?P<n>\d{1,6}(?:\.\d{1,6})?)\s*(?P<unit>[GM])B/s$")
ALL_INACTIVE = re.compile(
    r"^NVML:\s*Unable to retrieve NVLink information as all links are inactive\.?$", re.I
)
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
    not_supported: bool = False  # "Link N: N/A", dcgmi's "_"
    state: str | None = None  # "up", "down", "disabled" (LINK_STATES); None: not told
    speed_gbps: float | None = None  # nvidia-smi nvlink -s: "Link 0: 26.562 GB/s"


@dataclass(frozen=True, slots=True)
class NvlinkGpuErrors:
    index: int  # nvidia-smi's GPU index, as in "GPU 0:"; dcgmi's gpuId / NvSwitch physicalId
    name: str | None
    uuid: str | None
    links: tuple[NvlinkLinkErrors, ...] = ()
    all_inactive: bool = False  # NVML: "all links are inActive": every link of the GPU down
    counters: dict[str, int | float | None] = field(default_factory=dict)  # per GPU (dcgmi, GB)


@dataclass(frozen=True, slots=True)
class NvlinkErrorReport:
    gpus: tuple[NvlinkGpuErrors, ...]
    problems: tuple[str, ...] = ()
    not_run: tuple[NotRun, ...] = ()
    switches: tuple[NvlinkGpuErrors, ...] = ()  # dcgmi nvlink -s: NvSwitches by physicalId


class _Gpu:
    def __init__(self, index: int, name: str | None, uuid: str | None) -> None:
        self.index, self.name, self.uuid = index, name, uuid
        self.links: dict[int, dict[str, object]] = {}
        self.all_inactive = False

    def link(self, number: int) -> dict[str, object]:
        return self.links.setdefault(number, {"counters": {}})

    def freeze(self) -> NvlinkGpuErrors:
        return NvlinkGpuErrors(
            self.index,
            self.name,
            self.uuid,
            tuple(NvlinkLinkErrors(n, **fields) for n, fields in self.links.items()),  # type: ignore[arg-type]
            all_inactive=self.all_inactive,
        )


def _take(gpu: _Gpu, number: int, rest: str, problems: list[str]) -> None:
    link = gpu.link(number)
    if rest.lower() == "<inactive>":
        link["inactive"] = True
        link["state"] = "down"
        return
    if rest.upper() == "N/A":
        link["not_supported"] = True
        return
    speed = _SPEED.match(rest)
    if speed:
        link["state"] = "up"
        factor = 1.0 if speed.group("unit") == "G" else 0.001
        link["speed_gbps"] = float(speed.group("n")) * factor
        return
    pair = _COUNTER.match(rest)
    if pair is None:
        problems.append(f"GPU {gpu.index}: link {number}: {rest[:40]!r} is no counter or speed")
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
    """NVLink error counters and link states per GPU and link of ``nvidia-smi nvlink -e`` or
    ``nvidia-smi nvlink -s`` text (or both, one after the other)."""
    if isinstance(text, bytes | bytearray):
        text = text.decode("utf-8", errors="replace")
    gpus: list[_Gpu] = []
    problems: list[str] = []
    not_run: list[NotRun] = []
    current: _Gpu | None = None
    for number, line in enumerate(text.splitlines(), start=1):
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
            continue
        if ALL_INACTIVE.match(stripped):
            if current is None:  # which GPU is not said: nothing was checked
                not_run.append(NotRun("nvidia-smi nvlink", f"{stripped[:100]} (no GPU named)"))
            else:
                current.all_inactive = True
            continue
        failure = nvml_failure(stripped, "nvidia-smi nvlink")
        if failure is not None:
            not_run.append(failure)
            continue
        if _MAKE_SURE.match(stripped) and not_run:
            continue  # the second line of "NVIDIA-SMI has failed ..." when it wraps
        problems.append(f"line {number}: unknown line {stripped[:80]!r}")
    if not gpus and not not_run:
        raise ParseError(
            "no GPU found (expected nvidia-smi nvlink -e or -s output with "
            "'GPU 0: <name> (UUID: GPU-...)' headers, or an NVML message; got "
            + (
                f"{text.strip()[:60]!r})"
                if text.strip()
                else "an empty output: no GPU with NVLink, or the tool printed nothing)"
            )
        )
    return NvlinkErrorReport(
        tuple(g.freeze() for g in gpus),
        tuple(dict.fromkeys(problems[:_MAX_PROBLEMS])),
        tuple(dict.fromkeys(not_run)),
    )
