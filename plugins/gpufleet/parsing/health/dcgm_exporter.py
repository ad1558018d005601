"""Parse what NVIDIA's dcgm-exporter serves on ``/metrics`` (port 9400, Prometheus text): per
GPU, the fields that tell a GPU's health while a job runs on it.

Design: docs/design/gpu-health-parsers.md.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from gpufleet.errors import ParseError
from gpufleet.parsing.health.prometheus import Sample, read_samples

__all__ = [
    "DCGM_BLANKS",
    "HW_THERMAL_SLOWDOWN",
    "SW_THERMAL_SLOWDOWN",
    "DcgmExporterReport",
    "ExporterGpu",
    "ExporterLink",
    "parse_dcgm_exporter",
]

HW_THERMAL_SLOWDOWN = 0x40  # DCGM_CLOCKS_EVENT_REASON_HW_THERMAL / nvmlClocksThrottleReason...
SW_THERMAL_SLOWDOWN = 0x20  # DCGM_CLOCKS_EVENT_REASON_SW_THERMAL
THERMAL_EVENTS = {"hw_thermal": HW_THERMAL_SLOWDOWN, "sw_thermal": SW_THERMAL_SLOWDOWN}
# DCGM's blank values (dcgm_structs.h): the base of each type, and the 15 after it
DCGM_BLANKS = (0x7FFFFFF0, 0x7FFFFFFFFFFFFFF0, 2.0**47)
LINK_STATES = {0: "inactive", 1: "active", 2: "sleep"}  # NVML_NVLINK_STATE_*
MAX_XID = 999
_MAX_GPU = 255
_MAX_COUNT = 2**53  # a count past a float's integers was not counted
_MAX_PROBLEMS = 16

_XID = ("DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_XID_ERROR")
_FLAGS = {"DCGM_FI_DEV_ROW_REMAP_PENDING": "pending", "DCGM_FI_DEV_ROW_REMAP_FAILURE": "failure"}
_REMAPPED = {
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": "uncorrectable",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": "correctable",
}
_DBE = {
    f"DCGM_FI_DEV_ECC_DBE_VOL_{suffix}": key
    for suffix, key in (
        ("TOTAL", "total"),
        ("DEV", "dram"),
        ("SRM", "sram"),
        *((loc, loc.lower()) for loc in ("L1", "L2", "REG", "TEX", "SHM", "CBU")),
    )
}
_NVLINK_ERRORS = {
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": "crc_flit",
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": "crc_data",
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": "replay",
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": "recovery",
    "DCGM_FI_DEV_NVLINK_ERROR_DL_CRC": "crc",
    "DCGM_FI_DEV_NVLINK_ERROR_DL_REPLAY": "replay",
    "DCGM_FI_DEV_NVLINK_ERROR_DL_RECOVERY": "recovery",
}
_LINK_STATE = ("DCGM_FI_DEV_NVLINK_GET_STATE", "DCGM_FI_DEV_NVLINK_LINK_STATUS")
_REASONS = ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")
_XID_COUNT, _CLOCK_COUNT = "DCGM_EXP_XID_ERRORS_COUNT", "DCGM_EXP_CLOCK_EVENTS_COUNT"
# metric name -> the signal it is (``DcgmExporterReport.signals``)
SIGNALS = {
    **dict.fromkeys(_XID, "xid"),
    _XID_COUNT: "xid",
    "DCGM_FI_DEV_ROW_REMAP_PENDING": "row_remap_pending",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": "row_remap_failure",
    **dict.fromkeys(_REMAPPED, "remapped_rows"),
    **dict.fromkeys(_DBE, "ecc_dbe_volatile"),
    **dict.fromkeys(_NVLINK_ERRORS, "nvlink_errors"),
    **dict.fromkeys(_LINK_STATE, "nvlink_state"),
    **dict.fromkeys(_REASONS, "thermal"),
    _CLOCK_COUNT: "thermal",
}

_UUID = re.compile(r"^(?:GPU|MIG)-[0-9A-Fa-f-]{1,64}$")
_BUS = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")
_NUMBER = re.compile(r"^[0-9]{1,3}$")
_EVENT = re.compile(r"^[a-z][a-z0-9_]{0,31}$")


@dataclass(frozen=True, slots=True)
class ExporterLink:
    link: int
    state: int | None = None  # NVML's: 0 inactive, 1 active, 2 sleep (LINK_STATES)

    @property
    def down(self) -> bool:
        return self.state == 0


@dataclass(frozen=True, slots=True)
class ExporterGpu:
    """One GPU's fields as the exporter serves them; ``None`` (or empty): not served."""

    index: int  # the ``gpu`` label: NVML's index
    uuid: str | None = None
    pci_bus: str | None = None  # as the exporter writes it: "00000000:3B:00.0"
    model: str | None = None
    last_xid: int | None = None  # 0: no Xid
    xid_counts: dict[int, int] = field(default_factory=dict)
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    remapped_rows: dict[str, int] = field(default_factory=dict)  # "uncorrectable", "correctable"
    dbe_volatile: dict[str, int] = field(default_factory=dict)  # "total", "dram", "sram", ...
    nvlink_errors: dict[str, int] = field(default_factory=dict)  # "replay", "crc", ...
    links: tuple[ExporterLink, ...] = ()
    clock_event_reasons: int | None = None
    clock_event_counts: dict[str, int] = field(default_factory=dict)  # "hw_thermal": 3, ...

    @property
    def thermal_slowdown(self) -> tuple[str, ...]:
        """``hw_thermal`` / ``sw_thermal`` when the bitmask holds it or its count is above 0."""
        reasons = self.clock_event_reasons or 0
        return tuple(
            event
            for event, bit in THERMAL_EVENTS.items()
            if reasons & bit or self.clock_event_counts.get(event, 0) > 0
        )


