"""
### Remediation approvals

Ask a person before what the remediation would destroy, then do what they approved
(docs/remediation.md#approvals). The nightly validation records the requests in the gpufleet
ledger instead of acting: a bad sub-block's report to the provider (it disrupts every VM on the
rack) and a repair that would take a pool below its floor (`min_serving_nodes`). This DAG runs
after every pool validation (the `pool-validated` asset) and on demand.

1. **open_requests**: the pending requests not asked yet (one another live run asks is left to
   it; an answered one is never asked again).
2. **approve** (one mapped task per request): Airflow's approval task, answered from the UI's
   Required Actions or the REST API (`gpufleet approve remediation_approvals RUN approve
   --map-index N`). Nobody answers within `approval_timeout_hours`: Reject, the safe default.
   Who answered and when go to the ledger.
3. **settle** (whatever the approvals did): the approved requests are done (the sub-block is
   reported, unless jobs run on it; the node goes to repair), the rejected and timed-out ones
   closed with nothing done: the sub-block is not reported, the node stays out of service
   (retested each night) and the pool keeps its capacity.

A **watcher** fails the run when any task failed.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import dag

from gpufleet.airflow.assets import POOL_VALIDATED
from gpufleet.airflow.dagkit import default_args, watch
from gpufleet.airflow.operators.approvals import (
    LedgerApprovalOperator,
    OpenApprovalsOperator,
    SettleApprovalsOperator,
    approval_timeout_param,
)
from gpufleet.domain.remediation import REPAIR_BELOW_FLOOR, REPORT_SUBBLOCK


@dag(
    dag_id="remediation_approvals",
    doc_md=__doc__,
    schedule=[POOL_VALIDATED],
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=4,
    render_template_as_native_obj=True,
    tags=["gpufleet", "remediation", "approvals"],
    default_args=default_args("remediation approvals failed", retries=1),
    params={
        "approval_timeout_hours": approval_timeout_param(
            title="Hours to answer",
            description="How long each approval waits for a person; then Reject (nothing done)",
        ),
    },
)
def remediation_approvals():
    requests = OpenApprovalsOperator(
        task_id="open_requests", kinds=[REPORT_SUBBLOCK, REPAIR_BELOW_FLOOR]
    )
    approve = LedgerApprovalOperator.partial(
        task_id="approve",
        timeout_hours="{{ params.approval_timeout_hours }}",
        retries=0,  # a retry would ask again
        map_index_template="request #{{ task.approval_id }}",
    ).expand_kwargs(requests.output)
    settle = SettleApprovalsOperator(task_id="settle", trigger_rule="all_done")
    requests >> approve >> settle
    watch()


remediation_approvals()
