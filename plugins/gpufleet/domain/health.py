"""GPU health (issue 20): NVIDIA's Xid catalog as data, and one action per node from the node's
own signals.

Pure: no I/O. :func:`decide_health` reads what the parsers in ``gpufleet.parsing.health``
return (an ``XidLog``, an ``NvidiaSmiMemoryReport``, an ``NvlinkErrorReport``, a
``DcgmDiagResult``; the layers keep the domain from importing them, so they are read by their
fields) and a ``throttling`` flag, and returns a :class:`HealthDecision`: one of
:class:`HealthAction` with a one-line reason naming the signal, the GPU and NVIDIA's recommended
action, and every finding behind it. The most severe finding wins, in the order of
:class:`HealthAction`: ``healthy`` < ``reset_gpu`` < ``reboot`` < ``needs_human`` < ``repair``.
A reboot resets every GPU, so it settles a reset; a person is asked before anything would be
reset or rebooted over evidence they should see; a repair (the cloud's reportHostAsFaulty or the
node group's replacement) moves the machine to other hardware, which settles all of them.

The rules and their sources:

- **Xid events**: each code's NVIDIA resolution bucket (immediate action), from NVIDIA's "Xid
  Catalog" (https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html), in
  :data:`XID_CATALOG`. ``IGNORE`` and ``RESTART_APP`` leave the node healthy (a note: the GPU is
  fine, the application restarts); ``RESET_GPU`` -> ``reset_gpu``; ``RESTART_BM`` -> ``reboot``;
  ``CONTACT_SUPPORT`` -> ``needs_human``. The workflows: ``WORKFLOW_XID_48`` and
  ``WORKFLOW_NVLINK_ERR`` -> ``reset_gpu`` (the catalog's text for Xid 48 and 74: "A GPU reset
  or node reboot is needed to clear this error"); ``WORKFLOW_XID_45`` follows the other Xids of
  the GPU when there are any ("Not Solo: IGNORE (follow other Xid)"), and alone asks for a
  Fabric Manager restart ("Solo: RESTART_FM"), which gpufleet does not do: ``needs_human``;
  ``XID_154`` carries the recovery action in its text ("GPU recovery action changed from 0x0
  (None) to 0x2 (Node Reboot Required)"), read by :data:`RECOVERY_ACTIONS`. A code not in the
  catalog is ``needs_human``: look it up.
- **Row remapping** (``nvidia-smi -q -d ROW_REMAPPER``), after NVIDIA's "GPU Memory Error
  Management" (https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/row-remapping.html and
  .../error-recovery-and-response-flags.html): a pending remap "will happen at the next GPU
  reset" -> ``reset_gpu``; a remapping failure is an RMA condition ("RMA Policy Thresholds for
  Row-Remapping") -> ``repair``.
- **Uncorrectable (double-bit) ECC** (the *volatile* counters: this boot's errors; the
  aggregate ones outlive every repair): DRAM errors are what the row remapper repairs, so with a
  remap pending they are explained -> ``reset_gpu`` (the reset activates the remap). Otherwise
  (SRAM, which no remap repairs, or DRAM with no remap pending or after a failure) -> ``repair``,
  the issue's rule. NVIDIA is gentler on a single error: the catalog's Xid 48 text asks for a
  GPU reset, and sends SRAM errors to the RMA flow only past the SRAM threshold flag
  (``sram_threshold_exceeded``); gpufleet does not wait for the threshold.
- **NVLink** (``nvidia-smi nvlink -e``): a link shown ``<inactive>`` is down -> ``repair``
  (the issue's rule: NVLink and NVSwitch are the machine's hardware; NVIDIA's own triage, DCGM's
  ``DCGM_FR_NVLINK_DOWN``, resets the GPU and reruns the diagnostics first, which an Xid 74 in
  the same log asks for anyway). Non-zero error counters are a note: NVIDIA names no threshold
  for them here.
- **dcgmi diag**: a test that fails on a GPU -> ``repair``, named with its level and test
  (DCGM's suggestion for hardware failures: "Run a field diagnostic on the GPU"), unless DCGM's
  own error ids say otherwise (:data:`DCGM_ERROR_ACTIONS`: configuration it tells a person to
  fix -> ``needs_human``; "Drain the GPU and reset it or reboot the node", or a pending row
  remap -> ``reset_gpu``). A warning -> healthy, with a note. Ids and next steps from DCGM's
  ``dcgm_errors.h`` (NVIDIA/DCGM ``dcgmlib/dcgm_errors.h``; NVIDIA/go-dcgm vendors it).
- **Thermal throttling** (the clocks slowed by a HW or SW thermal slowdown, not a power cap) ->
  ``repair``. NVIDIA's guidance is about the machine, not the GPU: DCGM's next step for
  ``DCGM_FR_CLOCK_THROTTLE_THERMAL`` is "Verify that the cooling on this machine is functional,
  including external, thermal material interface, fans" (``dcgm_errors.h``), and NVSentinel
  treats a GPU past its HW-slowdown temperature as fatal: cordon, ``CONTACT_SUPPORT``
  (https://docs.nvidia.com/nvsentinel/runbooks/gpu-thermal-margin.md). A reset or a reboot
  leaves the cooling as it was, and a cloud tenant reaches a host's cooling only through the
  provider's repair; meanwhile the node is slow, and a slow node slows every collective it is
  in.

Left out of the catalog: none of the codes asked for (13, 31, 43, 45, 48, 61, 62, 63, 64, 74,
79, 92, 94, 95, 119, 120, 140, 154) lacked a bucket in NVIDIA's catalog; 46 is added. Xid 61
(``PMU_BREAKPOINT``) is "Unused" on A100, H100, B100 and GB200: the catalog's bucket for unused
codes, ``CONTACT_SUPPORT``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = [
    "DCGM_ERROR_ACTIONS",
    "RECOVERY_ACTIONS",
    "XID_CATALOG",
    "Finding",
    "HealthAction",
    "HealthDecision",
    "XidEntry",
    "decide_health",
]


class HealthAction(StrEnum):
    """What a node needs, least severe first: the order in which the most severe wins."""

    HEALTHY = "healthy"
    RESET_GPU = "reset_gpu"
    REBOOT = "reboot"
    NEEDS_HUMAN = "needs_human"
    REPAIR = "repair"  # hardware: the cloud's repair or replacement of the machine


A = HealthAction
_SEVERITY = {action: rank for rank, action in enumerate(HealthAction)}


@dataclass(frozen=True)
class XidEntry:
    """One row of NVIDIA's Xid catalog: the code, its mnemonic, what it means and NVIDIA's
    resolution bucket (immediate action)."""

    code: int
    mnemonic: str
    meaning: str
    bucket: str


XID_CATALOG: dict[int, XidEntry] = {
    e.code: e
    for e in (
        XidEntry(13, "ROBUST_CHANNEL_GR_EXCEPTION", "Graphics Engine Exception", "RESTART_APP"),
        XidEntry(
            31, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "GPU memory page fault", "RESTART_APP"
        ),
        XidEntry(43, "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "GPU stopped processing", "IGNORE"),
        XidEntry(
            45,
            "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL",
            "Preemptive cleanup, due to previous errors",
            "WORKFLOW_XID_45",
        ),
        XidEntry(46, "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "GPU stopped processing", "RESET_GPU"),
        XidEntry(48, "ROBUST_CHANNEL_GPU_ECC_DBE", "Double Bit ECC Error", "WORKFLOW_XID_48"),
        XidEntry(61, "PMU_BREAKPOINT", "Unused (PMU breakpoint)", "CONTACT_SUPPORT"),
        XidEntry(62, "PMU_HALT_ERROR", "Internal micro-controller halt", "RESET_GPU"),
        XidEntry(63, "INFOROM_DRAM_RETIREMENT_EVENT", "GPU memory remapping event", "IGNORE"),
        XidEntry(
            64, "INFOROM_DRAM_RETIREMENT_FAILURE", "GPU memory remapping failure", "RESET_GPU"
        ),
        XidEntry(74, "NVLINK_ERROR", "NVLINK Error", "WORKFLOW_NVLINK_ERR"),
        XidEntry(
            79,
            "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS",
            "GPU has fallen off the bus",
            "RESTART_BM",
        ),
        XidEntry(92, "EXCESSIVE_SBE_INTERRUPTS", "High single-bit ECC error rate", "IGNORE"),
        XidEntry(94, "ROBUST_CHANNEL_CONTAINED_ERROR", "Contained memory error", "RESTART_APP"),
        XidEntry(95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", "Uncontained memory error", "RESET_GPU"),
        XidEntry(119, "GSP_RPC_TIMEOUT", "GSP RPC Timeout", "RESET_GPU"),
        XidEntry(120, "GSP_ERROR", "GSP Error", "RESET_GPU"),
        XidEntry(140, "UNRECOVERABLE_ECC_ERROR_ESCAPE", "ECC Unrecovered Error", "RESET_GPU"),
        XidEntry(154, "GPU_RECOVERY_ACTION_CHANGED", "GPU Recovery Action Changed", "XID_154"),
    )
}

# NVIDIA's buckets that name one action; the two workflows that end in a GPU reset.
_BUCKET_ACTIONS = {
    "IGNORE": A.HEALTHY,
    "RESTART_APP": A.HEALTHY,
    "RESET_GPU": A.RESET_GPU,
    "WORKFLOW_XID_48": A.RESET_GPU,
    "WORKFLOW_NVLINK_ERR": A.RESET_GPU,
    "RESTART_BM": A.REBOOT,
    "CONTACT_SUPPORT": A.NEEDS_HUMAN,
}
_BUCKET_WORDS = {
    "IGNORE": "nothing to do",
    "RESTART_APP": "restart the application; the GPU is fine",
    "RESET_GPU": "reset the GPU",
    "WORKFLOW_XID_48": "reset the GPU (WORKFLOW_XID_48)",
    "WORKFLOW_NVLINK_ERR": "reset the GPU or reboot (WORKFLOW_NVLINK_ERR)",
    "RESTART_BM": "reboot the node (RESTART_BM)",
    "CONTACT_SUPPORT": "contact support (CONTACT_SUPPORT)",
}

# Xid 154's recovery actions, as the catalog lists the words it prints.
RECOVERY_ACTIONS = {
    "none": A.HEALTHY,
    "drain p2p": A.NEEDS_HUMAN,  # quiesce peer-to-peer traffic, then ask the driver again
    "drain and reset": A.RESET_GPU,
    "gpu reset required": A.RESET_GPU,
    "node reboot required": A.REBOOT,
}
_RECOVERY = re.compile(r"\bto\s+0x[0-9a-fA-F]+\s*\((?P<action>[^)]*)\)")

# DCGM error ids (dcgm_errors.h) whose next step, as DCGM words it, is not the hardware's
# service: a configuration fix for a person, or "Drain the GPU and reset it or reboot the node"
# (a volatile DBE, an uncontained error, pending retirements after a DBE), or a reset for a
# pending row remap (the row remapper applies it at the next GPU reset).
DCGM_ERROR_ACTIONS = {
    4: A.RESET_GPU,  # DCGM_FR_VOLATILE_DBE_DETECTED
    81: A.RESET_GPU,  # DCGM_FR_UNCONTAINED_ERROR
    83: A.RESET_GPU,  # DCGM_FR_DBE_PENDING_PAGE_RETIREMENTS
    22: A.NEEDS_HUMAN,  # DCGM_FR_CANNOT_OPEN_LIB
    23: A.NEEDS_HUMAN,  # DCGM_FR_DENYLISTED_DRIVER
    25: A.NEEDS_HUMAN,  # DCGM_FR_GRAPHICS_PROCESSES
    28: A.NEEDS_HUMAN,  # DCGM_FR_BAD_CUDA_ENV
    29: A.NEEDS_HUMAN,  # DCGM_FR_PERSISTENCE_MODE
    55: A.NEEDS_HUMAN,  # DCGM_FR_ECC_DISABLED
    96: A.NEEDS_HUMAN,  # DCGM_FR_FILE_CREATE_PERMISSIONS
    108: A.NEEDS_HUMAN,  # DCGM_FR_CUDA_FM_NOT_INITIALIZED
    85: A.RESET_GPU,  # DCGM_FR_PENDING_ROW_REMAP
}


@dataclass(frozen=True)
class Finding:
    """What one signal says about one GPU (or the node): the action and why, in one line."""

    action: HealthAction
    reason: str


@dataclass(frozen=True)
class HealthDecision:
    """One node's action, the reason of its most severe finding, and every finding (most
    severe first): the ``healthy`` ones are notes."""

    action: HealthAction
    reason: str
    findings: tuple[Finding, ...] = ()

    @property
    def notes(self) -> tuple[str, ...]:
        return tuple(f.reason for f in self.findings if f.action is A.HEALTHY)


def _bus_key(bus: str) -> tuple[int, int, int] | None:
    """``0000:3b:00`` (kernel log) and ``00000000:3B:00.0`` (nvidia-smi) as one key."""
    parts = bus.lower().split(".")[0].split(":")
    try:
        return int(parts[-3], 16), int(parts[-2], 16), int(parts[-1], 16)
    except (IndexError, ValueError):
        return None


def _gpu_indexes(memory: Any) -> dict[tuple[int, int, int] | None, int]:
    """PCI bus -> nvidia-smi's GPU index: ``nvidia-smi -q`` prints the GPUs in index order."""
    gpus = getattr(memory, "gpus", ()) if memory is not None else ()
    return {_bus_key(g.pci_bus): index for index, g in enumerate(gpus)}


