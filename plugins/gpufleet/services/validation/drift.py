"""Judge drift after a nightly run: each pool that passed tonight, against its own history.

Design: docs/design/workflows.md.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from gpufleet.domain.drift import NOISE_WINDOW, DriftError, DriftFinding, check_pool
from gpufleet.domain.fleet import Catalog
from gpufleet.domain.gate import PoolState
from gpufleet.domain.validation_kinds import ValidationKind
from gpufleet.errors import GpufleetError
from gpufleet.store import Ledger

log = logging.getLogger(__name__)

METRICS_OF: dict[str, tuple[str, ...]] = {  # looked up by the kind a ledger row holds (text)
    ValidationKind.FABRIC: ("busbw_gbps", "small_latency_us"),
    ValidationKind.STORAGE: ("read_mb_s", "write_mb_s"),
}
# a finding only replaces these states (a failed, degraded or retiring pool keeps its own)
DRIFT_REPLACES = (PoolState.VALIDATED, PoolState.READY, PoolState.DRIFTING)


@dataclass(frozen=True)
class PoolDrift:
    """A drift finding on one pool: where, which check, and the figures."""

    cluster: str
    pool: str
    kind: str  # fabric | storage
    validation_id: int  # tonight's validation row
    finding: DriftFinding

    @property
    def key(self) -> str:
        return f"{self.cluster}/{self.pool}"

    def text(self) -> str:
        return f"{self.key}: {self.finding.text()}"

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON (an XCom)."""
        return {
            "cluster": self.cluster,
            "pool": self.pool,
            "kind": self.kind,
            "validation_id": self.validation_id,
            **self.finding.to_dict(),
        }


def _figures(ledger: Ledger, kind: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per row (oldest first), the figure of each metric of ``kind`` (None: not recorded)."""
    latency = ledger.small_latencies(rows) if kind == ValidationKind.FABRIC else {}
    out = []
    for r in rows:
        figures = {m: r.get(m) for m in METRICS_OF[kind] if m != "small_latency_us"}
        if kind == ValidationKind.FABRIC:
            figures["small_latency_us"] = latency.get(r["id"])
        out.append(figures)
    return out


def _scope(row: dict[str, Any]) -> str | None:
    """A storage row's scope (``filesystem``: the full test, also a row from before pool
    checks; ``pool``); None for a fabric row."""
    if row["kind"] != ValidationKind.STORAGE:
        return None
    return (row.get("details") or {}).get("scope", "filesystem")


def _judge(ledger: Ledger, row: dict[str, Any]) -> tuple[list[DriftFinding], list[str]]:
    """The findings and the not-judged notes for one passing validation row."""
    kind = row["kind"]
    history = ledger.validation_history(
        row["cluster"],
        row["pool"],
        kind,
        NOISE_WINDOW,
        passed_only=True,
        before_id=row["id"],
    )
    # a pool's storage figures compare within one scope: its nights of the filesystem's full
    # test, or of its own clients' check (fewer clients read less)
    history = [h for h in history if _scope(h) == _scope(row)]
    *past, tonight = _figures(ledger, kind, [*history, row])
    histories = {m: [n[m] for n in past if n[m] is not None] for m in METRICS_OF[kind]}
    checks = check_pool(histories, tonight)
    findings = [c.finding for c in checks if c.finding is not None]
    notes = [c.note for c in checks if c.note]
    notes += [f"{m}: not recorded tonight" for m, v in tonight.items() if v is None]
    return findings, notes


def _latest_passing(ledger: Ledger, run_id: str) -> list[dict[str, Any]]:
    from gpufleet.domain.verdicts import latest_per_check

    return [
        r
        for r in latest_per_check(ledger.validations_for_run(run_id))
        if r["verdict"] == "pass" and r["kind"] in METRICS_OF
    ]


def assess_drift(ledger: Ledger, catalog: Catalog, run_id: str) -> list[PoolDrift]:
    """Judge every pool that passed in ``run_id`` against its own history; record the
    findings on the validation rows and the pools' states. Returns the findings."""
    found: list[PoolDrift] = []
    judged: set[tuple[str, str]] = set()
    for row in _latest_passing(ledger, run_id):
        key = (row["cluster"], row["pool"])
        try:
            catalog.pool(*key)
        except GpufleetError:
            log.warning("%s/%s is not in the catalog: drift not judged", *key)
            continue
        try:
            findings, notes = _judge(ledger, row)
        except DriftError as exc:  # a figure in the ledger that cannot be true
            findings, notes = [], [f"not judged for drift: {exc}"]
        ledger.merge_validation_details(
            row["id"], {"drift": [f.to_dict() for f in findings], "drift_notes": notes}
        )
        judged.add(key)
        found += [PoolDrift(*key, row["kind"], row["id"], f) for f in findings]
        for note in notes:
            log.info("%s/%s %s: %s", *key, row["kind"], note)
    for cluster, pool in sorted(judged):
        mine = [d for d in found if (d.cluster, d.pool) == (cluster, pool)]
        _set_state(ledger, cluster, pool, mine, run_id)
    return found


def _set_state(
    ledger: Ledger, cluster: str, pool: str, drifts: list[PoolDrift], run_id: str
) -> None:
    row = ledger.pool_state(cluster, pool)
    state = row["state"] if row else None
    if state not in DRIFT_REPLACES:
        if drifts:
            log.warning("%s/%s drifts but stays %s: %s", cluster, pool, state, drifts[0].text())
        return
    if drifts:
        reason = "; ".join(d.finding.text() for d in drifts)
        log.warning("%s/%s is drifting: %s", cluster, pool, reason)
        ledger.set_pool_state(cluster, pool, PoolState.DRIFTING.value, reason, run_id)
    elif state == PoolState.DRIFTING:
        ledger.set_pool_state(
            cluster, pool, PoolState.VALIDATED.value, "no drift in tonight's figures", run_id
        )
