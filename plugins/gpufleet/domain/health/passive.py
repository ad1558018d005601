"""Passive GPU health: one action per node from what its dcgm-exporter serves while a job holds
the GPUs, by the same rules as the nightly's check.

Design: docs/design/gpu-health.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpufleet.domain.health.catalog import A, Finding, HealthDecision
from gpufleet.domain.health.decide import (
    THROTTLE_ADVICE,
    decision_of,
    memory_finding,
    nvlink_down_finding,
    xid_finding,
)

__all__ = ["PASSIVE", "PASSIVE_SIGNALS", "decide_passive"]

PASSIVE = "read passively from dcgm-exporter"
# the exporter's signals (``parse_dcgm_exporter``'s ``signals``) that take part, and what each
# is named in a note when the exporter does not serve it
PASSIVE_SIGNALS = {
    "xid": "Xid (DCGM_FI_DEV_XID_ERRORS)",
    "row_remap_pending": "pending row remaps (DCGM_FI_DEV_ROW_REMAP_PENDING)",
    "row_remap_failure": "row remap failures (DCGM_FI_DEV_ROW_REMAP_FAILURE)",
    "ecc_dbe_volatile": "volatile double-bit ECC (DCGM_FI_DEV_ECC_DBE_VOL_*)",
    "nvlink_state": "NVLink state (DCGM_FI_DEV_NVLINK_GET_STATE)",
    "thermal": "thermal slowdown (DCGM_FI_DEV_CLOCKS_EVENT_REASONS)",
}
_ON_CHIP = ("sram", "l1", "l2", "reg", "tex", "shm", "cbu")


@dataclass(frozen=True)
class _Event:
    """An Xid as ``xid_finding`` reads it: the exporter gives the code, not the driver's text."""

    code: int
    message: str = ""


@dataclass(frozen=True)
class _Memory:
    """A GPU's row remapper and volatile ECC counters as ``memory_finding`` reads them."""

    remap_pending: bool | None
    remap_failure: bool | None
    ecc_volatile: dict[str, int] = field(default_factory=dict)


def _name(gpu: Any) -> str:
    return f"GPU {gpu.index} (PCI {gpu.pci_bus})" if gpu.pci_bus else f"GPU {gpu.index}"


def _volatile(dbe: dict[str, int]) -> dict[str, int]:
    """The exporter's DBE locations under ``memory_finding``'s names: device memory is DRAM,
    what the row remapper repairs; the rest is on-chip SRAM; a total alone as the old layout."""
    out: dict[str, int] = {}
    if "dram" in dbe:
        out["dram_uncorrectable"] = dbe["dram"]
    if any(k in dbe for k in _ON_CHIP):  # SRAM (Turing on), or its older locations
        older = sum(dbe.get(k, 0) for k in _ON_CHIP if k != "sram")
        out["sram_uncorrectable"] = max(dbe.get("sram", 0), older)
    if not any(out.values()) and dbe.get("total"):
        out["double_bit_total"] = dbe["total"]
    return out


def _gpu_findings(gpu: Any) -> list[Finding]:
    name = _name(gpu)
    findings: list[Finding] = []
    memory = _Memory(gpu.remap_pending, gpu.remap_failure, _volatile(gpu.dbe_volatile))
    found = memory_finding(memory, name)
    if found is not None:
        findings.append(found)
    if rows := gpu.remapped_rows.get("uncorrectable"):
        said = f"{name}: {rows} row(s) remapped for uncorrectable errors"
        findings.append(Finding(A.HEALTHY, said))
    findings += [nvlink_down_finding(name, link.link) for link in gpu.links if link.down]
    if errors := {k: v for k, v in gpu.nvlink_errors.items() if v}:
        counts = ", ".join(f"{k} {v}" for k, v in errors.items())
        findings.append(Finding(A.HEALTHY, f"{name}: NVLink error totals {counts}", degrading=True))
    codes = ([gpu.last_xid] if gpu.last_xid else []) + list(gpu.xid_counts)
    for code in dict.fromkeys(codes):
        found = xid_finding(_Event(code), name, set(codes) - {code})
        if found is not None:
            findings.append(found)
    return findings


def _throttling(gpus: list[Any]) -> Finding | None:
    hot = [(g, g.thermal_slowdown) for g in gpus if g.thermal_slowdown]
    if not hot:
        return None
    said = ", ".join(f"GPU {g.index} ({'+'.join(events)})" for g, events in hot)
    return Finding(A.REPAIR, f"{said} slowed for heat: {THROTTLE_ADVICE}")


def decide_passive(report: Any) -> HealthDecision | None:
    """One node's action from its dcgm-exporter's fields (a ``DcgmExporterReport``); None when
    the exporter serves none of :data:`PASSIVE_SIGNALS` for any GPU."""
    served = set(report.signals) & set(PASSIVE_SIGNALS)
    if not served or not report.gpus:
        return None
    findings: list[Finding] = []
    for gpu in report.gpus:
        findings += _gpu_findings(gpu)
    throttling = _throttling(list(report.gpus))
    if throttling is not None:
        findings.append(throttling)
    missing = [said for key, said in PASSIVE_SIGNALS.items() if key not in served]
    if missing:
        findings.append(Finding(A.HEALTHY, f"dcgm-exporter does not serve {', '.join(missing)}"))
    decision = decision_of(findings)
    return HealthDecision(decision.action, f"{PASSIVE}: {decision.reason}", decision.findings)
