"""What a simulated node's GPU health tools print, in the real formats, so the real parsers
(``gpufleet.parsing.health``) and the domain's decision (``gpufleet.domain.health``) run on it:

- the kernel log (``dmesg``): the driver's load line, then one ``NVRM: Xid (PCI:0000:18:00):
  79, pid=..., name=..., <text>`` line per Xid event;
- ``nvidia-smi -q -d ROW_REMAPPER,ECC``: per GPU, the volatile and aggregate SRAM/DRAM ECC
  counters and the ``Remapped Rows`` section with its bank histogram;
- ``nvidia-smi nvlink -e``: per GPU, 18 links' replay, recovery and CRC counters (a link that is
  down reads ``<inactive>``);
- ``dcgmi diag -r N -j`` in DCGM 4.x's JSON (``DCGM Diagnostic`` -> ``test_categories``, one
  result per GPU entity, ``test_summary``, ``entity_groups``, ``metadata``), running the tests
  of levels 1 to N (:data:`DIAG_TESTS`);
- whether the node's GPUs throttle for heat;
- what the node's dcgm-exporter serves (``dcgm_exporter``, from the same state: :func:`gpu_states`).

A healthy node prints healthy outputs. A GPU fault (``gpufleet.domain.faults.GPU_FAULT_KINDS``)
hits one GPU of its node, :func:`faulty_gpu` (the same one for every fault of the node), and
shows in each tool as the real fault would, with DCGM's own error ids and messages
(``dcgm_errors.h``):

==========================  =====================================================================
``xid:<node>:<CODE>``       one Xid CODE line; nothing else (the sim does not model what each of
                            NVIDIA's codes does to the GPU)
``row-remap-pending``       Xid 48 and 63; 1 volatile DRAM uncorrectable error, 1 row remapped
                            for it, ``Pending : Yes``; the ``software`` test fails with
                            ``DCGM_FR_PENDING_ROW_REMAP`` (85)
``row-remap-failed``        Xid 48 and 64; 1 volatile DRAM uncorrectable error, ``Remapping
                            Failure Occurred : Yes``; ``software`` fails with
                            ``DCGM_FR_ROW_REMAP_FAILURE`` (80)
``ecc-dbe``                 Xid 48; 1 volatile SRAM uncorrectable error (no row remap repairs
                            SRAM); from level 2, ``memory`` fails with
                            ``DCGM_FR_VOLATILE_DBE_DETECTED`` (4)
``nvlink-down``             Xid 74; the GPU's NVLink :data:`DOWN_LINK` reads ``<inactive>``
``thermal-throttle``        the GPUs throttle; from level 3, ``targeted_stress`` warns with
                            ``DCGM_FR_CLOCK_THROTTLE_THERMAL`` (10) on the faulty GPU
==========================  =====================================================================
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable
from dataclasses import dataclass, field

from gpufleet.backends.sim.output import BUS_IDS, GPU_NAMES
from gpufleet.backends.sim.programs import seed
from gpufleet.domain.faults import Fault
from gpufleet.domain.health import XID_CATALOG

DRIVER_VERSION = "570.124.06"
CUDA_VERSION = "12.8"
DCGM_VERSION = "4.1.1"
NVLINKS = 18  # links per GPU (H100, H200, B200)
DOWN_LINK = 3  # the link nvlink-down takes down
BANKS = 640  # the bank remap availability histogram's total
# DCGM 4.x's tests by run level (``dcgmi diag -r N`` runs those of levels 1..N): (level,
# category, test)
DIAG_TESTS = (
    (1, "Deployment", "software"),
    (2, "Integration", "pcie"),
    (2, "Hardware", "memory"),
    (3, "Hardware", "diagnostic"),
    (3, "Stress", "targeted_stress"),
    (3, "Stress", "targeted_power"),
    (3, "Stress", "memory_bandwidth"),
    (4, "Hardware", "memtest"),
    (4, "Hardware", "pulse_test"),
)
_XID_TEXT = {
    63: "Row Remapper: New row marked for remapping, reset gpu to activate.",
    79: "GPU has fallen off the bus.",
    154: "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)",
}


@dataclass(frozen=True)
class GpuHealthOutputs:
    """One node's health tools' outputs, as text, and whether its GPUs throttle for heat."""

    kernel_log: str
    nvidia_smi: str
    nvlink: str
    dcgm_diag: str
    diag_level: int
    throttling: bool


@dataclass
class _DiagIssue:
    level: int  # the first run level whose tests show it
    test: str
    status: str  # "Fail" or "Warn"
    error_id: int
    message: str


@dataclass
class _Gpu:
    """What the faults did to one GPU."""

    index: int
    xids: list[int] = field(default_factory=list)
    dram_uncorrectable: int = 0
    sram_uncorrectable: int = 0
    remapped_uncorrectable: int = 0
    remap_pending: bool = False
    remap_failure: bool = False
    link_down: int | None = None
    diag: list[_DiagIssue] = field(default_factory=list)


def faulty_gpu(node: str, gpus: int) -> int:
    """The GPU of ``node`` its GPU faults hit."""
    return seed("gpu-fault", node) % gpus


def _apply(gpu: _Gpu, fault: Fault) -> None:
    i = gpu.index
    if fault.kind == "xid" and fault.xid is not None:
        gpu.xids.append(fault.xid)
    elif fault.kind == "row-remap-pending":
        gpu.xids += [48, 63]
        gpu.dram_uncorrectable += 1
        gpu.remapped_uncorrectable += 1
        gpu.remap_pending = True
        message = f"GPU {i} had memory errors and row remappings are pending"
        gpu.diag.append(_DiagIssue(1, "software", "Fail", 85, message))
    elif fault.kind == "row-remap-failed":
        gpu.xids += [48, 64]
        gpu.dram_uncorrectable += 1
        gpu.remap_failure = True
        message = f"GPU {i} had uncorrectable memory errors and row remapping failed."
        gpu.diag.append(_DiagIssue(1, "software", "Fail", 80, message))
    elif fault.kind == "ecc-dbe":
        gpu.xids.append(48)
        gpu.sram_uncorrectable += 1
        message = f"Detected 1 volatile double-bit ECC error(s) in GPU {i}."
        gpu.diag.append(_DiagIssue(2, "memory", "Fail", 4, message))
    elif fault.kind == "nvlink-down":
        gpu.xids.append(74)
        gpu.link_down = DOWN_LINK
    elif fault.kind == "thermal-throttle":
        message = f"Detected clock throttling due to thermal violation in GPU {i}."
        gpu.diag.append(_DiagIssue(3, "targeted_stress", "Warn", 10, message))


def _bus(index: int) -> tuple[int, int]:
    """GPU ``index``'s PCI bus and device (the buses nccl-tests prints, 8 GPUs a device)."""
    return int(BUS_IDS[index % len(BUS_IDS)], 16), index // len(BUS_IDS)


