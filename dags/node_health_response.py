"""
### Node health response (fleet health from events, in minutes)

The nightly looks at the fleet once a night; this DAG acts on what each cluster reports in
between. The triggerer watches every cluster of the catalog (one `node-signals` asset per
cluster, each with a `NodeWatchTrigger` watcher: list-then-watch of the nodes and of the
Kubernetes Events about nodes, with resource versions, bookmarks and a relist on `410 Gone`)
and emits a batch of what changed at most every 10 seconds; a burst of changes of one node is
one entry. Every minute each watcher also reads the cluster's dcgm-exporter pods (one list,
one read per GPU node) and, on EKS, EC2's `DescribeInstanceStatus` of its instances: what says
something (a bad or unknown exporter reading, an impaired status check, a scheduled event) is
handed on as a snapshot when it changed. Each batch schedules a run of this DAG (several
waiting batches are handled by one run, merged per cluster).

- **respond**: the same rules as the nightly's passive signals (Xids in node Events, the Node
  Problem Detector's and GPU health monitors' conditions, GKE's
  `recommended-to-run-large-training-workload` label, maintenance labels, dcgm-exporter's
  metrics, EC2's status checks and scheduled events, nodes appearing, rebooting, replaced or
  gone). A node whose signal asks for action is quarantined at once
  (`gpufleet.io/quarantine`, NoSchedule: a running job is not killed) and goes through the node
  lifecycle as a nightly finding does. A node that appears or comes back (autoscaled, replaced,
  rebooted, repaired, uncordoned by hand) is tainted `gpufleet.io/validation-pending`
  (NoSchedule) and joins its pool's re-admission session. A node in service that goes
  NotReady is tainted `validation-pending` at once (no session), so one that reboots comes back
  already held; back with the same boot id, the hold is lifted. Signals are recorded once (a batch
  handled twice changes nothing) and the batch is acknowledged: a triggerer killed mid-watch
  resumes from the last acknowledged version.
- **admission_session** (one per session a response opened): waits until the session's
  window closes (5 minutes), claims it (a session another run claimed is skipped), runs the
  pool's fabric validation with its GPU health round (waiting for another run's validation of
  the pool), then releases each node that passed, quarantines each that failed, and carries
  the rest to the pool's next session. Only a session, or a person's recorded release, removes
  the pending taint of a node that came back (the NotReady hold's own is lifted as above).

Trigger it by hand with `batches` (a list of batches as the watchers emit them) to replay what
a watcher saw. See docs/events.md.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import AssetAny, dag

from gpufleet.airflow.assets import node_signal_assets
from gpufleet.airflow.dagkit import CLUSTER_RUNS_AT_ONCE, POOL_MAP_INDEX, default_args, index, param
from gpufleet.airflow.operators.events import AdmissionSessionOperator, NodeEventResponseOperator

fleet = index()
watched = node_signal_assets(list(fleet["clusters"]))


@dag(
    dag_id="node_health_response",
    doc_md=__doc__,
    # every cluster's watched asset: any one's event starts a run
    schedule=AssetAny(*watched) if watched else None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    # a quarantine must not wait behind a run whose admission session is validating
    max_active_runs=CLUSTER_RUNS_AT_ONCE,
    render_template_as_native_obj=True,
    tags=["gpufleet", "events", "nodes"],
    default_args=default_args("node health response failed"),
    params={
        "batches": param(
            [],
            type="array",
            items={"type": "object", "required": ["cluster"]},
            title="Node event batches",
            description="Batches as the cluster watchers emit them (cluster, nodes, events, "
            "relist, versions), handled after the run's own asset events; empty: only those",
        ),
    },
)
def node_health_response():
    respond = NodeEventResponseOperator(task_id="respond", batches="{{ params.batches }}")
    AdmissionSessionOperator.partial(
        task_id="admission_session",
        map_index_template=POOL_MAP_INDEX,
        retries=1,
    ).expand_kwargs(respond.output)


node_health_response()
