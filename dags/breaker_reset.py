"""
### Breaker reset

Reset a tripped blast-radius breaker with a person's approval (docs/remediation.md#approvals):
the same reset as `gpufleet node breaker-reset`, asked from the UI form or CI and approved by
someone in Airflow.

1. **request**: records the request (scope, key, why; who asked) in the gpufleet ledger; a
   breaker that is not tripped is refused.
2. **approve**: Airflow's approval task (the UI's Required Actions, or `gpufleet approve
   breaker_reset RUN approve`). Nobody answers within `approval_timeout_hours`: Reject, the
   breaker stays tripped.
3. **settle**: approved, the breaker is reset with the approver recorded as who reset it;
   rejected or timed out, it stays tripped. Either way the ledger says who answered and when.

A **watcher** fails the run when any task failed.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import dag

from gpufleet.airflow.dagkit import default_args, param, watch
from gpufleet.airflow.operators.approvals import (
    LedgerApprovalOperator,
    RequestBreakerResetOperator,
    SettleApprovalsOperator,
    approval_timeout_param,
)
from gpufleet.domain.remediation import BREAKER_RESET


@dag(
    dag_id="breaker_reset",
    doc_md=__doc__,
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=4,
    render_template_as_native_obj=True,
    tags=["gpufleet", "remediation", "approvals"],
    default_args=default_args("breaker reset failed", retries=1),
    params={
        "scope": param("pool", type="string", enum=["pool", "cluster", "fleet"], title="Scope"),
        "key": param(
            None,
            type="string",
            minLength=1,
            maxLength=128,
            title="Breaker",
            description="pool: CLUSTER/POOL; cluster: CLUSTER; fleet: fleet",
        ),
        "reason": param(None, type="string", minLength=1, maxLength=2000, title="Why reset it"),
        "approval_timeout_hours": approval_timeout_param(
            title="Hours to answer",
            description="How long the approval waits; then Reject (the breaker stays tripped)",
        ),
    },
)
def breaker_reset():
    request = RequestBreakerResetOperator(
        task_id="request",
        retries=0,
        scope="{{ params.scope }}",
        key="{{ params.key }}",
        reason="{{ params.reason }}",
    )
    approve = LedgerApprovalOperator(
        task_id="approve",
        subject=f"Reset a tripped breaker? ({BREAKER_RESET})",
        approval_id=request.output,
        timeout_hours="{{ params.approval_timeout_hours }}",
        retries=0,  # answered once: a failure after the answer is not a question again
    )
    settle = SettleApprovalsOperator(
        task_id="settle",
        ids="{{ [ti.xcom_pull(task_ids='request')] }}",
        trigger_rule="all_done",
    )
    request >> approve >> settle
    watch()


breaker_reset()
