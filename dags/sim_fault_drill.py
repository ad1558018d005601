"""
### Simulated fault drill (sim clusters only)

Rehearse a failure on the simulated fleet: inject faults for this run alone, run the nightly's
own validation on the sim pools, and read what it found. This DAG exists only where the fleet
catalog has a `provider: sim` cluster; the production DAGs' forms have no faults field.

- **inject_faults** (setup) removes the faults of runs that are over (a drill killed with
  `kill -9` never ran its teardown), then checks each `sim_faults` entry
  (`cluster/pool=fault[:argument]`, e.g. `a3u-sim/h200-a=fabric-down`) against the pools this
  run validates and injects them, leased to this run: one bad entry injects none and fails the
  run before anything is validated.
- **validation**: the same sub-graph as `nightly_fabric_validation` (GPU health, NCCL pairs
  judged on bus bandwidth and transport, localization, quarantine, node remediation, Lustre),
  on the sim clusters in scope (the form's clusters are the sim ones; empty means all of
  them). Verdicts go to the gpufleet ledger as a nightly's do.
- **report** writes the run's report; **clear_faults** (teardown) removes this run's faults
  whatever happened; a **watcher** fails the run when any task failed.

Lasting faults (until cleared, for any DAG, onboarding's `capacity-short`, `api-errors` and
`not-ready` among them) go in with `gpufleet sim inject`. See docs/simulated-fleet.md.
"""

from __future__ import annotations

import json
from datetime import datetime

from airflow.sdk import dag

from gpufleet.airflow.dagkit import default_args, index, nightly_validation, watch
from gpufleet.airflow.operators.faults import RunFaultsSetupOperator, RunFaultsTeardownOperator
from gpufleet.airflow.operators.nightly import ValidationReportOperator
from gpufleet.airflow.params import drill_params

fleet = index()
SIM_CLUSTERS = json.dumps(list(fleet["sim_clusters"]))  # a list literal in a template

if fleet["sim_clusters"]:  # a DAG only where the sim is a backend

    @dag(
        dag_id="sim_fault_drill",
        doc_md=__doc__,
        schedule=None,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=1,  # faults are fleet-wide sim state: one drill at a time
        render_template_as_native_obj=True,
        tags=["gpufleet", "validation", "sim", "drill"],
        default_args=default_args("sim fault drill failed"),
        params=drill_params(fleet),
    )
    def sim_fault_drill():
        scope = {
            "regions": "{{ params.regions }}",
            # empty: every sim cluster, never a real one
            "clusters": "{{ params.clusters or " + SIM_CLUSTERS + " }}",
            "pools": "{{ params.pools }}",
            "mode": "{{ params.mode }}",
        }
        # setup: sweep faults of runs that are over, inject this run's own (its pools only);
        # teardown: clear them, whatever happened to the run
        inject_faults = RunFaultsSetupOperator(
            task_id="inject_faults",
            sim_faults="{{ params.sim_faults }}",
            regions=scope["regions"],
            clusters=scope["clusters"],
            pools=scope["pools"],
        ).as_setup()
        clear_faults = RunFaultsTeardownOperator(task_id="clear_faults")
        checks = nightly_validation(scope)  # the nightly's own
        report = ValidationReportOperator(task_id="report", trigger_rule="all_done", retries=0)

        inject_faults >> checks >> report >> clear_faults.as_teardown(setups=inject_faults)
        watch()

    sim_fault_drill()