def _uuid(node: str, index: int) -> str:
    h = f"{seed('gpu-uuid', node, index):012x}"
    return f"GPU-{h[:8]}-{h[8:12]}-4000-8000-{h}"


# --- the kernel log ----------------------------------------------------------------------------


def kernel_log(node: str, gpus: list[_Gpu]) -> str:
    """``dmesg`` since the driver loaded: its load line, then the Xid events in GPU order."""
    rng = random.Random(seed("dmesg", node))
    t = 1500 + rng.uniform(0, 100)
    lines = [
        f"[{t:12.6f}] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  {DRIVER_VERSION}  "
        "Release Build  (dvs-builder@U16-I3-B03-4-3)"
    ]
    for gpu in gpus:
        bus, device = _bus(gpu.index)
        for code in gpu.xids:
            t += rng.uniform(1, 3600)
            entry = XID_CATALOG.get(code)
            text = _XID_TEXT.get(code) or (entry.meaning if entry else "Xid event")
            who = (
                "pid='<unknown>', name=<unknown>"
                if code == 79
                else f"pid={rng.randrange(1000, 99999)}, name=python3"
            )
            lines.append(
                f"[{t:12.6f}] NVRM: Xid (PCI:0000:{bus:02x}:{device:02x}): {code}, {who}, {text}"
            )
    return "\n".join(lines) + "\n"


