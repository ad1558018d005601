"""What an answered approval request leads to (docs/remediation.md#approvals): the
``remediation_approvals`` and ``breaker_reset`` DAGs ask a person (Airflow's approval task),
then call ``settle_approvals``, which performs the approved requests and closes the rejected and
timed-out ones. Each is done once (an approved request becomes ``done``; a closed one records
its outcome once), so a second pass neither asks nor acts twice.

- ``report_subblock`` approved: the sub-block is reported to the provider
  (``CloudBackend.report_faulty_subblock``), unless jobs run on it (it waits, approved, for a
  later pass); rejected or timed out: not reported, its nodes stay out of service.
- ``repair_below_floor`` approved: the node goes to ``draining`` (the next remediation pass
  drains and repairs it, within the ladder and the breakers); rejected or timed out: not
  repaired, it stays out (retested each night, released when it passes).
- ``breaker_reset`` approved: ``Ledger.reset_breaker`` with the approver as ``by``; rejected or
  timed out: the breaker stays tripped.

A transition's retire is asked and done by ``reservation_transition`` itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gpufleet.backends import cloud_backend, cluster_backend
from gpufleet.domain.fleet import Catalog
from gpufleet.domain.nodes import NodeState
from gpufleet.domain.remediation import (
    BREAKER_RESET,
    REPAIR_BELOW_FLOOR,
    REPORT_SUBBLOCK,
)
from gpufleet.errors import GpufleetError, LedgerError
from gpufleet.services.common.step_report import StepReport
from gpufleet.services.nodes.drain import pods_to_move
from gpufleet.services.nodes.lifecycle import NodeLifecycle
from gpufleet.store import Ledger
from gpufleet.store.nodes import NodeMove

SETTLED_HERE = (REPORT_SUBBLOCK, REPAIR_BELOW_FLOOR, BREAKER_RESET)  # not the retire


def settle_approvals(
    ledger: Ledger, catalog: Catalog, run_id: str, ids: Iterable[int] | None = None
) -> StepReport:
    """Perform the approved requests (of ``ids``, else every one) and close the rejected and
    timed-out ones; one note per request."""
    wanted = set(ids) if ids is not None else None
    report = StepReport("approvals")
    for row in reversed(ledger.approvals(["approved"])):
        if row["kind"] in SETTLED_HERE and (wanted is None or row["id"] in wanted):
            _perform(ledger, catalog, row, run_id, report)
    for row in reversed(ledger.approvals(["rejected", "timed_out"])):
        if row["kind"] not in SETTLED_HERE or row["outcome"] is not None:
            continue
        if wanted is not None and row["id"] not in wanted:
            continue
        left = _left_as_it_was(row)
        ledger.approval_closed(row["id"], left)
        report.notes.append(f"#{row['id']} {row['kind']} {row['key']}: {_answer(row)}; {left}")
    return report


def _answer(row: dict[str, Any]) -> str:
    if row["state"] == "timed_out":
        return f"nobody answered by {row['answered_at']:%Y-%m-%d %H:%M} UTC (the safe default)"
    return f"{row['state']} by {row['answered_by']} at {row['answered_at']:%Y-%m-%d %H:%M} UTC"


def _left_as_it_was(row: dict[str, Any]) -> str:
    detail = row["detail"] or {}
    if row["kind"] == REPORT_SUBBLOCK:
        return "not reported to the provider; its nodes stay out of service"
    if row["kind"] == REPAIR_BELOW_FLOOR:
        return f"not repaired: {detail.get('node')} stays out of service, retested each night"
    return "the breaker stays tripped"


def _perform(
    ledger: Ledger, catalog: Catalog, row: dict[str, Any], run_id: str, report: StepReport
) -> None:
    detail = row["detail"] or {}
    head = f"#{row['id']} {row['kind']} {row['key']} ({_answer(row)})"
    try:
        if row["kind"] == REPORT_SUBBLOCK:
            outcome = _report(catalog, detail)
        elif row["kind"] == REPAIR_BELOW_FLOOR:
            outcome = _repair(ledger, catalog, row, run_id)
        else:
            outcome = _reset(ledger, row)
    except GpufleetError as exc:  # left approved: the next pass tries again
        report.alerts.append(f"{head}: could not be done yet: {exc}")
        return
    if outcome is None:
        report.notes.append(f"{head}: waits: jobs run on the sub-block")
        return
    ledger.approval_done(row["id"], outcome)
    report.notes.append(f"{head}: {outcome}")


def _report(catalog: Catalog, detail: dict[str, Any]) -> str | None:
    ref = catalog.pool(detail["cluster"], detail["pool"])
    kube = cluster_backend(ref.cluster)
    if any(pods_to_move(kube, n) for n in detail.get("nodes") or []):
        return None  # reporting disrupts every VM of the rack: not while jobs run there
    ensured = cloud_backend(ref.cluster).report_faulty_subblock(
        ref.pool.name, detail["subblock"], f"gpufleet: {detail.get('why', '')}"
    )
    if ensured.action == "unsupported":
        return f"not reported: {ensured.detail.get('why', 'the provider has no such call')}"
    return f"reported to the provider ({ensured.action})"


def _repair(ledger: Ledger, catalog: Catalog, row: dict[str, Any], run_id: str) -> str:
    detail = row["detail"] or {}
    ref = catalog.pool(detail["cluster"], detail["pool"])
    node = detail["node"]
    current = ledger.node_state(ref.cluster.name, node) or {}
    state = current.get("state")
    if state != NodeState.RETESTING.value:
        return f"nothing to do: {node} is {state or 'unknown'} now"
    NodeLifecycle(ref, ledger).move(
        node,
        NodeMove(
            NodeState.DRAINING,
            f"failed its retest: to be drained and repaired below the pool's floor, approved by "
            f"{row['answered_by']} (request #{row['id']})",
            evidence={**(current.get("evidence") or {}), "approval": row["id"]},
            run_id=run_id,
            retest_passed=False,
        ),
    )
    return f"{node} sent to repair (draining): the next remediation pass drains and repairs it"


def _reset(ledger: Ledger, row: dict[str, Any]) -> str:
    detail = row["detail"] or {}
    reason = f"{detail.get('reason') or 'reset'} (approved in Airflow, request #{row['id']})"
    try:
        ledger.reset_breaker(detail["scope"], detail["key"], by=row["answered_by"], reason=reason)
    except LedgerError as exc:
        return f"nothing to reset: {exc}"
    return f"the {detail['scope']} breaker {detail['key']} reset by {row['answered_by']}"
