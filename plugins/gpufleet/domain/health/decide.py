"""One action per node from its parsed signals: :func:`decide_health` (the rules are in the
package's docstring). Pure: no I/O. The findings of one signal (:func:`xid_finding`,
:func:`memory_finding`, :func:`nvlink_down_finding`, :data:`THROTTLE_ADVICE`) and the decision
over a node's findings (:func:`decision_of`) are shared with ``passive`` (the same rules, read
from dcgm-exporter's metrics)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gpufleet.domain.health.catalog import (
    BUCKET_ACTIONS,
    BUCKET_WORDS,
    DCGM_ERROR_ACTIONS,
    RECOVERY,
    RECOVERY_ACTIONS,
    SEVERITY,
    XID_CATALOG,
    A,
    Finding,
    HealthAction,
    HealthDecision,
)


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


def xid_finding(event: Any, gpu: str, others: set[int]) -> Finding | None:
    """What one Xid ``event`` (its ``code``, and its ``message`` for Xid 154) on ``gpu`` asks
    for, ``others`` being the other Xid codes of the same GPU (Xid 45 follows them); None when
    it asks for nothing of its own."""
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
        found = RECOVERY.search(event.message or "")
        words = " ".join(found.group("action").split()) if found else ""
        action = RECOVERY_ACTIONS.get(words.lower(), A.NEEDS_HUMAN)
        return Finding(
            action, f"{said}: the driver asks for {words or 'an action it does not name'} (XID_154)"
        )
    return Finding(
        BUCKET_ACTIONS[entry.bucket], f"{said}: NVIDIA says {BUCKET_WORDS[entry.bucket]}"
    )


def _xid_findings(xid: Any, indexes: dict[tuple[int, int, int] | None, int]) -> list[Finding]:
    """One finding per GPU and code, in the order first logged."""
    codes: dict[str, dict[int, Any]] = {}
    for event in xid.events:
        codes.setdefault(event.pci_bus, {}).setdefault(event.code, event)
    findings = []
    for bus, events in codes.items():
        for code, event in events.items():
            found = xid_finding(event, _gpu_name(bus, indexes), set(events) - {code})
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


def memory_finding(gpu: Any, name: str) -> Finding | None:
    """What one GPU's row remapper (``remap_failure``, ``remap_pending``) and volatile ECC
    counters (``ecc_volatile``: name -> count) ask for; None when nothing."""
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
    findings = (memory_finding(g, f"GPU {i} (PCI {g.pci_bus})") for i, g in enumerate(memory.gpus))
    return [f for f in findings if f is not None]


# --- NVLink ------------------------------------------------------------------------------------


def nvlink_down_finding(gpu: str, link: int) -> Finding:
    """NVLink ``link`` of ``gpu`` is down."""
    return Finding(
        A.REPAIR,
        f"{gpu}: NVLink {link} is down: repair the machine (NVLink is its hardware; NVIDIA: "
        "contact the vendor when a reset does not clear it)",
    )


def _nvlink_findings(nvlink: Any) -> list[Finding]:
    findings = []
    for gpu in nvlink.gpus:
        for link in gpu.links:
            if link.inactive:
                findings.append(nvlink_down_finding(f"GPU {gpu.index}", link.link))
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
    return max(actions, key=SEVERITY.__getitem__) if actions else A.REPAIR


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

THROTTLE_ADVICE = (
    "repair the machine (NVIDIA/DCGM: verify the machine's cooling; NVSentinel: HW thermal "
    "slowdown is fatal, CONTACT_SUPPORT)"
)
_THROTTLING = Finding(A.REPAIR, f"the node's GPUs throttle for heat: {THROTTLE_ADVICE}")


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
    return decision_of(findings)


def decision_of(findings: Iterable[Finding]) -> HealthDecision:
    """The decision over a node's findings: the most severe wins (among equals the first), its
    reason counting the others of the same action; none, or only notes, is healthy."""
    ordered = tuple(sorted(findings, key=lambda f: -SEVERITY[f.action]))
    if not ordered or ordered[0].action is A.HEALTHY:
        notes = f" ({len(ordered)} note(s))" if ordered else ""
        return HealthDecision(A.HEALTHY, f"no GPU health signal calls for action{notes}", ordered)
    worst = ordered[0]
    more = sum(1 for f in ordered[1:] if f.action is worst.action)
    return HealthDecision(
        worst.action, worst.reason + (f" (and {more} more)" if more else ""), ordered
    )