# --- nvidia-smi -q -d ROW_REMAPPER,ECC ---------------------------------------------------------


def _ecc(gpu: _Gpu, indent: str) -> list[str]:
    counts = {
        "SRAM Correctable": 0,
        "SRAM Uncorrectable": gpu.sram_uncorrectable,
        "DRAM Correctable": 0,
        "DRAM Uncorrectable": gpu.dram_uncorrectable,
    }
    return [f"{indent}{name:<30}: {n}" for name, n in counts.items()]


def _smi_gpu(gpu: _Gpu) -> list[str]:
    bus, device = _bus(gpu.index)
    remapped = gpu.remapped_uncorrectable
    yes = {True: "Yes", False: "No"}
    return [
        f"GPU 00000000:{bus:02X}:{device:02X}.0",
        "    ECC Errors",
        "        Volatile",
        *_ecc(gpu, " " * 12),
        "        Aggregate",
        *_ecc(gpu, " " * 12),
        "    Retired Pages",
        "        Single Bit ECC                    : N/A",
        "        Double Bit ECC                    : N/A",
        "        Pending Page Blacklist            : N/A",
        "    Remapped Rows",
        "        Correctable Error                 : 0",
        f"        Uncorrectable Error               : {remapped}",
        f"        Pending                           : {yes[gpu.remap_pending]}",
        f"        Remapping Failure Occurred        : {yes[gpu.remap_failure]}",
        "        Bank Remap Availability Histogram",
        f"            Max                           : {BANKS - remapped} bank(s)",
        f"            High                          : {remapped} bank(s)",
        "            Partial                       : 0 bank(s)",
        "            Low                           : 0 bank(s)",
        "            None                          : 0 bank(s)",
        "",
    ]


def nvidia_smi_remap_ecc(gpus: list[_Gpu]) -> str:
    """``nvidia-smi -q -d ROW_REMAPPER,ECC``, the GPUs in index order."""
    head = [
        "",
        "==============NVSMI LOG==============",
        "",
        "Timestamp                                 : Sat Nov 29 02:00:00 2026",
        f"Driver Version                            : {DRIVER_VERSION}",
        f"CUDA Version                              : {CUDA_VERSION}",
        "",
        f"Attached GPUs                             : {len(gpus)}",
    ]
    return "\n".join(head + [line for gpu in gpus for line in _smi_gpu(gpu)])


# --- nvidia-smi nvlink -e ----------------------------------------------------------------------


def nvlink_errors(node: str, gpus: list[_Gpu], gpu_model: str) -> str:
    """``nvidia-smi nvlink -e``: every link's counters at 0, a link that is down ``<inactive>``."""
    name = GPU_NAMES.get(gpu_model, f"NVIDIA {gpu_model}")
    lines = []
    for gpu in gpus:
        lines.append(f"GPU {gpu.index}: {name} (UUID: {_uuid(node, gpu.index)})")
        for link in range(NVLINKS):
            if link == gpu.link_down:
                lines.append(f"\t Link {link}: <inactive>")
                continue
            lines += [f"\t Link {link}: {c} Errors: 0" for c in ("Replay", "Recovery", "CRC")]
    return "\n".join(lines) + "\n"


# --- dcgmi diag -r N -j ------------------------------------------------------------------------


def _worst(statuses: Iterable[str]) -> str:
    seen = set(statuses)
    return next((s for s in ("Fail", "Warn") if s in seen), "Pass")


