"""
### Region onboarding

Take a region of the fleet catalog from reservations to a validated, schedulable region in one
run, on GKE, EKS or the simulated fleet. Every step is an *ensure*: it reads first, creates only
what is missing, and reports (never changes) what differs from the catalog, so a rerun after a
failure resumes where it stopped.

1. **preflight**: each reservation exists, holds the pool's machine type and has the capacity;
   each pool's RDMA mapping follows where its reservation physically is (zone, and block where
   the API reports it). A shortfall or mismatch is refused with the figures before anything is
   created.
2. **network**: the RDMA VPC (GKE: the zone's RoCE network profile, MTU 8896, one subnet per
   NIC, plus the gVNIC network; EKS: VPC, subnets, EFA security group).
3. **cluster**: GKE with multi-networking, Dataplane V2 and the Managed Lustre CSI driver; EKS
   with API access entries.
4. **filesystems**: the Managed Lustre / FSx for Lustre instance on the nodes' primary network.
5. **node_pools**: GPU pools pinned to their reservation (and block), tainted
   `gpufleet.io/validation-pending:NoSchedule` until validated.
6. **addons**: NIC network objects, the NCCL plugin installer or EFA/NVIDIA device plugins and the
   FSx CSI driver, Kueue and JobSet at pinned versions, the provider's Kueue Topology and a
   Kueue flavor (naming it) and queues per pool,
   Lustre volumes per training namespace, admission-time plumbing.
7. **nodes_ready**: wait until the new nodes are Ready; one that never is stays tainted and is
   named.
8. **validate_fabric**, **validate_storage**: the nightly validation's own NCCL and Lustre checks
   on the new nodes; a node that passes loses the taint.
9. **release**: the region is recorded ready in the gpufleet ledger and a `region-ready` asset
   event schedules its nightly validation. `validate=false` leaves the taints on and the region
   not ready, and says so.

Start with `dry_run=true`: it prints the plan (what exists, what would be created, what
differs) and creates nothing. The **report** task writes what each step found, created or
refused, with console links (also on each task's "Cloud console" link); a **watcher** fails
the run when any step failed. See docs/onboarding.md.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import dag

from gpufleet.airflow.assets import REGION_READY
from gpufleet.airflow.dagkit import default_args, index, validation, watch
from gpufleet.airflow.operators.faults import RunFaultsSweepOperator
from gpufleet.airflow.operators.onboarding import (
    OnboardingReportOperator,
    OnboardingStepOperator,
    OnboardingTargetsOperator,
    RegionReadyAnnouncement,
    RegionReleaseOperator,
)
from gpufleet.airflow.params import onboarding_params

fleet = index()


@dag(
    dag_id="region_onboarding",
    doc_md=__doc__,
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    render_template_as_native_obj=True,
    tags=["gpufleet", "onboarding", "infrastructure"],
    default_args=default_args("region onboarding failed", retries=1),
    params=onboarding_params(fleet),
)
def region_onboarding():
    region = {"region": "{{ params.region }}", "dry_run": "{{ params.dry_run }}"}
    # first: remove the sim faults a killed sim_fault_drill run left behind
    sweep_faults = RunFaultsSweepOperator(task_id="sweep_faults")
    steps = {}
    for step in ("preflight", "network", "cluster", "filesystems", "node_pools", "addons"):
        steps[step] = OnboardingStepOperator(task_id=step, step=step, **region)
    steps["nodes_ready"] = OnboardingStepOperator(
        task_id="nodes_ready",
        step="nodes_ready",
        timeout_minutes="{{ params.nodes_ready_timeout_minutes }}",
        **region,
    )

    validate = {"validate": "{{ params.validate }}"}
    checks = validation(OnboardingTargetsOperator, {**region, **validate}, retries=0)

    # all_done: a failed step or validation is recorded as the region's state, then fails
    release = RegionReleaseOperator(
        task_id="release", trigger_rule="all_done", retries=0, **region, **validate
    )
    announce = RegionReadyAnnouncement(
        task_id="announce_ready",
        outlets=[REGION_READY],
        retries=0,
        **region,
    )
    report = OnboardingReportOperator(
        task_id="report", trigger_rule="all_done", retries=0, **region
    )

    (
        sweep_faults
        >> steps["preflight"]
        >> steps["network"]
        >> steps["cluster"]
        >> steps["filesystems"]
        >> steps["node_pools"]
        >> steps["addons"]
        >> steps["nodes_ready"]
        >> checks
        >> release
        >> announce  # the release branch follows it when this run made the region ready
        >> report
    )
    watch()


region_onboarding()
