"""Operators for the gated training launch: gate, submit, confirm the transport.

Each adapts one step of ``gpufleet.services.launch.submit.TrainingLaunch`` and hands its typed
result
on as XCom (``to_dict``). Refusals and bad requests raise AirflowFailException (a retry would
not change them); other errors (a cluster that does not answer) fail the try, and the task's
retries take over.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from gpufleet.airflow.assets import JOB_CONFIRMED
from gpufleet.airflow.operators.common import catalog, ledger, poll_interval


def _service(ledger_conn_id: str | None):
    from gpufleet.services.launch.submit import TrainingLaunch

    return TrainingLaunch(catalog(), lambda: ledger(ledger_conn_id))


def _mapping(value: Any) -> Any:
    """Rendered Params as a plain dict (anything else is left for the request check)."""
    return dict(value) if isinstance(value, Mapping) else value


class _LaunchOperator(BaseOperator):
    """``request`` is the launch request as a mapping (the DAG passes its Params);
    ``ledger_conn_id`` names the ledger's Airflow connection (default ``gpufleet_ledger``)."""

    template_fields: Sequence[str] = ("request",)
    ui_color = "#ffe8d6"

    def __init__(
        self,
        *,
        request: Any = "{{ params }}",
        ledger_conn_id: str | None = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.request = request
        self.ledger_conn_id = ledger_conn_id


class LaunchGateOperator(_LaunchOperator):
    """Fail-closed gate: refuses (task fails, nothing submitted) unless the request is valid and
    every target pool has a fresh passing validation of its expected transport, is healthy, not
    in transition, its Lustre passed, and enough nodes are free. The decision and its reasons
    go to the ledger; the XCom is the recorded decision (``launch``, ``reasons``,
    ``decision_id``). A bad request (``services.launch.request``) fails the task for good
    before anything is touched: no decision recorded, nothing submitted."""

    def execute(self, context) -> dict[str, Any]:
        from gpufleet.airflow.operators.faults import sweep_ended_runs
        from gpufleet.services.launch.request import InvalidLaunchRequest
        from gpufleet.services.launch.submit import LaunchRefused

        svc = _service(self.ledger_conn_id)
        request = _mapping(self.request)
        try:
            svc.request(request)  # first: a bad request changes nothing, not even the sweep
            sweep_ended_runs(context)  # a killed run's sim faults must not reach this job
            decision = svc.gate(request, context["run_id"])
        except (LaunchRefused, InvalidLaunchRequest) as exc:
            raise AirflowFailException(str(exc)) from None
        return decision.to_dict()


class SubmitTrainingJobOperator(_LaunchOperator):
    """Render the training JobSet with the platform's plumbing and submit it under the gate's
    ``decision`` (what LaunchGateOperator returned). A retry converges on the first try's
    JobSet and launch row. The XCom is the submitted job (``SubmittedJob.to_dict``)."""

    template_fields: Sequence[str] = ("request", "decision")

    def __init__(self, *, decision: Any, **kwargs: Any):
        super().__init__(**kwargs)
        self.decision = decision

    def execute(self, context) -> dict[str, Any]:
        from gpufleet.services.launch.request import InvalidLaunchRequest
        from gpufleet.services.launch.submit import LaunchRefused

        decision = _mapping(self.decision)
        decision_id = decision.get("decision_id") if isinstance(decision, Mapping) else None
        svc = _service(self.ledger_conn_id)
        try:
            job = svc.submit(svc.request(_mapping(self.request)), context["run_id"], decision_id)
        except (LaunchRefused, InvalidLaunchRequest) as exc:
            raise AirflowFailException(str(exc)) from None
        return job.to_dict()


class ConfirmTransportOperator(BaseOperator):
    """Wait (deferred) until the job runs, then confirm every rank's transport from its NCCL
    log. ``job`` is what SubmitTrainingJobOperator returned.

    ``execute_complete`` takes the WorkloadTrigger's event: ``running`` (or ``done``,
    ``failed``: the logs say why) confirms and settles the launch; ``error`` (the job could
    not be watched) and ``timeout`` (it did not start within ``timeout_s``) raise
    AirflowException. A transport mismatch under policy ``fail`` stops the job and raises
    AirflowFailException; under ``warn`` it alerts and succeeds."""

    template_fields: Sequence[str] = ("job",)
    ui_color = "#ffe8d6"

    def __init__(
        self,
        *,
        job: Any,
        timeout_s: float = 3600.0,
        ledger_conn_id: str | None = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.job = job
        self.timeout_s = timeout_s
        self.ledger_conn_id = ledger_conn_id

    def execute(self, context):
        from gpufleet.airflow.triggers import WorkloadTrigger
        from gpufleet.services.launch.submit import SubmittedJob

        job = SubmittedJob.from_dict(self.job)
        trigger = WorkloadTrigger(
            cluster=job.cluster,
            kind=job.kind,
            name=job.name,
            namespace=job.namespace,
            until="running",
            poll_interval=poll_interval(catalog().cluster(job.cluster)),
            timeout=self.timeout_s,
            carry=job.to_dict(),
        )
        # already running (or over)? confirm now instead of deferring: a worker slot saved,
        # and no deferral for the scheduler to race with (apache/airflow#67287 in 3.3.2)
        event = trigger.check_now()
        if event is not None:
            return self.execute_complete(context, event)
        self.defer(trigger=trigger, method_name="execute_complete")

    def execute_complete(self, context, event: dict[str, Any]) -> dict[str, Any]:
        from gpufleet.services.launch.submit import SubmittedJob

        job = SubmittedJob.from_dict(event["carry"])
        if event.get("status") in ("error", "timeout"):
            raise AirflowException(
                f"waiting for {job.namespace}/{job.name}: {event.get('message')}"
            )
        svc = _service(self.ledger_conn_id)
        check = svc.confirm(job)
        state = svc.settle(job, check)
        for rank, info in sorted(check.ranks.items(), key=lambda kv: int(kv[0])):
            self.log.info(
                "node rank %s on %s: %s (GDRDMA %s)", rank, info.node, info.transport, info.gdrdma
            )
        result = {"state": state, "transport": check.transport, "ranks": check.ranks_dict()}
        if state == "confirmed":
            context["outlet_events"][JOB_CONFIRMED].extra = {
                "job": f"{job.namespace}/{job.name}",
                "cluster": job.cluster,
                "pool": job.pool,
                "transport": check.transport,
            }
            self.log.info("every rank of %s runs on %s", job.name, check.transport)
            return result
        summary = "; ".join(check.problems)
        if state == "running-unconfirmed":
            self.log.warning("transport_policy=warn: %s keeps running: %s", job.name, summary)
            from gpufleet.airflow.notifiers import FleetAlertNotifier

            FleetAlertNotifier(summary=f"job {job.name} not on the expected transport").notify(
                {**context, "exception": summary}
            )
            return result
        raise AirflowFailException(
            f"stopped {job.namespace}/{job.name} and marked {job.cluster}/{job.pool} "
            f"suspect: {summary}"
        )
