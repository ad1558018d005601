"""Operators for nightly validation: one pool's fabric, one pool's filesystem."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from gpufleet.airflow.assets import POOL_VALIDATED
from gpufleet.airflow.operators.common import catalog, ledger, poll_interval
from gpufleet.airflow.triggers import WorkloadTrigger


class _WorkloadDeferring(BaseOperator):
    """Submit a workload through a service, defer until it is done, resume in
    ``execute_complete``. ``ledger_conn_id`` names the ledger's Airflow connection (default
    ``gpufleet_ledger``).

    The WorkloadTrigger's event: ``done`` goes on to the verdict; ``error`` (the workload could
    not be watched) and ``timeout`` (not done within ``timeout_s``) raise AirflowException, so
    the task's retries take over (the services name workloads by run: a retry finds the same
    workload). A failed verdict raises AirflowFailException."""

    template_fields: Sequence[str] = ("cluster", "node_pool")
    ui_color = "#d8f3dc"

    def __init__(
        self,
        *,
        cluster: str,
        node_pool: str,
        timeout_s: float = 3600.0,
        ledger_conn_id: str | None = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.cluster = cluster
        self.node_pool = node_pool  # ``pool`` is Airflow's own (worker slots)
        self.timeout_s = timeout_s
        self.ledger_conn_id = ledger_conn_id

    def _ref(self):
        return catalog().pool(self.cluster, self.node_pool)

    def _defer_on(self, state: dict[str, Any], method: str) -> None:
        wl = state["workload"]
        ref = self._ref()
        self.defer(
            trigger=WorkloadTrigger(
                cluster=self.cluster,
                kind=wl["kind"],
                name=wl["name"],
                namespace=wl["namespace"],
                until="done",
                poll_interval=poll_interval(ref.cluster),
                timeout=self.timeout_s,
                carry=state,
            ),
            method_name=method,
        )

    @staticmethod
    def _check_event(event: dict[str, Any]) -> None:
        if event.get("status") == "error":
            raise AirflowException(f"watching {event.get('name')}: {event.get('message')}")
        if event.get("status") == "timeout":
            raise AirflowException(
                f"{event.get('kind')} {event.get('name')}: {event.get('message')}"
            )


class FabricValidationOperator(_WorkloadDeferring):
    """Validate one node pool's RDMA fabric with 2-node NCCL all-reduce pairs.

    Pass 1 covers every idle node; failed pairs are localized against known-good nodes in
    further rounds; bad nodes are quarantined (unless more than ``max_quarantine_share`` of
    the pool would be: then the pool is degraded and a human is paged). Fails the task when
    the pool does not pass, after recording everything in the ledger.
    """

    template_fields: Sequence[str] = ("cluster", "node_pool", "max_quarantine_share", "tolerance")

    def __init__(
        self, *, max_quarantine_share: float = 0.2, tolerance: float | None = None, **kwargs: Any
    ):
        super().__init__(**kwargs)
        self.max_quarantine_share = max_quarantine_share
        self.tolerance = tolerance

    def _service(self):
        from gpufleet.services.fabric import FabricValidation

        tolerance = float(self.tolerance) if self.tolerance not in (None, "", "None") else None
        return FabricValidation(
            self._ref(),
            ledger(self.ledger_conn_id),
            max_quarantine_share=float(self.max_quarantine_share),
            tolerance=tolerance,
        )

    def execute(self, context):
        svc = self._service()
        state = svc.begin(context["run_id"])
        if state["workload"] is None:
            return self._finish(context, svc, state)
        self._defer_on(state, "execute_complete")

    def execute_complete(self, context, event: dict[str, Any]):
        self._check_event(event)
        svc = self._service()
        state = svc.collect(event["carry"])
        if state["workload"] is not None:
            self.log.info("localizing: round %d", state["round"])
            self._defer_on(state, "execute_complete")
        return self._finish(context, svc, state)

    def _finish(self, context, svc, state):
        summary = svc.finish(state)
        for reason in summary["reasons"]:
            self.log.info("%s/%s: %s", self.cluster, self.node_pool, reason)
        if not summary["passed"]:
            raise AirflowFailException(
                f"{self.cluster}/{self.node_pool} failed fabric validation"
                f"{' (paging: fabric problem)' if summary.get('page') else ''}: "
                + "; ".join(summary["reasons"][:4])
            )
        if not summary.get("skipped") and POOL_VALIDATED in (self.outlets or ()):
            context["outlet_events"][POOL_VALIDATED].extra = {
                "cluster": self.cluster,
                "pool": self.node_pool,
                "transport": summary["transport"],
                "busbw_gbps": summary["busbw_gbps"],
                "run_id": context["run_id"],
            }
        return summary


class StorageValidationOperator(_WorkloadDeferring):
    """Validate the Lustre filesystem a pool mounts: fio read and write throughput against
    ``tolerance x tier x capacity``."""

    def _service(self):
        from gpufleet.services.storage import StorageValidation

        return StorageValidation(self._ref(), ledger(self.ledger_conn_id))

    def execute(self, context):
        svc = self._service()
        state = svc.begin(context["run_id"])
        if state["workload"] is None:
            return self._finish(svc, state)
        self._defer_on(state, "execute_complete")

    def execute_complete(self, context, event: dict[str, Any]):
        self._check_event(event)
        return self._finish(self._service(), event["carry"])

    def _finish(self, svc, state):
        summary = svc.finish(state)
        if not summary["passed"]:
            raise AirflowFailException(
                f"{self.cluster}/{self.node_pool} storage validation failed: "
                + "; ".join(summary["reasons"])
            )
        self.log.info(
            "%s/%s storage: %s", self.cluster, self.node_pool, "; ".join(summary["reasons"])
        )
        return summary
