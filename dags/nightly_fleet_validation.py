"""
### Nightly fleet validation

Every night at 02:00 UTC, and whenever a region becomes ready: validate every GPU node pool of
the fleet, as **one `nightly_fabric_validation` run per cluster** (a cluster of more than
`[gpufleet] pools_per_run` pools, 200 by default, is split into runs of at most that many).

- **plan_clusters** reads the fleet catalog, leaves out clusters not created yet and retired
  pools (saying so), and plans the runs: run id `<this run id>--<cluster>`, the pools, and
  this run's settings.
- **validate_clusters** starts each run and waits for it (deferred: it costs no worker).
  A retry (its worker lost) waits for the run its first try started; it never starts a
  second one for a cluster.
  The cluster runs go side by side (at most 16 at once); each records its own pools' verdicts
  as they come, so a slow or failing cluster holds no other cluster's verdicts. Open a run from
  the task's *Triggered DAG* link.
- **report** writes the fleet's report over every cluster run's verdicts (Markdown + HTML,
  under `$AIRFLOW_HOME/gpufleet/reports/`); it fails when any pool failed. A cluster run that
  did not succeed fails the run through the **watcher** task. Each cluster run has alerted on
  its own failures already.

What each cluster run checks (NCCL pairs, transport, Lustre, quarantine, repairs) is in
`nightly_fabric_validation`'s own documentation and in docs/validation.md.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import dag
from airflow.sdk.definitions.timetables.assets import AssetOrTimeSchedule
from airflow.sdk.definitions.timetables.trigger import CronTriggerTimetable

from gpufleet.airflow.assets import REGION_READY
from gpufleet.airflow.dagkit import default_args, index, run_poll_seconds, watch
from gpufleet.airflow.operators.cluster_run import ClusterRunOperator
from gpufleet.airflow.operators.nightly import ClusterRunsOperator, ValidationReportOperator
from gpufleet.airflow.params import nightly_params

fleet = index()


@dag(
    dag_id="nightly_fleet_validation",
    doc_md=__doc__,
    schedule=AssetOrTimeSchedule(
        timetable=CronTriggerTimetable("0 2 * * *", timezone="UTC"), assets=REGION_READY
    ),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    render_template_as_native_obj=True,
    tags=["gpufleet", "validation", "nccl", "lustre"],
    default_args=default_args("nightly fleet validation failed"),
    params=nightly_params(fleet),
)
def nightly_fleet_validation():
    plan = ClusterRunsOperator(
        task_id="plan_clusters",
        regions="{{ params.regions }}",
        clusters="{{ params.clusters }}",
        pools="{{ params.pools }}",
        mode="{{ params.mode }}",
        settings={
            "max_quarantine_share": "{{ params.max_quarantine_share }}",
            "tolerance": "{{ params.tolerance }}",
            "max_repairs": "{{ params.max_repairs }}",
            "repair_drain": "{{ params.repair_drain }}",
        },
    )
    validate = ClusterRunOperator.partial(
        task_id="validate_clusters",
        trigger_dag_id="nightly_fabric_validation",
        wait_for_completion=True,
        deferrable=True,
        poke_interval=run_poll_seconds(),
        allowed_states=["success"],
        failed_states=["failed"],
        openlineage_inject_parent_info=False,
        fail_when_dag_is_paused=True,  # a paused cluster DAG would leave its runs queued
        # retried as every task (default_args): a retry waits for the run its first try
        # started, never a second one (ClusterRunOperator)
        on_failure_callback=None,  # the cluster run alerted on its own failure
        map_index_template="{{ task.trigger_run_id.rsplit('--', 1)[-1] }}",
    ).expand_kwargs(plan.output)
    report = ValidationReportOperator(
        task_id="report", runs=plan.output, trigger_rule="all_done", retries=0
    )
    plan >> validate >> report
    watch()


nightly_fleet_validation()
