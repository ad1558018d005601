"""A pool's racks as its last fabric validation saw them: pass 1's pairs and failures
per scope, the sub-blocks it found bad and the blocks it found slow, beside the provider's own
view of each sub-block (``details.provider_subblocks``: status, healthy and degraded hosts).
Read from the ledger's fabric row only; never a cluster or a cloud. ``subblock_rows`` pairs
ours with theirs, for the pool page (``racks_view``) and ``/metrics`` alike."""

from __future__ import annotations

from typing import Any

from gpufleet.services.views.cells import details_of


def subblock_rows(details: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per sub-block a fabric row's ``details`` name, sorted by key: the provider's
    view of it (``status``, ``healthy_hosts``, ``degraded_hosts``; None where the provider did
    not list it, or was not read) beside ours (``ours``: why our validation found its uplink
    bad, None when it did not), with its ``block`` and ``subblock`` from the key."""
    bad = details.get("bad_subblocks") or {}
    provider = details.get("provider_subblocks")
    rows: dict[str, dict[str, Any]] = {}
    if isinstance(provider, list):
        for h in provider:
            if isinstance(h, dict) and isinstance(h.get("key"), str):
                rows[h["key"]] = {
                    "key": h["key"],
                    "ours": None,
                    "status": h.get("status"),
                    "healthy_hosts": h.get("healthy_hosts"),
                    "degraded_hosts": h.get("degraded_hosts"),
                }
    for key, why in bad.items():
        row = rows.setdefault(
            key,
            {"key": key, "status": None, "healthy_hosts": None, "degraded_hosts": None},
        )
        row["ours"] = why
    for row in rows.values():
        row["block"], _, row["subblock"] = row["key"].partition("/")
    return [rows[k] for k in sorted(rows)]


def racks_view(fabric: dict[str, Any] | None) -> dict[str, Any] | None:
    """The pool page's racks section from the pool's latest fabric row (None: nothing by
    scope recorded: no fabric row yet, or a pool without topology labels)."""
    details = details_of(fabric)
    scopes = details.get("scopes") or {}
    bad = details.get("bad_subblocks") or {}
    provider = details.get("provider_subblocks")
    if not scopes and not bad and not provider:
        return None
    return {
        "run_id": fabric.get("run_id") if fabric else None,
        "scopes": scopes,
        "slow_blocks": details.get("slow_blocks") or {},
        "subblocks": subblock_rows(details),
        "provider_error": provider.get("error") if isinstance(provider, dict) else None,
    }
