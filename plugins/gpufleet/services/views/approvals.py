"""The approvals a person is asked for (docs/remediation.md#approvals), read from the ledger
(``gf_approvals``) for ``gpufleet status`` and the nightly report: those waiting for an answer,
and those answered in the last day (who, when, what came of it)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from gpufleet.store import Ledger

RECENT = timedelta(days=1)


def _answer(row: dict[str, Any]) -> str:
    at = f"{row['answered_at']:%Y-%m-%d %H:%M} UTC"
    if row["state"] == "timed_out":
        return f"nobody answered: {row['answer']} (the default) at {at}"
    if row["state"] == "done":
        return f"approved by {row['answered_by']} at {at}"
    return f"{row['state']} by {row['answered_by']} at {at}"


def approval_rows(ledger: Ledger, now: datetime, limit: int = 200) -> list[dict[str, Any]]:
    """The pending requests and those answered since ``now - RECENT``, newest first."""
    rows = ledger.approvals(limit=limit)
    return [
        r
        for r in rows
        if r["state"] == "pending" or (r["answered_at"] and r["answered_at"] >= now - RECENT)
    ]


def approval_lines(ledger: Ledger, now: datetime) -> list[str]:
    """One sentence per request of ``approval_rows``."""
    out = []
    for r in approval_rows(ledger, now):
        where = f" ({r['dag_id']} {r['run_id']} {r['task_id']}" + (
            f"[{r['map_index']}])" if r["map_index"] is not None and r["map_index"] >= 0 else ")"
        )
        if r["state"] == "pending":
            asked = where if r["dag_id"] else " (not asked yet: remediation_approvals asks it)"
            out.append(f"#{r['id']} {r['kind']} {r['key']}: waiting for a person{asked}")
            continue
        what = f": {r['outcome']}" if r["outcome"] else ""
        out.append(f"#{r['id']} {r['kind']} {r['key']}: {_answer(r)}{what}")
    return out
