"""Operators of the ``region_onboarding`` DAG: one step of ``services.onboarding`` each.

``OnboardingStepOperator`` runs a step (preflight, network, cluster, filesystems, node_pools,
nodes_ready, addons), logs what was found, created, would be created or refused, and defers to
``CloudResourcesTrigger`` while what it created is still being created. A refusal fails the
task for good; a cloud error that outlasted the backend's retries fails it naming the step
(Airflow's retries apply, and a rerun finds what exists). ``RegionReleaseOperator`` decides the
end: ready (and a ``region-ready`` asset event the nightly validation is scheduled on), or not,
naming every node that stays tainted and why. Each task links to the cloud console.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator, BaseOperatorLink
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from gpufleet.airflow.assets import REGION_READY
from gpufleet.airflow.operators.common import catalog, failed_tasks, ledger, poll_interval

# How long a step waits on what it created before failing (nodes_ready: before going on with
# the nodes that are Ready, the others staying tainted and named).
WAIT_TIMEOUT_S = {"cluster": 3600.0, "filesystems": 5400.0, "node_pools": 3600.0}
NODES_READY_TIMEOUT_S = 1800.0


class ConsoleLink(BaseOperatorLink):
    """The cloud console page of the resource a step created or found (the first one)."""

    name = "Cloud console"

    def get_link(self, operator, *, ti_key) -> str:
        return getattr(operator, "console_url", None) or ""


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
        self.dry_run = dry_run
        self.ledger_conn_id = ledger_conn_id
        self.console_url: str | None = None

    def _service(self, context):
        from gpufleet.errors import GpufleetError
        from gpufleet.services.onboarding import RegionOnboarding

        try:
            region = catalog().region(self.region)
        except GpufleetError as exc:
            raise AirflowFailException(str(exc)) from None
        return RegionOnboarding(
            region, ledger(self.ledger_conn_id), context["run_id"], dry_run=_as_bool(self.dry_run)
        )

    def _log_result(self, result: dict[str, Any]) -> None:
        for a in result["actions"]:
            self.log.info(
                "%s %s %s: %s%s%s",
                result["step"],
                a["kind"],
                a["name"],
                a["action"],
                f" ({a['status']})" if a.get("status") else "",
                f"  {a['console_url']}" if a.get("console_url") else "",
            )
            if not self.console_url and a.get("console_url"):
                self.console_url = a["console_url"]
        for note in result["notes"]:
            self.log.info("%s: %s", result["step"], note)


class OnboardingStepOperator(_RegionTask):
    """One onboarding step for a region; defers while what it created is not ready.
    ``sim_faults`` (``cluster/pool=fault``, sim clusters only) are injected for this run before
    the step (the preflight's), and cleared by the report task."""

    template_fields: Sequence[str] = ("region", "dry_run", "sim_faults", "timeout_minutes")

    def __init__(
        self, *, step: str, sim_faults: Any = None, timeout_minutes: Any = None, **kwargs: Any
    ):
        super().__init__(**kwargs)
        self.step = step
        self.sim_faults = sim_faults
        self.timeout_minutes = timeout_minutes  # None: the step's default (WAIT_TIMEOUT_S)

    def execute(self, context):
        from gpufleet.errors import GpufleetError
        from gpufleet.services.nightly import inject_run_faults
        from gpufleet.services.onboarding import OnboardingRefused

        svc = self._service(context)
        try:
            if self.sim_faults:
                inject_run_faults(catalog(), list(self.sim_faults), context["run_id"])
        except GpufleetError as exc:
            raise AirflowFailException(str(exc)) from None
        try:
            result = getattr(svc, self.step)().to_dict()
        except OnboardingRefused as exc:
            raise AirflowFailException(str(exc)) from None
        except GpufleetError as exc:
            raise AirflowException(f"onboarding step {self.step!r} failed: {exc}") from exc
        self._log_result(result)
        if result["waiting"]:
            self._defer(context, result)
        return result

    def _defer(self, context, result: dict[str, Any]) -> None:
        from gpufleet.airflow.triggers import CloudResourcesTrigger

        region = catalog().region(self.region)
        if self.timeout_minutes not in (None, "", "None"):
            timeout = float(self.timeout_minutes) * 60
        elif self.step == "nodes_ready":
            timeout = NODES_READY_TIMEOUT_S
        else:
            timeout = WAIT_TIMEOUT_S.get(self.step, 3600.0)
        trigger = CloudResourcesTrigger(
            resources=result["waiting"],
            poll_interval=min(poll_interval(c) for c in region.clusters),
            timeout=timeout,
            carry=result,
        )
        event = trigger.check_now()  # already there: no deferral (the providers' pattern)
        if event is not None:
            return
        self.log.info(
            "%s: waiting for %s", self.step, ", ".join("/".join(r) for r in result["waiting"])
        )
        self.defer(trigger=trigger, method_name="execute_complete")

    def execute_complete(self, context, event: dict[str, Any]):
        result = event.get("carry") or {}
        for note in event.get("notes") or ():
            self.log.info("%s: %s", self.step, note)
        status = event.get("status")
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
        from gpufleet.services.nightly import plan_scope

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


class RegionReleaseOperator(_RegionTask):
    """The end of onboarding: the region ready, or why not (every node still tainted, named).
    Returns ``became_ready`` for the announcement task."""

    template_fields: Sequence[str] = ("region", "dry_run", "validate")

    def __init__(self, *, validate: Any = True, **kwargs: Any):
        super().__init__(**kwargs)
        self.validate = validate

    def execute(self, context):
        run_id = context["run_id"]
        failed = failed_tasks(context, ("release", "announce_ready", "report"))
        if failed and not _as_bool(self.dry_run):
            svc = self._service(context)
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
            return {"ready": False, "became_ready": False, "dry_run": True}
        svc = self._service(context)
        became_ready, result = svc.release(_as_bool(self.validate))
        self._log_result(result.to_dict())
        state = svc.ledger.region_state(self.region) or {}
        if state.get("state") == "failed":
            raise AirflowFailException(f"region {self.region} is not ready: {state['reason']}")
        return {
            "ready": state.get("state") == "ready",
            "became_ready": became_ready,
            "notes": result.notes,
        }


class RegionReadyAnnouncement(_RegionTask):
    """Emit the ``region-ready`` asset event (the nightly validation is scheduled on it) when
    this run made the region ready; skipped otherwise (a rerun that changed nothing, a dry run,
    ``validate=false``), so the event means what it says."""

    template_fields: Sequence[str] = ("region", "dry_run", "release")

    def __init__(self, *, release: Any = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.release = release

    def execute(self, context):
        from airflow.sdk.exceptions import AirflowSkipException

        release = self.release if isinstance(self.release, dict) else {}
        if not release.get("became_ready"):
            raise AirflowSkipException(
                f"region {self.region} did not become ready in this run: no region-ready event"
            )
        context["outlet_events"][REGION_READY].extra = {
            "region": self.region,
            "run_id": context["run_id"],
        }
        self.log.info("region %s is ready: region-ready asset event emitted", self.region)


class OnboardingReportOperator(_RegionTask):
    """The run's report (what each step found, created, would create or refused, with console
    links), from the ledger; clears this run's simulated faults. Runs whatever happened."""

    def execute(self, context):
        from gpufleet.services.nightly import clear_run_faults
        from gpufleet.services.onboarding import onboarding_report

        run_id = context["run_id"]
        clear_run_faults(run_id)
        text, path = onboarding_report(ledger(self.ledger_conn_id), self.region, run_id)
        self.log.info("onboarding report (%s):\n%s", path, text)
        failed = failed_tasks(context, ("report",))
        if failed:  # the report is the run's last word: the run fails with its steps
            raise AirflowFailException(
                f"region {self.region}: {', '.join(failed)} did not succeed (report: {path})"
            )
        return str(path)