def _result(gpu: _Gpu, test: str, level: int) -> dict:
    result: dict = {"entity_group": "GPU", "entity_group_id": 1, "entity_id": gpu.index}
    issues = [d for d in gpu.diag if d.test == test and d.level <= level]
    result["status"] = _worst(d.status for d in issues)
    if issues:
        result["warnings"] = [{"error_id": d.error_id, "warning": d.message} for d in issues]
    return result


def dcgm_diag_json(node: str, gpus: list[_Gpu], level: int) -> str:
    """``dcgmi diag -r level -j`` (DCGM 4.x): the tests of levels 1..``level``, per GPU."""
    categories: dict[str, list[dict]] = {}
    for first, category, test in DIAG_TESTS:
        if first > level:
            continue
        results = [_result(gpu, test, level) for gpu in gpus]
        summary = _worst(r["status"] for r in results)
        categories.setdefault(category, []).append(
            {"name": test, "results": results, "test_summary": {"status": summary}}
        )
    document = {
        "DCGM Diagnostic": {
            "test_categories": [{"category": c, "tests": t} for c, t in categories.items()]
        },
        "entity_groups": [
            {
                "entity_group": "GPU",
                "entity_group_id": 1,
                "entities": [
                    {
                        "entity_id": g.index,
                        "serial_num": f"{seed('serial', node, g.index) % 10**13:013d}",
                    }
                    for g in gpus
                ],
            }
        ],
        "metadata": {"Driver Version Detected": DRIVER_VERSION, "version": DCGM_VERSION},
    }
    return json.dumps(document, indent=4) + "\n"


def gpu_health_outputs(
    node: str, faults: Iterable[Fault], *, gpu_model: str, gpus: int, diag_level: int = 1
) -> GpuHealthOutputs:
    """What ``node``'s health tools print with ``faults`` (its GPU faults) in force."""
    if diag_level not in (1, 2, 3, 4):
        raise ValueError(f"dcgmi diag runs at level 1, 2, 3 or 4, not {diag_level!r}")
    state, throttling = gpu_states(node, faults, gpus)
    return GpuHealthOutputs(
        kernel_log=kernel_log(node, state),
        nvidia_smi=nvidia_smi_remap_ecc(state),
        nvlink=nvlink_errors(node, state, gpu_model),
        dcgm_diag=dcgm_diag_json(node, state, diag_level),
        diag_level=diag_level,
        throttling=throttling,
    )


def gpu_states(node: str, faults: Iterable[Fault], gpus: int) -> tuple[list[_Gpu], bool]:
    """What ``faults`` (those naming ``node`` count) did to each of its ``gpus`` GPUs, and
    whether they throttle for heat: the one fault model every tool's output is written from."""
    state = [_Gpu(i) for i in range(gpus)]
    hit = state[faulty_gpu(node, gpus)]
    mine = [f for f in faults if f.node == node]
    for fault in mine:
        _apply(hit, fault)
    return state, any(f.kind == "thermal-throttle" for f in mine)


def health_check_output(
    node: str, faults: Iterable[Fault], *, gpu_model: str, gpus: int, diag_level: int
) -> str:
    """What one node's pod of the GPU health check prints (``include/manifests/
    gpu-health.yaml.j2``'s script): each tool's output under its section marker."""
    from gpufleet.parsing.health.report import section_line

    out = gpu_health_outputs(node, faults, gpu_model=gpu_model, gpus=gpus, diag_level=diag_level)
    state = "Active" if out.throttling else "Not Active"
    sections = (
        ("node", f"node={node} level={diag_level}\n"),
        ("dmesg", out.kernel_log),
        ("nvidia-smi-remap-ecc", out.nvidia_smi),
        ("nvidia-smi-nvlink", out.nvlink),
        ("thermal", "".join(f"{i}, {state}, Not Active\n" for i in range(gpus))),
        ("dcgmi-diag", out.dcgm_diag),
    )
    return "".join(f"{section_line(k)}\n{body}" for k, body in sections)