def _gpu_name(bus: str, indexes: dict[tuple[int, int, int] | None, int]) -> str:
    index = indexes.get(_bus_key(bus))
    return f"GPU {index} (PCI {bus})" if index is not None else f"the GPU at PCI {bus}"


# --- Xid events ------------------------------------------------------------------------------


def _xid_finding(event: Any, gpu: str, others: set[int]) -> Finding | None:
    entry = XID_CATALOG.get(event.code)
    if entry is None:
        return Finding(
            A.NEEDS_HUMAN,
            f"{gpu}: Xid {event.code} is not in gpufleet's Xid catalog: look it up in NVIDIA's",
        )
    said = f"{gpu}: Xid {entry.code} ({entry.meaning})"
    if entry.bucket == "WORKFLOW_XID_45":
        if others:
            return None  # NVIDIA: "Not Solo: IGNORE (follow other Xid)"
        return Finding(
            A.NEEDS_HUMAN,
            f"{said} with no other Xid: NVIDIA says restart Fabric Manager "
            "(WORKFLOW_XID_45, solo: RESTART_FM), which gpufleet does not do",
        )
    if entry.bucket == "XID_154":
        found = _RECOVERY.search(event.message or "")
        words = " ".join(found.group("action").split()) if found else ""
        action = RECOVERY_ACTIONS.get(words.lower(), A.NEEDS_HUMAN)
        return Finding(
            action, f"{said}: the driver asks for {words or 'an action it does not name'} (XID_154)"
        )
    return Finding(
        _BUCKET_ACTIONS[entry.bucket], f"{said}: NVIDIA says {_BUCKET_WORDS[entry.bucket]}"
    )


