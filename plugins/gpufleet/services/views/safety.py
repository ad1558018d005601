"""What holds automated remediation back, as the UI's fleet page, its JSON and ``/metrics``
show it (docs/remediation.md): the blast-radius breakers tripped and not reset, and the
approvals waiting for a person. Read from the ledger on each request: two small tables."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any

from gpufleet.domain.remediation import APPROVAL_KINDS, SCOPES
from gpufleet.store import Ledger


def safety_view(ledger: Ledger, now: datetime) -> dict[str, Any]:
    """``breakers``: the trips no person reset (oldest first: scope, key, why, the figures,
    since when, the reset command); ``approvals``: the requests waiting for an answer (newest
    first: kind, key, what is asked, the task that asks it, since when)."""
    from gpufleet.services.views.cells import age_text

    breakers = [
        {
            "scope": t["scope"],
            "key": t["key"],
            "reason": t["reason"],
            "affected": t["affected"],
            "limit_nodes": t["limit_nodes"],
            "tripped_at": t["tripped_at"],
            "age": age_text(now, t["tripped_at"]),
            "reset": f"gpufleet node breaker-reset {t['scope']} {t['key']} --reason ...",
        }
        for t in ledger.tripped_breakers()
    ]
    approvals = [
        {
            "id": a["id"],
            "kind": a["kind"],
            "key": a["key"],
            "subject": a["subject"],
            "dag_id": a["dag_id"],
            "run_id": a["run_id"],
            "task_id": a["task_id"],
            "map_index": a["map_index"],
            "requested_at": a["requested_at"],
            "age": age_text(now, a["requested_at"]),
        }
        for a in ledger.approvals(states=("pending",))
    ]
    return {"breakers": breakers, "approvals": approvals}


def tripped_by_scope(view: dict[str, Any]) -> dict[str, int]:
    """Each scope's count of tripped breakers (0 for a scope with none)."""
    counts = Counter(b["scope"] for b in view["breakers"])
    return {scope: counts.get(scope, 0) for scope in SCOPES}


def pending_by_kind(view: dict[str, Any]) -> dict[str, int]:
    """Each approval kind's count of requests waiting (0 for a kind with none)."""
    counts = Counter(a["kind"] for a in view["approvals"])
    return {kind: counts.get(kind, 0) for kind in APPROVAL_KINDS}
