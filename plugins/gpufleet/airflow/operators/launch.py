"""Operators for the gated training launch: gate, submit, confirm the transport."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from gpufleet.airflow.assets import JOB_CONFIRMED
from gpufleet.airflow.operators.common import catalog, ledger, poll_interval


def _service(ledger_conn_id: str):
    from gpufleet.services.launch import TrainingLaunch

    return TrainingLaunch(catalog(), lambda: ledger(ledger_conn_id))


def _request(value: Any):
    from gpufleet.services.launch import LaunchRequest

    return LaunchRequest.from_params(dict(value))


class _LaunchOperator(BaseOperator):
    """``request`` is the launch request as a mapping (the DAG passes its Params)."""

    template_fields: Sequence[str] = ("request",)
    ui_color = "#ffe8d6"

    def __init__(
        self,
        *,
        request: Any = "{{ params }}",
        ledger_conn_id: str = "gpufleet_ledger",
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.request = request
        self.ledger_conn_id = ledger_conn_id


class LaunchGateOperator(_LaunchOperator):
    """Fail-closed gate: refuses (task fails, nothing submitted) unless every target pool has
    a fresh passing validation of its expected transport, is healthy, not in transition,
    its Lustre passed, and enough nodes are free. The decision and reasons go to the ledger."""

    def execute(self, context) -> dict[str, Any]:
        from gpufleet.services.launch import LaunchRefused

        try:
            decision = _service(self.ledger_conn_id).gate(_request(self.request), context["run_id"])
        except LaunchRefused as exc:
            raise AirflowFailException(str(exc)) from None
        return {"launch": decision.launch, "reasons": decision.reasons}


class SubmitTrainingJobOperator(_LaunchOperator):
    """Render the training JobSet with the platform's plumbing and submit it (idempotent)."""

    def execute(self, context) -> dict[str, Any]:
        from gpufleet.errors import GpufleetError
        from gpufleet.services.launch import LaunchRefused

        try:
            return _service(self.ledger_conn_id).submit(_request(self.request), context["run_id"])
        except LaunchRefused as exc:
            raise AirflowFailException(str(exc)) from None
        except GpufleetError as exc:  # a bad spec will not get better by retrying
            if "is not valid" in str(exc):
                raise AirflowFailException(str(exc)) from None
            raise


class ConfirmTransportOperator(BaseOperator):
    """Wait (deferred) until the job runs, then confirm every rank's transport from its NCCL
    log. ``job`` is what SubmitTrainingJobOperator returned."""

    template_fields: Sequence[str] = ("job",)
    ui_color = "#ffe8d6"

    def __init__(
        self,
        *,
        job: Any,
        timeout_s: float = 3600.0,
        ledger_conn_id: str = "gpufleet_ledger",
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.job = job
        self.timeout_s = timeout_s
        self.ledger_conn_id = ledger_conn_id

    def execute(self, context):
        from gpufleet.airflow.triggers import WorkloadTrigger

        job = dict(self.job)
        self.defer(
            trigger=WorkloadTrigger(
                cluster=job["cluster"],
                kind=job["kind"],
                name=job["name"],
                namespace=job["namespace"],
                until="running",
                poll_interval=poll_interval(catalog().cluster(job["cluster"])),
                timeout=self.timeout_s,
                carry=job,
            ),
            method_name="resume",
        )

    def resume(self, context, event: dict[str, Any]):
        job = event["carry"]
        if event.get("status") in ("error", "timeout"):
            raise AirflowException(
                f"waiting for {job['namespace']}/{job['name']}: {event.get('message')}"
            )
        svc = _service(self.ledger_conn_id)
        result = svc.confirm(job)
        state = svc.settle(job, result)
        for rank, info in sorted(result["ranks"].items(), key=lambda kv: int(kv[0])):
            self.log.info(
                "node rank %s on %s: %s (GDRDMA %s)",
                rank,
                info["node"],
                info["transport"],
                info["gdrdma"],
            )
        if state == "confirmed":
            context["outlet_events"][JOB_CONFIRMED].extra = {
                "job": f"{job['namespace']}/{job['name']}",
                "cluster": job["cluster"],
                "pool": job["pool"],
                "transport": result["transport"],
            }
            self.log.info("every rank of %s runs on %s", job["name"], result["transport"])
            return {"state": state, "transport": result["transport"], "ranks": result["ranks"]}
        summary = "; ".join(result["problems"])
        if state == "running-unconfirmed":
            self.log.warning("transport_policy=warn: %s keeps running: %s", job["name"], summary)
            from gpufleet.airflow.notifiers import FleetAlertNotifier

            FleetAlertNotifier(summary=f"job {job['name']} not on the expected transport").notify(
                {**context, "exception": summary}
            )
            return {"state": state, "transport": result["transport"], "ranks": result["ranks"]}
        raise AirflowFailException(
            f"stopped {job['namespace']}/{job['name']} and marked {job['cluster']}/{job['pool']} "
            f"suspect: {summary}"
        )