def _xid_findings(xid: Any, indexes: dict[tuple[int, int, int] | None, int]) -> list[Finding]:
    """One finding per GPU and code, in the order first logged."""
    codes: dict[str, dict[int, Any]] = {}
    for event in xid.events:
        codes.setdefault(event.pci_bus, {}).setdefault(event.code, event)
    findings = []
    for bus, events in codes.items():
        for code, event in events.items():
            found = _xid_finding(event, _gpu_name(bus, indexes), set(events) - {code})
            if found is not None:
                findings.append(found)
    return findings


# --- nvidia-smi: row remapping and ECC --------------------------------------------------------


def _uncorrectable(counters: dict[str, int | None]) -> dict[str, int]:
    """The volatile uncorrectable (double-bit) counters above 0, by name."""
    return {
        name: n
        for name, n in counters.items()
        if n and ("uncorrectable" in name or name.startswith("double_bit"))
    }


def _memory_finding(gpu: Any, name: str) -> Finding | None:
    errors = _uncorrectable(gpu.ecc_volatile)
    shown = ", ".join(f"{k} {v}" for k, v in errors.items())
    if gpu.remap_failure:
        return Finding(
            A.REPAIR,
            f"{name}: row remapping failure occurred: NVIDIA's RMA condition for row "
            "remapping: replace the GPU",
        )
    unexplained = {k for k in errors if not gpu.remap_pending or "sram" in k}
    if unexplained:
        return Finding(
            A.REPAIR,
            f"{name}: uncorrectable ECC errors ({shown}) no pending row remap explains: "
            "replace the GPU (NVIDIA: what a reset does not clear follows the RMA flow)",
        )
    if gpu.remap_pending:
        explained = f" after uncorrectable ECC errors ({shown})" if errors else ""
        return Finding(
            A.RESET_GPU,
            f"{name}: row remapping pending{explained}: NVIDIA says reset the GPU to apply it",
        )
    return None


