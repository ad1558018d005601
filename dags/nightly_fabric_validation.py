"""
### Nightly fabric validation (one cluster's pools)

Prove that each GPU node pool's fabric and filesystem do what they were bought for. The
scheduled `nightly_fleet_validation` DAG starts one run of this DAG per cluster every night (and
whenever a region becomes ready); trigger it yourself for a few pools. One run validates at
most `[gpufleet] pools_per_run` pools (200 by default): more is refused, naming the planner.

- **GPU health** first: every idle node runs NVIDIA's tools (the kernel log's Xid events, row
  remapping and ECC, NVLink, thermal slowdown, `dcgmi diag` at level 1; level 2 for a node
  retested, level 3 once a week on the pool's night), in its pair's pod before the pair's test
  (one pod per node: one wait for the pool's night), or as a round of its own when a node is
  retested. A pool with `level1_every_nights: N` in the catalog checks each idle node once in
  N nights and reads its dcgm-exporter on the others; a reading that is not healthy, or none,
  is checked that night (docs/health.md). A node whose signals call for an action is
  quarantined with NVIDIA's action in its reason; its retest sends it to a reboot, the cloud's
  repair or a person, as NVIDIA recommends (docs/health.md).
- **Fabric**: 2-node NCCL all-reduce pairs covering every idle node, judged on large-message
  bus bandwidth against the baseline *and* on the transport NCCL actually used (a silent
  fallback to TCP sockets fails even when the bandwidth looks fine). Failed pairs are
  localized against known-good nodes; a node that fails with two good partners is
  quarantined (`gpufleet.io/quarantine=<reason>:NoSchedule`). At most
  `max(1, floor(max_quarantine_share x nodes))` nodes of a pool are quarantined at once;
  beyond that nothing more is: the pool is marked degraded and a human is paged.
- **Nodes out of service** (quarantined, suspect, back from repair) are retested first, against
  known-good partners: a pass releases them. One that fails is drained and repaired through the
  cloud by the `remediate_nodes` task (within the pool's repair budget), or, after
  `max_repairs` repairs, handed to a person (paged). See docs/nodes.md.
- **Storage**: fio read/write throughput on the pool's Lustre filesystem against
  `tolerance x tier x capacity`: the filesystem's full test once a night (`validate_storage`,
  one per filesystem, its pools hosting it in turn), each pool's own check in its pass-1 pods
  (recorded by `validate_fabric`).

Nodes running training jobs are not disturbed. A pool another run is validating (a second
deployment's nightly, a manual run) is skipped, naming that run: its verdict stands. A run that
skipped every pool validated nothing: it fails, and its report says so first; a holder Airflow
still shows running but silent past its lease (a killed `airflow dags test`) is named with how
to mark its run failed.
Results go to the gpufleet ledger; the **report** task writes the report (Markdown + HTML
with a bandwidth chart per pool) under
`$AIRFLOW_HOME/gpufleet/reports/`. Prometheus metrics are not files: the gpufleet plugin serves
them at `/gpufleet/metrics`, read from the ledger at scrape time. Each validated pool emits a
`pool-validated` asset event.
The run fails when any pool fails.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import dag

from gpufleet.airflow.dagkit import (
    CLUSTER_RUNS_AT_ONCE,
    default_args,
    index,
    nightly_validation,
    watch,
)
from gpufleet.airflow.operators.faults import RunFaultsSweepOperator
from gpufleet.airflow.operators.nightly import ValidationReportOperator
from gpufleet.airflow.params import nightly_params

fleet = index()


@dag(
    dag_id="nightly_fabric_validation",
    doc_md=__doc__,
    schedule=None,  # started by nightly_fleet_validation, one run per cluster; or by hand
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=CLUSTER_RUNS_AT_ONCE,
    render_template_as_native_obj=True,
    tags=["gpufleet", "validation", "nccl", "lustre"],
    default_args=default_args("nightly fabric validation failed"),
    params=nightly_params(fleet),
)
def nightly_fabric_validation():
    scope = {
        "regions": "{{ params.regions }}",
        "clusters": "{{ params.clusters }}",
        "pools": "{{ params.pools }}",
        "mode": "{{ params.mode }}",
    }
    # first: remove the sim faults a killed sim_fault_drill run left behind
    sweep_faults = RunFaultsSweepOperator(task_id="sweep_faults")
    checks = nightly_validation(scope)
    report = ValidationReportOperator(task_id="report", trigger_rule="all_done", retries=0)

    sweep_faults >> checks >> report
    watch()


nightly_fabric_validation()
