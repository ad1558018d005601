"""How a ledger row and a pool's readiness read as text: the cells of the readiness table
(``gpufleet status``, the fleet page) that ``fleet`` (the table), ``health`` (the HEALTH
column's summary) and ``render`` (the templates' filters) all use. Their own module, so those
three import it and not each other."""

from __future__ import annotations

from datetime import datetime
from typing import Any


def details_of(row: dict[str, Any] | None) -> dict[str, Any]:
    """A ledger row's ``details`` when they are a mapping, else empty: the services write a
    mapping, but a row written by hand (a hostile or corrupt ledger) may hold any JSON, and a
    read model shows what is readable rather than failing a page or a report."""
    details = (row or {}).get("details")
    return details if isinstance(details, dict) else {}


def age_text(now: datetime, then: datetime | None) -> str:
    """``42m ago``, ``5h ago`` or ``never``."""
    if then is None:
        return "never"
    minutes = (now - then).total_seconds() / 60
    return f"{minutes:.0f}m ago" if minutes < 120 else f"{minutes / 60:.0f}h ago"


def verdict_text(row: dict) -> str:
    """pass, FAIL, or ERROR for a validation that could not finish (the WHY column says why)."""
    if row.get("verdict") == "error":
        return "ERROR"
    return "pass" if row.get("passed") is True else "FAIL"


def gpu_minutes(row: dict | None) -> float | None:
    """GPU-minutes per node the validation cost (``details["gpu_minutes_per_node"]``)."""
    if not row:
        return None
    value = details_of(row).get("gpu_minutes_per_node")
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def fabric_text(p: dict[str, Any]) -> str:
    """``pass gib 352GB/s 3h ago`` (the readiness table's FABRIC column)."""
    f = p["fabric"]
    if not f:
        return "-"
    bw = f" {f['busbw_gbps']:.0f}GB/s" if f["busbw_gbps"] else ""
    return f"{f['verdict']} {f['transport'] or '?'}{bw} {f['age']}"


def lustre_text(p: dict[str, Any]) -> str:
    """``pass 19.0GB/s 3h ago``, ``n/a`` for a pool without a filesystem, ``-`` if never run."""
    s = p["lustre"]
    if not s:
        return "-" if p["has_filesystem"] else "n/a"
    return f"{s['verdict']} {(s['read_mb_s'] or 0) / 1000:.1f}GB/s {s['age']}"
