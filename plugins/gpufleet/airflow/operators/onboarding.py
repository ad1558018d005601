"""Operators of the ``region_onboarding`` DAG: one step of ``services.infrastructure.onboarding``
each.

Design: docs/design/workflows.md.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator, BaseOperatorLink
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from gpufleet.airflow.assets import REGION_READY
from gpufleet.airflow.operators.common import (
    WatchedBranchMixIn,
    catalog,
    failed_tasks,
    ledger,
    poll_interval,
)
from gpufleet.airflow.operators.runs import run_liveness

# How long a step waits on what it created before failing (nodes_ready: before going on with
# the nodes that are Ready, the others staying tainted and named).
WAIT_TIMEOUT_S = {"cluster": 3600.0, "filesystems": 5400.0, "node_pools": 3600.0}
NODES_READY_TIMEOUT_S = 1800.0
ANNOUNCE_ID = "announce_ready"  # the task the release branch follows when the region is ready
CONSOLE_URL_KEY = "console_url"  # the XCom the step pushes its console link in
WAIT_UNTIL_KEY = "_wait_until"  # in a waiting step's trigger carry: when its timeout ends


class ConsoleLink(BaseOperatorLink):
    """The cloud console page of the resource a step created or found (the first one), read
    from the XCom the step pushed (as the providers' links do): Airflow recomputes links after
    every task process, and a step resumed after a deferral runs in a new one."""

    name = "Cloud console"

    def get_link(self, operator, *, ti_key) -> str:
        from airflow.sdk.execution_time.xcom import XCom

        return XCom.get_value(ti_key=ti_key, key=CONSOLE_URL_KEY) or ""


def _as_bool(value: Any) -> bool:
    return value is True or str(value).strip().lower() in ("true", "1", "yes")


class _RegionTask(BaseOperator):
    template_fields: Sequence[str] = ("region", "dry_run")
    ui_color = "#e0f0ff"
    operator_extra_links = (ConsoleLink(),)

    def __init__(
        self, *, region: str, dry_run: Any = False, ledger_conn_id: str | None = None, **kwargs
    ):
        super().__init__(**kwargs)
        self.region = region
        # the form's templated dry_run field: on this operator it shadows BaseOperator.dry_run()
        self.dry_run = dry_run  # type: ignore[method-assign]
        self.ledger_conn_id = ledger_conn_id
        self.console_url: str | None = None

    def _service(self, context):
        from gpufleet.errors import GpufleetError
        from gpufleet.services.infrastructure.onboarding import RegionOnboarding

        try:
            region = catalog().region(self.region)
        except GpufleetError as exc:
            raise AirflowFailException(str(exc)) from None
        return RegionOnboarding(
            region, ledger(self.ledger_conn_id), context["run_id"], dry_run=_as_bool(self.dry_run)
        )

    def _lock(self, context, svc) -> None:
        """Hold the region's onboarding lock for this run, or fail naming the run holding it."""
        from gpufleet.services.infrastructure.onboarding import OnboardingRefused

        dag_id = context["dag"].dag_id
        try:
            svc.lock(dag_id, lambda holder_dag, run: run_liveness(context, holder_dag, run))
        except OnboardingRefused as exc:
            raise AirflowFailException(str(exc)) from None

    def _log_result(self, result, context=None) -> None:
        """Log the step's actions (and keep the first console link), then its report."""
        from gpufleet.airflow.operators.step_report import report_step

        for a in result.actions:
            self.log.info(
                "%s %s %s: %s%s%s",
                result.step,
                a["kind"],
                a["name"],
                a["action"],
                f" ({a['status']})" if a.get("status") else "",
                f"  {a['console_url']}" if a.get("console_url") else "",
            )
            if not self.console_url and a.get("console_url"):
                self.console_url = a["console_url"]
                if context is not None:
                    context["ti"].xcom_push(key=CONSOLE_URL_KEY, value=self.console_url)
        report_step(self.log, result, alert="region onboarding", where=self.region)


class OnboardingStepOperator(_RegionTask):
    """One onboarding step for a region; defers while what it created is not ready. (A run's
    sim faults are ``operators.faults``' setup and teardown tasks.)"""

    template_fields: Sequence[str] = ("region", "dry_run", "timeout_minutes")

    def __init__(self, *, step: str, timeout_minutes: Any = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.step = step
        self.timeout_minutes = timeout_minutes  # None: the step's default (WAIT_TIMEOUT_S)

    def execute(self, context):
        from gpufleet.errors import GpufleetError
        from gpufleet.services.infrastructure.onboarding import OnboardingRefused

        self._timeout_s()  # bad input is refused before anything is done
        svc = self._service(context)
        if not svc.dry_run:
            self._lock(context, svc)
        try:
            report = svc.run_step(self.step)
        except OnboardingRefused as exc:
            raise AirflowFailException(str(exc)) from None
        except GpufleetError as exc:
            raise AirflowException(f"onboarding step {self.step!r} failed: {exc}") from exc
        self._log_result(report, context)
        result = report.to_dict()
        if result["waiting"]:
            event = self._defer(context, result)
            if event is not None:  # over at once: judged as after a deferral (failed raises)
                return self.execute_complete(context, event)
        return result

    def _timeout_s(self) -> float:
        """How long the step waits (``timeout_minutes``, else the step's default); a value
        that is not a finite number fails the task naming it."""
        from gpufleet.domain.inputs import InvalidValue, finite

        if self.timeout_minutes not in (None, "", "None"):
            try:
                return finite(self.timeout_minutes, "timeout_minutes") * 60
            except InvalidValue as exc:
                raise AirflowFailException(f"onboarding step {self.step!r}: {exc}") from None
        if self.step == "nodes_ready":
            return NODES_READY_TIMEOUT_S
        return WAIT_TIMEOUT_S.get(self.step, 3600.0)

    def _defer(
        self, context, result: dict[str, Any], wait_until: float | None = None
    ) -> dict[str, Any] | None:
        """Wait on what the step created until ``wait_until`` (the step's timeout), in turns of
        at most ``LEASE_RENEW``: each turn ends in ``execute_complete``, which renews the
        region lock's lease and waits on (a holder silent past its lease loses the lock). The
        event when the wait is over already (nothing deferred), else it defers."""
        from gpufleet.airflow.triggers import CloudResourcesTrigger
        from gpufleet.domain.leases import LEASE_RENEW

        region = catalog().region(self.region)
        now = time.time()
        wait_until = wait_until if wait_until is not None else now + self._timeout_s()
        trigger = CloudResourcesTrigger(
            resources=result["waiting"],
            poll_interval=min(poll_interval(c) for c in region.clusters),
            timeout=max(min(wait_until - now, LEASE_RENEW.total_seconds()), 0.0),
            started=now,
            carry={**result, WAIT_UNTIL_KEY: wait_until},
        )
        event = trigger.check_now()  # already over: no deferral (the providers' pattern)
        if event is not None:
            return event
        self.log.info(
            "%s: waiting for %s", self.step, ", ".join("/".join(r) for r in result["waiting"])
        )
        self.defer(trigger=trigger, method_name="execute_complete")

    def execute_complete(self, context, event: dict[str, Any]):
        result = dict(event.get("carry") or {})
        wait_until = result.pop(WAIT_UNTIL_KEY, None)
        for note in event.get("notes") or ():
            self.log.info("%s: %s", self.step, note)
        status = event.get("status")
        if status == "timeout" and wait_until is not None and time.time() < wait_until:
            svc = self._service(context)  # a turn ended: renew the lease, wait on
            if not svc.dry_run:
                self._lock(context, svc)
            again = self._defer(context, result, wait_until)
            return result if again is None else self.execute_complete(context, again)
        if status == "ready":
            self.log.info("%s: every resource is ready", self.step)
            return result
        if status == "timeout" and self.step == "nodes_ready":
            # Nodes that never became Ready stay tainted and are named by the release step.
            self.log.warning("%s: %s; going on with the Ready nodes", self.step, event["message"])
            return result
        raise AirflowException(
            f"onboarding step {self.step!r}: {event.get('message')} "
            f"({', '.join(f'{k}={v}' for k, v in (event.get('statuses') or {}).items())})"
        )


class OnboardingTargetsOperator(_RegionTask):
    """The region's pools to validate (``kind`` fabric or storage) as mapping kwargs for the
    nightly validation's own operators; none when ``validate`` is off or on a dry run."""

    template_fields: Sequence[str] = ("region", "dry_run", "validate")

    def __init__(self, *, kind: str, validate: Any = True, **kwargs: Any):
        super().__init__(**kwargs)
        self.kind = kind
        self.validate = validate

    def execute(self, context) -> list[dict[str, str]]:
        from gpufleet.services.validation.scope import plan_scope

        if _as_bool(self.dry_run) or not _as_bool(self.validate):
            self.log.info(
                "no %s validation (validate=%s, dry_run=%s)", self.kind, self.validate, self.dry_run
            )
            return []
        scope = plan_scope(catalog(), regions=[self.region])[self.kind]
        self.log.info(
            "%s validation of %s",
            self.kind,
            ", ".join(f"{t['cluster']}/{t['node_pool']}" for t in scope),
        )
        return scope


class RegionReleaseOperator(_RegionTask, WatchedBranchMixIn):
    """The end of onboarding: the region ready, or why not (every node still tainted, named).
    A branch: it follows ``announce_ready`` only when this run made the region ready (not a
    rerun that changed nothing, a dry run or ``validate=false``), so the event means what it
    says; a task that failed before it is recorded as the region's failure and fails it."""

    inherits_from_skipmixin = True

    template_fields: Sequence[str] = ("region", "dry_run", "validate")

    def __init__(self, *, validate: Any = True, **kwargs: Any):
        super().__init__(**kwargs)
        self.validate = validate

    def execute(self, context):
        return self.do_branch(context, ANNOUNCE_ID if self._release(context) else None)

    def _release(self, context) -> bool:
        """Release the region (or record why not); whether this run made it ready."""
        run_id = context["run_id"]
        # a decision, not the run's failure: a failed step is the region's recorded state
        failed = failed_tasks(context, ("release", ANNOUNCE_ID, "report"))
        if failed and not _as_bool(self.dry_run):
            svc = self._service(context)
            holder = (svc.ledger.region_lock(self.region) or {}).get("run_id")
            if holder != run_id:  # refused at its first step: never took the region
                raise AirflowFailException(
                    f"region {self.region}: not released: {', '.join(failed)} did not succeed; "
                    "this run does not hold the region's onboarding lock (it was refused, or "
                    f"{holder or 'no run'} holds it), so the region's state is left as it is"
                )
            self._lock(context, svc)  # a refused run never records the region's state
            reason = f"not released: {', '.join(failed)} did not succeed"
            state = svc.ledger.region_state(self.region) or {}
            if state.get("state") == "failed" and state.get("run_id") == run_id:
                reason = state["reason"]  # the step that failed said why (a refusal, ...)
            else:
                svc.ledger.set_region_state(self.region, "failed", reason, run_id)
            raise AirflowFailException(f"region {self.region}: {reason}")
        if failed:
            raise AirflowFailException(f"dry run: {', '.join(failed)} did not succeed")
        if _as_bool(self.dry_run):
            self.log.info("dry run: nothing was created; the region's state is unchanged")
            return False
        svc = self._service(context)
        self._lock(context, svc)
        became_ready, result = svc.release(_as_bool(self.validate))
        self._log_result(result, context)
        state = svc.ledger.region_state(self.region) or {}
        if state.get("state") == "failed":
            raise AirflowFailException(f"region {self.region} is not ready: {state['reason']}")
        if not became_ready:
            self.log.info(
                "region %s did not become ready in this run: no region-ready event", self.region
            )
        return became_ready


class RegionReadyAnnouncement(_RegionTask):
    """Emit the ``region-ready`` asset event (the nightly validation is scheduled on it); the
    ``release`` branch runs it only when this run made the region ready."""

    def execute(self, context):
        context["outlet_events"][REGION_READY].extra = {
            "region": self.region,
            "run_id": context["run_id"],
        }
        self.log.info("region %s is ready: region-ready asset event emitted", self.region)


class OnboardingReportOperator(_RegionTask):
    """The run's report (what each step found, created, would create or refused, with console
    links), from the ledger; releases the region's lock if this run holds it. Runs whatever
    happened."""

    def execute(self, context):
        from gpufleet.services.views.onboarding_report import onboarding_report

        run_id = context["run_id"]
        text, path = onboarding_report(ledger(self.ledger_conn_id), self.region, run_id)
        self.log.info("onboarding report (%s):\n%s", path, text)
        if ledger(self.ledger_conn_id).release_region_lock(self.region, run_id):
            self.log.info("region %s: onboarding lock released", self.region)
        failed = failed_tasks(context, ("report",))
        if failed:  # named here; the DAG's watcher fails the run
            self.log.warning(
                "region %s: %s did not succeed (report: %s)", self.region, ", ".join(failed), path
            )
        return str(path)
