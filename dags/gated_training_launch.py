"""
### Gated training launch

Launch a distributed training job only onto capacity that was proven healthy, with all the
networking and storage plumbing injected, and call it healthy only once every rank is
confirmed on the intended transport.

1. **gate** (fail-closed): every target pool has a passing validation of its expected
   transport younger than `max_validation_age_hours`, is not degraded or suspect, has no
   reservation transition in flight, its Lustre filesystem passed, and enough nodes are free.
   Anything unknown refuses. The decision and its reasons go to the gpufleet ledger; a refused
   launch submits nothing.
2. **submit**: a JobSet labelled for the pool's Kueue queue (admitted all-or-nothing), pinned
   to the pool, with the provider's RDMA plumbing (GKE NIC attachments + gIB, or EFA devices +
   aws-ofi-nccl), the Lustre PVC at the catalog's mount path with `subPath` `<job>` (the
   namespace's volume is rooted at its own directory), `NCCL_NET` pinned so NCCL fails instead
   of falling back, and NCCL INFO logs per rank. On a pool whose machines carry topology
   labels it asks Kueue for one sub-block when the job fits the free nodes of one, else one
   block. The namespace must be one of the cluster's training namespaces (catalog
   `namespaces`), and a priority class one the catalog allows there (`priority_classes`).

A bad request (an image that is not an OCI reference, an env name that is not one or that the
platform sets, a priority class not allowed, an unbounded env or command) is refused by the
form or, for what depends on the pools, by the gate task before the gate decides: nothing is
recorded, nothing submitted.
3. **confirm_transport** (deferred while the job starts): read every rank's NCCL log. On a
   mismatch, `transport_policy=fail` stops the job and marks the pool `suspect` (the next
   nightly validation re-checks it); `warn` alerts and lets it run. Each rank's node, block and
   sub-block are recorded with the launch. Success emits a `job-transport-confirmed` asset
   event.

Trigger it from the UI form, or from CI: `gpufleet trigger gated_training_launch --conf @job.json
--wait` (see docs/ci-trigger.md).
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import dag

from gpufleet.airflow.assets import JOB_CONFIRMED
from gpufleet.airflow.dagkit import default_args, index
from gpufleet.airflow.operators.launch import (
    ConfirmTransportOperator,
    LaunchGateOperator,
    SubmitTrainingJobOperator,
)
from gpufleet.airflow.params import launch_params

fleet = index()


@dag(
    dag_id="gated_training_launch",
    doc_md=__doc__,
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=8,
    render_template_as_native_obj=True,
    tags=["gpufleet", "training", "launch"],
    default_args=default_args("gated training launch failed"),
    params=launch_params(fleet),
)
def gated_training_launch():
    gate = LaunchGateOperator(task_id="gate", retries=0)
    submit = SubmitTrainingJobOperator(task_id="submit", decision=gate.output)
    confirm = ConfirmTransportOperator(
        task_id="confirm_transport", job=submit.output, outlets=[JOB_CONFIRMED], retries=0
    )
    gate >> submit >> confirm


gated_training_launch()
