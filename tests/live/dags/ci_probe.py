"""ci_probe: a tiny DAG the live-Airflow harness triggers through the REST API.

`nodes` is bounded (1..4) so a bad value is refused at trigger time; `should_fail` makes the
`probe` task fail so CI can see a failed run reported with its task id.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import Param, dag, task


@dag(
    dag_id="ci_probe",
    schedule=None,
    start_date=datetime(2025, 1, 1),
    catchup=False,
    tags=["gpufleet", "test"],
    default_args={"owner": "gpufleet", "retries": 0},
    params={
        "nodes": Param(2, type="integer", minimum=1, maximum=4, description="nodes to probe"),
        "should_fail": Param(False, type="boolean", description="make the probe task fail"),
    },
)
def ci_probe():
    @task
    def probe(params: dict | None = None) -> int:
        if params["should_fail"]:
            raise RuntimeError("ci_probe asked to fail (should_fail=true)")
        return int(params["nodes"])

    @task
    def report(nodes: int) -> str:
        return f"probed {nodes} nodes"

    report(probe())


ci_probe()
