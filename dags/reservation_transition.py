"""
### Reservation transition

Move a cluster's work from an old node pool to a new pool on another reservation: bring the new
pool up, prove it, switch scheduling, drain and retire the old pool. It never strands a job and
never retires the only working path. Declare the new pool in the catalog first (same cluster,
the new reservation, `state: planned`).

1. **lock**: one transition per cluster; a second is refused with the holder's run id. A rerun
   with the same pools resumes an unfinished transition at the right step.
2. **preflight**: the new reservation exists, holds the machine type, has room for the pool.
3. **create_new_pool** (tainted `gpufleet.io/validation-pending`, its own new Kueue flavor, its
   queue held),
   **new_pool_ready**, then the nightly validation's NCCL and Lustre checks on it. If it fails:
   rolled back (new pool deleted, the old one untouched and serving) and the run fails with the
   verdict.
4. **switch_scheduling**: the new pool's ClusterQueue admits, the old one's holds
   (`stopPolicy: Hold`: running workloads keep running).
5. **cordon_old**, **drain_old** in batches through the Eviction API (PodDisruptionBudgets
   respected) with a soak between batches; training jobs are waited for, and at the drain
   timeout handled as `on_timeout` says (`wait`: keep waiting, alert again every few hours;
   `fail`; `evict`).
6. **approve_retire**: a person approves the retire (Airflow's approval task: the UI's Required
   Actions, or the REST API, e.g. `gpufleet approve`); who and when go to the ledger. Rejected,
   or nobody answered within `approval_timeout_hours` (default 24): the old pool is kept
   (cordoned, drained, its reservation held), the run fails saying so; run again to ask again,
   or `action=rollback`.
7. **retire_old**: the old pool is deleted and recorded retired (a `pool-retired` asset event);
   **done** prints the catalog change to commit.

`action=rollback` returns to the old pool until it is deleted; `action=abandon` releases the
lock and leaves everything as it is. The **action** task after the lock is a branch: it follows
that action's tasks and Airflow skips the others'. A **watcher** fails the run when any task
failed. Every step is recorded in the gpufleet ledger before and
after it acts. See docs/transition.md.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import chain, dag

from gpufleet.airflow.assets import POOL_RETIRED
from gpufleet.airflow.dagkit import (
    default_args,
    index,
    transition_params,
    validation,
    watch,
)
from gpufleet.airflow.operators.approvals import (
    RetireApprovalOperator,
    approval_timeout_param,
)
from gpufleet.airflow.operators.transition import (
    TransitionAbandonOperator,
    TransitionActionBranch,
    TransitionLockOperator,
    TransitionRollbackOperator,
    TransitionStepOperator,
    TransitionTargetsOperator,
)

fleet = index()

STEPS = (  # task id -> the state machine's step it reaches
    ("preflight", "preflighted"),
    ("create_new_pool", "new_pool_created"),
    ("new_pool_ready", "new_pool_ready"),
)
AFTER_VALIDATION = (
    ("switch_scheduling", "scheduling_switched"),
    ("cordon_old", "old_pool_cordoned"),
    ("drain_old", "old_pool_drained"),
)
RETIRE = (  # after a person's approval (approve_retire)
    ("retire_old", "old_pool_retired"),
    ("done", "done"),
)
# the retire's approval: how long a person has to answer (then: Reject, the old pool is kept)
APPROVAL_PARAMS = {
    "approval_timeout_hours": approval_timeout_param(
        title="Hours to approve the retire",
        description="How long approve_retire waits for a person (UI or REST API); then the "
        "default is Reject: the old pool is kept and the run fails saying so",
        section="Drain",
    ),
}


@dag(
    dag_id="reservation_transition",
    doc_md=__doc__,
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=4,
    render_template_as_native_obj=True,
    tags=["gpufleet", "transition", "infrastructure"],
    default_args=default_args("reservation transition failed", retries=1),
    params={**transition_params(fleet), **APPROVAL_PARAMS},
)
def reservation_transition():
    common = {
        "cluster": "{{ params.cluster }}",
        "old_pool": "{{ params.old_pool }}",
        "new_pool": "{{ params.new_pool }}",
        "action": "{{ params.action }}",
        "drain": {
            "batch_size": "{{ params.drain_batch_size }}",
            "soak_minutes": "{{ params.soak_minutes }}",
            "timeout_hours": "{{ params.drain_timeout_hours }}",
            "on_timeout": "{{ params.on_timeout }}",
        },
    }
    lock = TransitionLockOperator(task_id="lock", retries=0, **common)
    choose = TransitionActionBranch(
        task_id="action",
        action="{{ params.action }}",
        branches={
            "run": ["preflight", "new_pool_validated"],
            "rollback": ["rollback"],
            "abandon": ["abandon"],
        },
        retries=0,
    )
    forward = [TransitionStepOperator(task_id=t, step=s, **common) for t, s in STEPS]
    checks = validation(TransitionTargetsOperator, common, retries=0)
    validated = TransitionStepOperator(
        task_id="new_pool_validated",
        step="new_pool_validated",
        trigger_rule="all_done",  # a failed validation is its input: it rolls back
        retries=0,
        **common,
    )
    after = [TransitionStepOperator(task_id=t, step=s, **common) for t, s in AFTER_VALIDATION]
    approve = RetireApprovalOperator(
        task_id="approve_retire",
        cluster="{{ params.cluster }}",
        old_pool="{{ params.old_pool }}",
        new_pool="{{ params.new_pool }}",
        timeout_hours="{{ params.approval_timeout_hours }}",
        retries=0,  # a retry would ask again: a rerun does
    )
    retire = [
        TransitionStepOperator(
            task_id=t,
            step=s,
            outlets=[POOL_RETIRED] if t == "retire_old" else [],
            **common,
        )
        for t, s in RETIRE
    ]
    rollback = TransitionRollbackOperator(task_id="rollback", **common)
    abandon = TransitionAbandonOperator(task_id="abandon", retries=0, **common)

    # the action's branch: run (the steps; new_pool_validated runs whatever the validation
    # did), rollback or abandon; Airflow skips the other actions' tasks
    lock >> choose >> [forward[0], validated, rollback, abandon]
    chain(*forward, checks, validated, *after, approve, *retire)
    watch()


reservation_transition()