@dataclass(frozen=True, slots=True)
class DcgmExporterReport:
    gpus: tuple[ExporterGpu, ...]
    hostname: str | None = None  # the Hostname label: the node (NODE_NAME) or the pod's host
    signals: frozenset[str] = frozenset()  # of SIGNALS' values: what the exporter serves
    problems: tuple[str, ...] = ()


_MAPS = (
    "xid_counts",
    "remapped_rows",
    "dbe_volatile",
    "nvlink_errors",
    "links",
    "clock_event_counts",
)


class _Gpu:
    def __init__(self, index: int) -> None:
        self.index = index
        self.names: dict[str, str] = {}  # "uuid", "pci_bus", "model"
        self.fields: dict[str, Any] = {}  # ExporterGpu's other fields by name: ints and bools
        self.maps: dict[str, dict[Any, Any]] = {k: {} for k in _MAPS}

    def freeze(self) -> ExporterGpu:
        maps: dict[str, Any] = dict(self.maps)
        links = maps.pop("links")
        return ExporterGpu(
            self.index,
            uuid=self.names.get("uuid"),
            pci_bus=self.names.get("pci_bus"),
            model=self.names.get("model"),
            links=tuple(ExporterLink(n, s) for n, s in sorted(links.items())),
            **maps,
            **self.fields,
        )


def _blank(value: float) -> bool:
    return any(base <= value <= base + 15 for base in DCGM_BLANKS) or value == float(2**63)


def _whole(value: float, what: str, problems: list[str], top: int = _MAX_COUNT) -> int | None:
    """A count: a whole number in 0..top, else a problem (None)."""
    if math.isnan(value) or math.isinf(value):
        problems.append(f"{what}: {value} is not a number")
    elif value < 0:
        problems.append(f"{what}: {value:g} is negative")
    elif value != int(value) or value > top:
        problems.append(f"{what}: {value:g} is not a whole number in 0..{top}")
    else:
        return int(value)
    return None