def _memory_findings(memory: Any) -> list[Finding]:
    findings = (_memory_finding(g, f"GPU {i} (PCI {g.pci_bus})") for i, g in enumerate(memory.gpus))
    return [f for f in findings if f is not None]


# --- NVLink ------------------------------------------------------------------------------------


def _nvlink_findings(nvlink: Any) -> list[Finding]:
    findings = []
    for gpu in nvlink.gpus:
        for link in gpu.links:
            if link.inactive:
                findings.append(
                    Finding(
                        A.REPAIR,
                        f"GPU {gpu.index}: NVLink {link.link} is down: repair the machine "
                        "(NVLink is its hardware; NVIDIA: contact the vendor when a reset "
                        "does not clear it)",
                    )
                )
            elif errors := {k: v for k, v in link.counters.items() if v}:
                counts = ", ".join(f"{k} {v}" for k, v in errors.items())
                findings.append(
                    Finding(A.HEALTHY, f"GPU {gpu.index}: NVLink {link.link} counted {counts}")
                )
    return findings


# --- dcgmi diag --------------------------------------------------------------------------------


_DIAG_ADVICE = {
    A.REPAIR: "repair the machine (DCGM: run a field diagnostic on the GPU)",
    A.NEEDS_HUMAN: "a person fixes what DCGM names (configuration, not hardware)",
    A.RESET_GPU: "reset the GPU (DCGM's next step)",
}


