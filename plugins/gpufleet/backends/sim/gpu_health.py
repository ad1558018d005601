"""What a simulated node's GPU health tools print, in the real formats, so the real parsers
(``gpufleet.parsing.health``) and the domain's decision (``gpufleet.domain.health``) run on it.

Design: docs/design/simulated-fleet.md.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable
from dataclasses import dataclass, field

from gpufleet.backends.sim.output import BUS_IDS, GPU_NAMES
from gpufleet.backends.sim.seeds import seed
from gpufleet.domain.faults import Fault
from gpufleet.domain.health import XID_CATALOG
from gpufleet.domain.health.tiers import diag_timeout

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
# the PCI device ids the table's "GPU Device IDs Detected" row lists (other models: H200's)
DEVICE_IDS = {"A100": "20b2", "H100": "2330", "H200": "2335", "B200": "2901"}
DCGM3_VERSION = "3.3.0"  # the DCGM of the public Fail - All run dcgm-fail-all follows
# what the health check prints after each tool: its exit status (the manifest's ``echo``)
EXIT_LINE = "gpufleet-health-exit={}"
TIMED_OUT = 124  # timeout(1)'s exit status for a command it timed out
NVVS_ERROR_EXIT = 226  # DCGM_ST_NVVS_ERROR (-30) as a process exit status: a test failed
IN_USE_EXIT = 222  # DCGM_ST_IN_USE (-34)
# dcgmlib/src/dcgm_errors.c errorString(DCGM_ST_IN_USE)
IN_USE_TEXT = (
    "The requested operation could not be completed because the affected resource is in use"
)
# dcgmi/Diag.cpp: dcgmi diag's default entities (4.x: -i "*,cpu:*") in its failure message
IN_USE_ERROR = (
    f"Error: Unable to complete diagnostic for entities *,cpu:*. Return: (-34) : {IN_USE_TEXT}\n"
)
INTERNAL_ERROR_ID = 44  # DCGM_FR_INTERNAL
INTERNAL_ERROR_TEXT = "There was an internal error during the test: '{}'"  # DCGM_FR_INTERNAL_MSG
# GPU models whose dcgmi diag hangs from this level on (NVIDIA/DCGM#247: DCGM 4.2.3, B200 and
# GB200, the PCIe/NVLink test of level 2 never ends)
HANGS_FROM_LEVEL = {"B200": 2, "GB200": 2}
# the DCGM faults' dialects, the first in force wins (a run that hangs prints nothing else)
DIALECT_ORDER = (
    "dcgm-hang",
    "dcgm-in-use",
    "dcgm-truncated",
    "dcgm-skip-all",
    "dcgm-internal-error",
    "dcgm-fail-all",
)
# DCGM 3.x's display names of the tests (its text table) and its Deployment rows (level 1)
_DCGM3_NAMES = {
    "pcie": "PCIe",
    "memory": "GPU Memory",
    "diagnostic": "Diagnostic",
    "targeted_stress": "Targeted Stress",
    "targeted_power": "Targeted Power",
    "memory_bandwidth": "Memory Bandwidth",
    "memtest": "Memtest",
    "pulse_test": "Pulse Test",
}
_DCGM3_DEPLOYMENT = (
    "Denylist",
    "NVML Library",
    "CUDA Main Library",
    "Permissions and OS Blocks",
    "Persistence Mode",
    "Environment Variables",
    "Page Retirement/Row Remap",
    "Graphics Processes",
    "Inforom",
)
# the public run's warning (wrapped at 45 characters as dcgmi wraps it), bus id ours
_CUDA_PCI_WARNING = (
    "GPU 0 Error using CUDA API cudaDeviceGetByPCIBusId Check DCGM and system logs for errors. "
    "Reset GPU. Restart DCGM. Rerun diagnostics. 'system has unsupported display driver / cuda "
    "driver combination' for GPU 0, bus ID = 00000000:18:00.0"
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
    dcgm_exit: int = 0  # dcgmi diag's exit status (124: timed out)


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


def xid_text(code: int) -> str:
    """What the driver prints after an Xid's code (its catalog meaning when the sim has no
    verbatim text)."""
    entry = XID_CATALOG.get(code)
    return _XID_TEXT.get(code) or (entry.meaning if entry else "Xid event")


def pci_address(gpu_index: int) -> str:
    """The PCI address the driver names GPU ``gpu_index`` by (``0000:9b:00``)."""
    bus, device = _bus(gpu_index)
    return f"0000:{bus:02x}:{device:02x}"


def xid_line(code: int, gpu_index: int, pid: int | None = None) -> str:
    """One driver Xid line without its ``dmesg`` timestamp, as the driver prints it:
    ``NVRM: Xid (PCI:0000:9b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the
    bus.`` (an Xid 79 names no process)."""
    who = (
        "pid='<unknown>', name=<unknown>"
        if code == 79 or pid is None
        else f"pid={pid}, name=python3"
    )
    return f"NVRM: Xid (PCI:{pci_address(gpu_index)}): {code}, {who}, {xid_text(code)}"


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


def _issues(gpu: _Gpu, test: str, level: int) -> list[_DiagIssue]:
    return [d for d in gpu.diag if d.test == test and d.level <= level]


def _fails(gpus: list[_Gpu], level: int) -> bool:
    """A test of the run failed on a GPU: dcgmi exits DCGM_ST_NVVS_ERROR."""
    return any(d.status == "Fail" for g in gpus for d in g.diag if d.level <= level)


def _result(gpu: _Gpu, test: str, level: int, skip: bool = False) -> dict:
    result: dict = {"entity_group": "GPU", "entity_group_id": 1, "entity_id": gpu.index}
    issues = [] if skip else _issues(gpu, test, level)
    result["status"] = "Skip" if skip else _worst(d.status for d in issues)
    if issues:
        result["warnings"] = [{"error_id": d.error_id, "warning": d.message} for d in issues]
    return result


def _internal_error_test(level: int) -> str:
    """The test ``dcgm-internal-error`` fails: ``pcie`` (DCGM 4.x's ``pcie | Fail`` with every
    GPU passing), or ``software`` at level 1, which runs no ``pcie``."""
    return "pcie" if level >= 2 else "software"


def _internal_error_message(test: str) -> str:
    return INTERNAL_ERROR_TEXT.format(f"the {test} plugin stopped before reporting its results")


def _tests(level: int) -> list[tuple[str, str]]:
    """(category, test) of ``dcgmi diag -r level``: the tests of levels 1..level."""
    return [(category, test) for first, category, test in DIAG_TESTS if first <= level]


def dcgm_diag_json(
    node: str,
    gpus: list[_Gpu],
    level: int,
    *,
    skip_all: bool = False,
    internal_error: bool = False,
) -> str:
    """``dcgmi diag -r level -j`` (DCGM 4.x): the tests of levels 1..``level``, per GPU.
    ``skip_all``: every result ``Skip`` (nothing ran); ``internal_error``: the run's
    :func:`_internal_error_test` fails in its ``test_summary`` (the errors of no entity, as
    ``Diag.cpp``'s ``HelperJsonAddTestSummary`` writes them) with ``DCGM_FR_INTERNAL`` while
    every GPU's result under it passes."""
    categories: dict[str, list[dict]] = {}
    broken = _internal_error_test(level) if internal_error else None
    for category, test in _tests(level):
        results = [_result(gpu, test, level, skip=skip_all) for gpu in gpus]
        summary: dict = {"status": "Skip" if skip_all else _worst(r["status"] for r in results)}
        if test == broken:
            summary = {
                "status": "Fail",
                "warnings": [
                    {
                        "error_category": 16,  # DCGM_FR_EC_INTERNAL_OTHER
                        "error_id": INTERNAL_ERROR_ID,
                        "error_severity": 2,  # DCGM_ERROR_TRIAGE
                        "warning": _internal_error_message(test),
                    }
                ],
            }
        categories.setdefault(category, []).append(
            {"name": test, "results": results, "test_summary": summary}
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


def dcgm_runtime_error_json(message: str) -> str:
    """``dcgmi diag -j`` when the run could not start (``Diag.cpp``
    ``HelperDisplayFailureMessage``: ``DCGM Diagnostic`` -> ``runtime_error`` and ``version``,
    jsoncpp's styled writer: keys sorted, three-space indent)."""
    body = json.dumps(
        {"DCGM Diagnostic": {"runtime_error": message, "version": DCGM_VERSION}},
        indent=3,
        separators=(",", " : "),
        sort_keys=True,
    )
    return body + "\n\n"  # toStyledString's newline, then std::endl


# --- dcgmi diag -r N (the text table) ------------------------------------------------------------

_RULE = "+---------------------------+------------------------------------------------+"
_HEAD = (
    "Successfully ran diagnostic for group.\n" + _RULE + "\n"
    "| Diagnostic                | Result                                         |\n"
    "+===========================+================================================+\n"
)


def _row(name: str, value: str) -> str:
    return f"| {name:<25} | {value:<46} |\n"


def _wrapped(name: str, message: str) -> str:
    """A message row, wrapped at 45 characters onto rows with no name, as dcgmi wraps it
    (``Diag.cpp`` ``DisplayVerboseInfo``)."""
    return "".join(
        _row(name if i == 0 else "", message[i : i + 45]) for i in range(0, len(message), 45)
    )


def _category_line(name: str, first: bool) -> str:
    edge = "|" if first else "+"
    label = f"{edge}-----  {name}  ".ljust(28, "-")
    return label + "+" + "-" * 48 + ("|" if first else "+") + "\n"


def _metadata(version: str, gpus: int, device_id: str, separator: str) -> str:
    return (
        _category_line("Metadata", True)
        + _row("DCGM Version", version)
        + _row("Driver Version Detected", DRIVER_VERSION)
        + _row("GPU Device IDs Detected", separator.join([device_id] * gpus))
    )


def dcgm_diag_text(
    gpus: list[_Gpu], level: int, *, internal_error: bool = False, gpu_model: str = "H200"
) -> str:
    """``dcgmi diag -r level`` (DCGM 4.x's table): per test its result, the ``Warning`` rows of
    errors no GPU owns, then a ``GPUn: <result>`` row per GPU (NVIDIA/DCGM#253's layout;
    categories in ``Diag.cpp``'s order: Deployment, Hardware, Integration, Stress).
    ``internal_error``: :func:`_internal_error_test` ``Fail`` with ``DCGM_FR_INTERNAL``'s
    warning, every GPU ``Pass``."""
    broken = _internal_error_test(level) if internal_error else None
    device = DEVICE_IDS.get(gpu_model.upper(), DEVICE_IDS["H200"])
    out = _HEAD + _metadata(DCGM_VERSION, len(gpus), device, ", ")
    order = ("Deployment", "Hardware", "Integration", "Stress")
    tests = sorted(_tests(level), key=lambda ct: order.index(ct[0]))
    category = None
    for cat, test in tests:
        if cat != category:
            out += _category_line(cat, category is None and cat == "Deployment")
            category = cat
        statuses = [_result(g, test, level)["status"] for g in gpus]
        overall = "Fail" if test == broken else _worst(statuses)
        out += _row(test, overall)
        if test == broken:
            out += _wrapped("Warning", _internal_error_message(test))
        for gpu, status in zip(gpus, statuses, strict=True):
            out += _row("", f"GPU{gpu.index}: {status}")
    return out + _RULE + "\n"


def dcgm3_fail_all_text(gpus: int, level: int, gpu_model: str = "H200") -> str:
    """DCGM 3.x's table (``dcgmi diag -r level``) with a test ``Fail - All`` and its warning,
    as a public DCGM 3.3.0 run printed it: level 2 and above, ``PCIe`` fails on every GPU with
    ``cudaDeviceGetByPCIBusId``'s error and the later tests ``Skip - All``; at level 1 (no PCIe
    test) ``CUDA Main Library`` fails the same way (ours)."""
    device = DEVICE_IDS.get(gpu_model.upper(), DEVICE_IDS["H200"])
    out = _HEAD + _metadata(DCGM3_VERSION, gpus, device, ",")
    out += _category_line("Deployment", True)
    failed = False
    for name in _DCGM3_DEPLOYMENT:
        if level == 1 and name == "CUDA Main Library":
            out += _row(name, "Fail - All") + _wrapped("Warning", _CUDA_PCI_WARNING)
            failed = True
        else:
            out += _row(name, "Pass")
    category = "Deployment"
    order = ("Deployment", "Integration", "Hardware", "Stress")  # 3.x's order
    for cat, test in sorted(_tests(level), key=lambda ct: order.index(ct[0])):
        if cat == "Deployment":
            continue
        if cat != category:
            out += _category_line(cat, False)
            category = cat
        if not failed and test == "pcie":
            out += _row(_DCGM3_NAMES[test], "Fail - All") + _wrapped("Warning", _CUDA_PCI_WARNING)
            failed = True
        else:
            out += _row(_DCGM3_NAMES[test], "Skip - All")
    return out + _RULE + "\n"


def dcgm_diag_dialect(faults: Iterable[Fault]) -> str | None:
    """The DCGM fault whose dialect ``node``'s ``dcgmi diag`` answers in (``faults``: the
    node's own), the first of :data:`DIALECT_ORDER` in force; None: the healthy JSON."""
    kinds = {f.kind for f in faults}
    return next((k for k in DIALECT_ORDER if k in kinds), None)


def gpu_health_outputs(
    node: str,
    faults: Iterable[Fault],
    *,
    gpu_model: str,
    gpus: int,
    diag_level: int = 1,
    diag_format: str = "json",
) -> GpuHealthOutputs:
    """What ``node``'s health tools print with ``faults`` (its GPU and DCGM faults) in force.
    ``diag_format``: ``json`` (``dcgmi diag -j``, DCGM 4.x) or ``text`` (DCGM 4.x's table);
    a DCGM fault's dialect overrides it."""
    if diag_level not in (1, 2, 3, 4):
        raise ValueError(f"dcgmi diag runs at level 1, 2, 3 or 4, not {diag_level!r}")
    if diag_format not in ("json", "text"):
        raise ValueError(f"dcgmi diag prints json or text, not {diag_format!r}")
    mine = [f for f in faults if f.node == node]
    state, throttling = gpu_states(node, mine, gpus)
    dialect = dcgm_diag_dialect(mine)
    if diag_level >= HANGS_FROM_LEVEL.get(gpu_model.upper(), 5):
        dialect = "dcgm-hang"
    smi = nvidia_smi_remap_ecc(state)
    exit_status = NVVS_ERROR_EXIT if _fails(state, diag_level) else 0
    if dialect == "dcgm-hang":
        diag, exit_status = "", TIMED_OUT
    elif dialect == "dcgm-in-use":
        diag, exit_status = dcgm_runtime_error_json(IN_USE_ERROR), IN_USE_EXIT
    elif dialect == "dcgm-truncated":
        full = dcgm_diag_json(node, state, diag_level)
        diag = full[: len(full) // 2]
        smi = smi[: smi.rindex("    Remapped Rows")]
    elif dialect == "dcgm-skip-all":
        diag = dcgm_diag_json(node, state, diag_level, skip_all=True)
    elif dialect == "dcgm-internal-error":
        exit_status = NVVS_ERROR_EXIT
        if diag_format == "text":
            diag = dcgm_diag_text(state, diag_level, internal_error=True, gpu_model=gpu_model)
        else:
            diag = dcgm_diag_json(node, state, diag_level, internal_error=True)
    elif dialect == "dcgm-fail-all":
        diag = dcgm3_fail_all_text(len(state), diag_level, gpu_model)
        exit_status = NVVS_ERROR_EXIT
    elif diag_format == "text":
        diag = dcgm_diag_text(state, diag_level, gpu_model=gpu_model)
    else:
        diag = dcgm_diag_json(node, state, diag_level)
    return GpuHealthOutputs(
        kernel_log=kernel_log(node, state),
        nvidia_smi=smi,
        nvlink=nvlink_errors(node, state, gpu_model),
        dcgm_diag=diag,
        diag_level=diag_level,
        throttling=throttling,
        dcgm_exit=exit_status,
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
    node: str,
    faults: Iterable[Fault],
    *,
    gpu_model: str,
    gpus: int,
    diag_level: int,
    diag_timeout_s: int | None = None,
    diag_format: str = "json",
) -> str:
    """What one node's pod of the GPU health check prints (``include/manifests/
    gpu-health.yaml.j2``'s script): each tool's output under its section marker, followed by
    its exit status (:data:`EXIT_LINE`); the node line names the level and ``dcgmi diag``'s
    timeout (``diag_timeout_s``; default: ``tiers.diag_timeout`` of the model and level)."""
    from gpufleet.parsing.health.report import section_line

    out = gpu_health_outputs(
        node, faults, gpu_model=gpu_model, gpus=gpus, diag_level=diag_level, diag_format=diag_format
    )
    timeout_s = diag_timeout(gpu_model, diag_level) if diag_timeout_s is None else diag_timeout_s
    state = "Active" if out.throttling else "Not Active"
    # (section, output, exit status; None: a line the script echoes, no tool)
    sections: tuple[tuple[str, str, int | None], ...] = (
        ("node", f"node={node} level={diag_level} timeout={timeout_s}\n", None),
        ("dmesg", out.kernel_log, 0),
        ("nvidia-smi-remap-ecc", out.nvidia_smi, 0),
        ("nvidia-smi-nvlink", out.nvlink, 0),
        ("thermal", "".join(f"{i}, {state}, Not Active\n" for i in range(gpus)), 0),
        ("dcgmi-diag", out.dcgm_diag, out.dcgm_exit),
    )
    text = ""
    for key, body, status in sections:
        text += f"{section_line(key)}\n{body}"
        if status is not None:  # printf '\ngpufleet-health-exit=%s\n' "$?": its own line,
            text += "\n" + EXIT_LINE.format(status) + "\n"  # even after a cut-off output
    return text