class _Reader:
    def __init__(self) -> None:
        self.gpus: dict[int, _Gpu] = {}
        self.problems: list[str] = []
        self.signals: set[str] = set()
        self.hostname: str | None = None

    def gpu(self, sample: Sample, where: str) -> _Gpu | None:
        """The GPU a sample of ours belongs to, checking its labels."""
        labels = sample.labels
        index = labels.get("gpu", "")
        if not _NUMBER.fullmatch(index) or int(index) > _MAX_GPU:
            self.problems.append(f"{where}: no gpu label that is a GPU index ({index[:16]!r})")
            return None
        uuid = labels.get("UUID") or labels.get("uuid") or labels.get("gpu_uuid") or None
        bus = labels.get("pci_bus_id") or None
        if uuid is not None and not _UUID.fullmatch(uuid):
            self.problems.append(f"{where}: UUID {uuid[:48]!r} is not a GPU's (GPU-...)")
            return None
        if bus is not None and not _BUS.fullmatch(bus):
            self.problems.append(f"{where}: pci_bus_id {bus[:32]!r} is not a PCI bus id")
            return None
        gpu = self.gpus.setdefault(int(index), _Gpu(int(index)))
        model = labels.get("modelName") or labels.get("model_name") or None
        for key, value in (("uuid", uuid), ("pci_bus", bus), ("model", model)):
            if value is None:
                continue
            known = gpu.names.setdefault(key, value)
            if known != value and key != "model":
                self.problems.append(f"{where}: GPU {index} is {known} and {value}")
                return None
        host = labels.get("hostname") or labels.get("Hostname")
        if host and self.hostname is None:
            self.hostname = host
        return gpu

    def take(self, sample: Sample) -> None:
        name, value = sample.name, sample.value
        where = f"line {sample.line}: {name}"
        if "nvswitch" in sample.labels:
            return  # a switch port, not a GPU's link
        gpu = self.gpu(sample, where)
        if gpu is None:
            return
        if _blank(value):
            return  # DCGM could not read it: not served for this GPU
        self.signals.add(SIGNALS[name])
        if name in _XID:
            self.xid(gpu, value, where)
        elif name in _FLAGS:
            self.flag(gpu, _FLAGS[name], value, where)
        elif name in _LINK_STATE:
            self.link(gpu, sample, where)
        elif name in _REASONS:
            mask = _whole(value, where, self.problems, 2**64 - 1)
            if mask is not None:
                gpu.fields["clock_event_reasons"] = mask | int(
                    gpu.fields.get("clock_event_reasons") or 0
                )
        elif name in (_XID_COUNT, _CLOCK_COUNT):
            self.windowed(gpu, sample, where)
        else:
            key, into = next(
                (table[name], label)
                for table, label in (
                    (_REMAPPED, "remapped_rows"),
                    (_DBE, "dbe_volatile"),
                    (_NVLINK_ERRORS, "nvlink_errors"),
                )
                if name in table
            )
            self.count(gpu.maps[into], key, value, where)

    def count(self, into: dict, key: object, value: float, where: str) -> None:
        number = _whole(value, where, self.problems)
        if number is not None:
            into[key] = max(number, into.get(key, 0))

    def xid(self, gpu: _Gpu, value: float, where: str) -> None:
        code = _whole(value, where, self.problems)
        if code is None:
            return
        if code > MAX_XID:
            self.problems.append(f"{where}: Xid {code} is not in 1..{MAX_XID} (0: none)")
            return
        known = gpu.fields.get("last_xid")
        if known and code and known != code:
            self.problems.append(f"{where}: GPU {gpu.index} reads Xid {known} and {code}")
        elif not known:
            gpu.fields["last_xid"] = code

    def flag(self, gpu: _Gpu, key: str, value: float, where: str) -> None:
        if value not in (0.0, 1.0):
            self.problems.append(f"{where}: {value:g} is neither 0 nor 1")
            return
        field_name = f"remap_{key}"
        gpu.fields[field_name] = bool(value) or bool(gpu.fields.get(field_name))

    def link(self, gpu: _Gpu, sample: Sample, where: str) -> None:
        link = sample.labels.get("nvlink", "")
        if not _NUMBER.fullmatch(link):
            self.problems.append(f"{where}: no nvlink label that is a link number ({link[:8]!r})")
            return
        if sample.value not in LINK_STATES:
            self.problems.append(f"{where}: NVLink state {sample.value:g} is not 0, 1 or 2")
            return
        gpu.maps["links"][int(link)] = int(sample.value)

    def windowed(self, gpu: _Gpu, sample: Sample, where: str) -> None:
        """``DCGM_EXP_XID_ERRORS_COUNT{xid=..}`` / ``DCGM_EXP_CLOCK_EVENTS_COUNT{clock_event=..}``:
        a GPU with none has one sample without the label, at 0."""
        xids = sample.name == _XID_COUNT
        label = sample.labels.get("xid" if xids else "clock_event")
        count = _whole(sample.value, where, self.problems)
        if count is None or (label is None and count == 0):
            return
        if xids and (label is None or not label.isdigit() or not 1 <= int(label) <= MAX_XID):
            self.problems.append(f"{where}: xid label {label!r:.16} is not an Xid in 1..{MAX_XID}")
        elif not xids and (label is None or not _EVENT.fullmatch(label)):
            self.problems.append(f"{where}: clock_event label {label!r:.32} is no event name")
        elif xids and label is not None:  # never None here: refused above
            self.count(gpu.maps["xid_counts"], int(label), sample.value, where)
        else:
            self.count(gpu.maps["clock_event_counts"], label, sample.value, where)


def parse_dcgm_exporter(text: str) -> DcgmExporterReport:
    """The health fields per GPU of dcgm-exporter's ``/metrics`` text."""
    if isinstance(text, bytes | bytearray):
        text = text.decode("utf-8", errors="replace")
    if not re.search(r"^(?:# (?:HELP|TYPE) )?DCGM_", text, re.MULTILINE):
        raise ParseError(
            "no DCGM_ metric found (expected dcgm-exporter's /metrics text, e.g. "
            '\'DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-..."} 0\')'
        )
    reader = _Reader()
    for sample in read_samples(text):
        if isinstance(sample, int):
            reader.problems.append(f"line {sample}: not a Prometheus sample")
        elif sample.name in SIGNALS:
            reader.take(sample)
    return DcgmExporterReport(
        tuple(g.freeze() for _, g in sorted(reader.gpus.items())),
        reader.hostname,
        frozenset(reader.signals),
        tuple(dict.fromkeys(reader.problems[:_MAX_PROBLEMS])),
    )
