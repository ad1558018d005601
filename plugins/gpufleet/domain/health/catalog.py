"""NVIDIA's Xid catalog and DCGM's error ids as data, and the actions they lead to (see
docs/design/gpu-health.md for the rules and their sources). Pure: no I/O."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum


class HealthAction(StrEnum):
    """What a node needs, least severe first: the order in which the most severe wins. A
    check that could not run (``could_not_run``) outranks only ``healthy``: any real failure
    finding wins over it, and a node with only healthy findings and one that could not run is
    ``could_not_run``, never healthy."""

    HEALTHY = "healthy"
    COULD_NOT_RUN = "could_not_run"  # not a hardware verdict: checked again, never acted on
    RESET_GPU = "reset_gpu"
    REBOOT = "reboot"
    NEEDS_HUMAN = "needs_human"
    REPAIR = "repair"  # hardware: the cloud's repair or replacement of the machine


A = HealthAction
SEVERITY = {action: rank for rank, action in enumerate(HealthAction)}


class HealthVerdict(StrEnum):
    """One vocabulary from parser to gate (DESIGN.md, "Verdicts"): ``pass`` (healthy, notes
    at most), ``degraded`` (healthy, but with a finding the catalog treats as degrading:
    :attr:`Finding.degrading`), ``could_not_run`` (a check, or a part of one, did not run:
    never healthy, never a burn-in, never a hardware verdict) and ``fail`` (an action: reset,
    reboot, a person, repair)."""

    PASS = "pass"
    FAIL = "fail"
    COULD_NOT_RUN = "could_not_run"
    DEGRADED = "degraded"


def verdict_of(action: HealthAction, degrading: bool = False) -> HealthVerdict:
    """The verdict of a node's ``action`` (``degrading``: a healthy node with a degrading
    finding)."""
    if action is A.HEALTHY:
        return HealthVerdict.DEGRADED if degrading else HealthVerdict.PASS
    if action is A.COULD_NOT_RUN:
        return HealthVerdict.COULD_NOT_RUN
    return HealthVerdict.FAIL


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
BUCKET_ACTIONS = {
    "IGNORE": A.HEALTHY,
    "RESTART_APP": A.HEALTHY,
    "RESET_GPU": A.RESET_GPU,
    "WORKFLOW_XID_48": A.RESET_GPU,
    "WORKFLOW_NVLINK_ERR": A.RESET_GPU,
    "RESTART_BM": A.REBOOT,
    "CONTACT_SUPPORT": A.NEEDS_HUMAN,
}
BUCKET_WORDS = {
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
RECOVERY = re.compile(r"\bto\s+0x[0-9a-fA-F]+\s*\((?P<action>[^)]*)\)")

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
    # the test itself did not run or could not finish (DCGM's own software, the test's
    # environment, a user's signal): nothing said about the hardware -> could_not_run
    21: A.COULD_NOT_RUN,  # DCGM_FR_BAD_PARAMETER
    27: A.COULD_NOT_RUN,  # DCGM_FR_FIELD_QUERY ("Error querying a field from DCGM")
    32: A.COULD_NOT_RUN,  # DCGM_FR_CANNOT_GET_FIELD_TAG
    37: A.COULD_NOT_RUN,  # DCGM_FR_UNSUPPORTED_FIELD_TYPE
    44: A.COULD_NOT_RUN,  # DCGM_FR_INTERNAL ("There was an internal error during the test")
    47: A.COULD_NOT_RUN,  # DCGM_FR_ABORTED ("Test was aborted by a user signal")
    48: A.COULD_NOT_RUN,  # DCGM_FR_TEST_DISABLED
    49: A.COULD_NOT_RUN,  # DCGM_FR_CANNOT_GET_STAT
    67: A.COULD_NOT_RUN,  # DCGM_FR_DCGM_API
    68: A.COULD_NOT_RUN,  # DCGM_FR_CONCURRENT_GPUS ("Need multiple GPUs to run this test")
    73: A.COULD_NOT_RUN,  # DCGM_FR_MEMORY_ALLOC_HOST
    82: A.COULD_NOT_RUN,  # DCGM_FR_EMPTY_GPU_LIST
    117: A.COULD_NOT_RUN,  # DCGM_FR_TEST_SKIPPED
    130: A.COULD_NOT_RUN,  # DCGM_FR_RETEST_REQUESTED
}

# dcgmi diag's level-4 (burn-in) tests, as DCGM 3.x/4.x name them (lower case, spaces as
# ``_``): a level-4 check counts as a burn-in only when one of them ran (not skipped)
BURN_IN_TESTS = frozenset({"memtest", "pulse_test", "eud"})

# retired pages (``nvidia-smi -q -d PAGE_RETIREMENT``, pre-Ampere GPUs): DCGM's own limits
# (NVIDIA/DCGM common/DcgmGPUHardwareLimits.h, read by modules/health/DcgmHealthWatch.cpp):
# SBE + DBE pages >= 63 fails the GPU (DCGM_FR_RETIRED_PAGES_LIMIT); DBE pages past 15 with
# more than one more a week fails it (DCGM_FR_RETIRED_PAGES_DBE_LIMIT)
MAX_RETIRED_PAGES = 63
MAX_RETIRED_DBE_PAGES = 15


@dataclass(frozen=True)
class Finding:
    """What one signal says about one GPU (or the node): the action and why, in one line;
    ``degrading``: a healthy finding the catalog treats as degrading (a DCGM warning, NVLink
    error counters); ``code``: for a ``could_not_run``, the tool's status code (a ``DCGM_ST_*``
    name such as ``DCGM_ST_IN_USE``) when it named one."""

    action: HealthAction
    reason: str
    degrading: bool = False
    code: str | None = None


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

    @property
    def verdict(self) -> HealthVerdict:
        """``pass``, ``degraded``, ``could_not_run`` or ``fail`` (:func:`verdict_of`)."""
        return verdict_of(self.action, any(f.degrading for f in self.findings))

    @property
    def not_run_codes(self) -> frozenset[str]:
        """The tools' status codes of the findings that could not run (``DCGM_ST_IN_USE``...)."""
        return frozenset(
            f.code for f in self.findings if f.action is A.COULD_NOT_RUN and f.code is not None
        )


def repair_kind(health: dict | None) -> str:
    """What the node lifecycle asks the cloud for, for a drained node whose retest failed:
    ``reboot`` when its GPU health check (``health``: the check's record, with its ``action``)
    asks for a GPU reset or a reboot (a reboot resets every GPU: gpufleet resets a GPU by
    rebooting its drained node), else ``repair`` (hardware, or a fabric fault: no GPU health
    check behind it)."""
    action = (health or {}).get("action")  # could_not_run never reaches here: not a failure
    return "reboot" if action in (A.RESET_GPU.value, A.REBOOT.value) else "repair"
