"""The nightly's node remediation: one pool's drain-and-repair pass
(``services.nodes.lifecycle.NodeRemediation``), after its fabric validation retested the nodes out
of
service. It never waits: a node whose training jobs still run is named in an alert and the next
night looks again; pages for nodes that need a person go out once."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from gpufleet.airflow.operators.common import catalog, ledger


class NodeRemediationOperator(BaseOperator):
    """Drain the pool's nodes that failed their retest, repair drained ones through the cloud
    (within the pool's repair budget), page for nodes that need a person."""

    template_fields: Sequence[str] = ("cluster", "node_pool", "max_repairs", "drain")
    ui_color = "#fde2e4"

    def __init__(
        self,
        *,
        cluster: str,
        node_pool: str,
        max_repairs: Any = 2,
        drain: str = "wait",
        ledger_conn_id: str | None = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.cluster = cluster
        self.node_pool = node_pool
        self.max_repairs = max_repairs
        self.drain = drain
        self.ledger_conn_id = ledger_conn_id

    def execute(self, context) -> dict[str, Any]:
        from gpufleet.airflow.operators.step_report import report_step
        from gpufleet.domain.inputs import finite
        from gpufleet.errors import GpufleetError
        from gpufleet.services.nodes.remediation import NodeRemediation, RemediationSettings

        try:  # NaN or Infinity (int() of them raises ValueError, OverflowError) named first
            max_repairs = int(finite(self.max_repairs, "max_repairs"))
            settings = RemediationSettings(max_repairs=max_repairs, drain=self.drain)
            ref = catalog().pool(self.cluster, self.node_pool)
        except (GpufleetError, ValueError) as exc:
            raise AirflowFailException(str(exc)) from None
        result = NodeRemediation(ref, ledger(self.ledger_conn_id), settings).step(context["run_id"])
        where = f"{self.cluster}/{self.node_pool}"
        report_step(
            self.log,
            result,
            alert="node remediation waiting",
            where=where,
            prefix=where,
            run_id=context["run_id"],
        )
        return result.to_dict()
