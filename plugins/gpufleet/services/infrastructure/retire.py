"""Retiring a pool: delete it, and call it retired only when the cloud reports it gone.

A cloud accepts a delete at once and finishes it later (GKE: the delete operation runs for
minutes and may end with an error, leaving the pool; EKS: the node group goes DELETING, then
away or DELETE_FAILED). ``retire_progress`` is one poll of that, resumable: the delete's
operation is kept in the step's detail (the ledger), so a run killed while waiting resumes
waiting on the same delete instead of issuing another; a failed delete is reported with the
cloud's reason and clears the operation, so the next attempt deletes again
(``CloudBackend.ensure_node_pool_deleted``: delete-if-present).
"""

from __future__ import annotations

from typing import Any

from gpufleet.backends.base import CloudBackend, ResourceStatus
from gpufleet.domain.fleet import PoolRef
from gpufleet.errors import BackendError
from gpufleet.services.common.step_report import StepReport


class PoolDeleteFailed(BackendError):
    """The cloud ended a pool's delete with an error: the pool is still there, not retired."""


def retire_progress(
    cloud: CloudBackend, ref: PoolRef, detail: dict[str, Any], step: str
) -> StepReport:
    """One poll of the pool's deletion, given what step ``step`` recorded so far: done once the
    pool is gone; ``failed`` (the message to raise: ``PoolDeleteFailed``) when the cloud's delete
    failed; ``detail`` is what the step records (operation, deleted, failed); one note."""
    deletion = cloud.ensure_node_pool_deleted(ref.pool.name, detail.get("operation"))
    deleted = bool(detail.get("deleted")) or deletion.requested
    if deletion.status == ResourceStatus.ERROR:
        where = f" (see {deletion.console_url})" if deletion.console_url else ""
        message = (
            f"{ref.key}: the cloud failed to delete the pool ({deletion.message}){where}; it is "
            "not retired and still holds its reservation. Fix the cause and run again: the "
            "delete is issued again"
        )
        return StepReport(
            step,
            done=False,
            notes=[message],
            detail={"operation": None, "deleted": deleted, "failed": deletion.message},
            failed=message,
        )
    recorded = {"operation": deletion.operation, "deleted": deleted, "failed": None}
    if deletion.status == ResourceStatus.ABSENT:
        note = f"{ref.key}: {'deleted' if deleted else 'gone'}"
        return StepReport(step, notes=[note], detail=recorded)
    return StepReport(
        step,
        done=False,
        notes=[
            f"{ref.key}: being deleted (operation {deletion.operation or 'under way'}); "
            "retired once it is gone"
        ],
        detail=recorded,
    )