def _diag_action(error_codes: Iterable[int]) -> HealthAction:
    """A failed test's action: what DCGM's error ids ask for, hardware (repair) by default."""
    actions = [DCGM_ERROR_ACTIONS.get(code, A.REPAIR) for code in error_codes]
    return max(actions, key=_SEVERITY.__getitem__) if actions else A.REPAIR


def _diag_findings(diag: Any, level: int | None) -> list[Finding]:
    run = f"dcgmi diag -r {level}" if level is not None else "dcgmi diag"
    findings = []
    for test in diag.tests:
        for gpu in test.gpus:
            said = f": {gpu.messages[0]}" if gpu.messages else ""
            where = f"GPU {gpu.gpu}: {run} test {test.name!r}"
            if gpu.status == "fail":
                action = _diag_action(gpu.error_codes)
                findings.append(Finding(action, f"{where} failed{said}: {_DIAG_ADVICE[action]}"))
            elif gpu.status == "warn":
                findings.append(Finding(A.HEALTHY, f"{where} warned{said}"))
    return findings


# --- the decision ------------------------------------------------------------------------------

_THROTTLING = Finding(
    A.REPAIR,
    "the node's GPUs throttle for heat: repair the machine (NVIDIA/DCGM: verify the machine's "
    "cooling; NVSentinel: HW thermal slowdown is fatal, CONTACT_SUPPORT)",
)


def decide_health(
    *,
    xid: Any = None,
    memory: Any = None,
    nvlink: Any = None,
    diag: Any = None,
    diag_level: int | None = None,
    throttling: bool = False,
) -> HealthDecision:
    """One node's action from its signals (``None``: not read): ``xid`` an ``XidLog``,
    ``memory`` an ``NvidiaSmiMemoryReport``, ``nvlink`` an ``NvlinkErrorReport``, ``diag`` a
    ``DcgmDiagResult`` of ``dcgmi diag -r diag_level``, ``throttling`` whether the GPUs throttle
    for heat. With no signal at all there is nothing to call the node healthy on: ``needs_human``.
    """
    if xid is None and memory is None and nvlink is None and diag is None and not throttling:
        return HealthDecision(A.NEEDS_HUMAN, "no GPU health signal was read for this node")
    # the GPUs' state before the events that led to it: among equals the first names the cause
    findings: list[Finding] = []
    if memory is not None:
        findings += _memory_findings(memory)
    if nvlink is not None:
        findings += _nvlink_findings(nvlink)
    if diag is not None:
        findings += _diag_findings(diag, diag_level)
    if xid is not None:
        findings += _xid_findings(xid, _gpu_indexes(memory))
    if throttling:
        findings.append(_THROTTLING)
    ordered = tuple(sorted(findings, key=lambda f: -_SEVERITY[f.action]))
    if not ordered or ordered[0].action is A.HEALTHY:
        notes = f" ({len(ordered)} note(s))" if ordered else ""
        return HealthDecision(A.HEALTHY, f"no GPU health signal calls for action{notes}", ordered)
    worst = ordered[0]
    more = sum(1 for f in ordered[1:] if f.action is worst.action)
    return HealthDecision(
        worst.action, worst.reason + (f" (and {more} more)" if more else ""), ordered
    )
