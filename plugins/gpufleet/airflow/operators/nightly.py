"""Operators around the per-pool validation: targets, the report (a run's sim faults are
``operators.faults``' setup and teardown tasks).

Plain operators rather than TaskFlow functions: the DAG file stays cheap to parse (the
TaskFlow machinery costs more to import than the rest of the DAG)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

if TYPE_CHECKING:
    from gpufleet.domain.fleet import Catalog
    from gpufleet.services.validation.unvalidated import NotValidated
    from gpufleet.store import Ledger


def nightly_targets(  # noqa: PLR0913  the run's scope Params, as given
    log: Any, regions: Any, clusters: Any, pools: Any, mode: str, night: int = 0
) -> dict[str, list[dict[str, Any]]]:
    """The pools a nightly validates (``plan_scope``; ``night``, its day number, picks each
    filesystem's full-test host), as the fabric and storage tasks' mapping kwargs, less the
    clusters not created yet and the retired pools (each logged as left out). A bad name or
    mode raises ``AirflowFailException``: retrying will not fix it."""
    from airflow.sdk.exceptions import AirflowFailException

    from gpufleet.airflow.operators.common import ledger
    from gpufleet.config.catalog import load_catalog
    from gpufleet.errors import GpufleetError
    from gpufleet.services.infrastructure.onboarding import clusters_not_created
    from gpufleet.services.validation.scope import plan_scope

    try:
        catalog = load_catalog()
        book = ledger()
        named = list(
            catalog.pools(regions=regions or None, clusters=clusters or None, pools=pools or None)
        )
        absent = clusters_not_created(catalog, book, {r.cluster.name for r in named})
        retired = {key for key, row in book.pool_states().items() if row["state"] == "retired"}
        for reason in absent.values():
            log.warning("left out: %s", reason)
        for key in sorted(retired):
            log.warning("left out: %s/%s is retired: remove it from the catalog", *key)
        return plan_scope(
            catalog,
            regions=regions or None,
            clusters=clusters or None,
            pools=pools or None,
            mode=mode,
            in_service=book.transitioned_pools(),
            leave_out=retired
            | {(r.cluster.name, r.pool.name) for r in named if r.cluster.name in absent},
            night=night,
        )
    except GpufleetError as exc:
        raise AirflowFailException(str(exc)) from None


def run_night(context) -> int:
    """The run's day number (``run_after``'s, the same for each of its tasks): which pool
    hosts each filesystem's full test (``scope.full_test_hosts``)."""
    return context["dag_run"].run_after.date().toordinal()


def _keys(targets: dict[str, list[dict[str, Any]]]) -> list[str]:
    """The pools (``cluster/pool``) of the fabric and storage targets, each once."""
    return list(
        dict.fromkeys(f"{t['cluster']}/{t['node_pool']}" for ts in targets.values() for t in ts)
    )


class ValidationTargetsOperator(BaseOperator):
    """The pools to validate (``kind``: fabric or storage), as mapping kwargs. One run
    validates at most ``[gpufleet] pools_per_run`` pools: more is refused, naming the planner
    DAG that splits them."""

    template_fields: Sequence[str] = ("regions", "clusters", "pools", "mode")

    def __init__(
        self,
        *,
        kind: str,
        regions: Any = None,
        clusters: Any = None,
        pools: Any = None,
        mode: str = "both",
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.kind = kind
        self.regions = regions
        self.clusters = clusters
        self.pools = pools
        self.mode = mode

    def execute(self, context) -> list[dict[str, Any]]:
        from airflow.sdk.exceptions import AirflowFailException

        from gpufleet.airflow.operators.common import pools_per_run
        from gpufleet.errors import GpufleetError
        from gpufleet.services.validation.fanout import check_run_size

        targets = nightly_targets(
            self.log, self.regions, self.clusters, self.pools, self.mode, run_night(context)
        )
        try:
            check_run_size(len(_keys(targets)), pools_per_run())
        except GpufleetError as exc:
            raise AirflowFailException(str(exc)) from None
        scope = targets[self.kind]
        self.log.info(
            "%s validation of %d pools: %s",
            self.kind,
            len(scope),
            ", ".join(f"{t['cluster']}/{t['node_pool']}" for t in scope) or "none",
        )
        return scope


class RemediationTargetsOperator(BaseOperator):
    """After the run's fabric validations (whatever their outcome): the pools of
    ``fabric_targets`` with a node the remediation step has something to do for (draining,
    drained, repairing, or needs-human not yet paged: ``fanout.pools_to_remediate``), as
    ``remediate_nodes``' mapping kwargs. A healthy night maps none: one ledger read for the
    run instead of a remediation task per pool."""

    def __init__(self, *, targets_task: str = "fabric_targets", **kwargs: Any):
        super().__init__(**kwargs)
        self.targets_task = targets_task

    def execute(self, context) -> list[dict[str, str]]:
        from gpufleet.airflow.operators.common import ledger
        from gpufleet.services.validation.fanout import REMEDIATED_STATES, pools_to_remediate

        targets = context["ti"].xcom_pull(task_ids=self.targets_task) or []
        clusters = sorted({t["cluster"] for t in targets})
        rows = ledger().node_states(clusters, states=REMEDIATED_STATES) if clusters else []
        due = pools_to_remediate(targets, rows)
        self.log.info(
            "node remediation for %d of %d pools: %s",
            len(due),
            len(targets),
            ", ".join(f"{t['cluster']}/{t['node_pool']}" for t in due) or "none",
        )
        return due


class ClusterRunsOperator(BaseOperator):
    """The planner's plan: one ``nightly_fabric_validation`` run per cluster of the scope (a
    cluster past ``[gpufleet] pools_per_run`` pools split into parts), as the mapping kwargs of
    the ``TriggerDagRunOperator`` that starts them: run id and conf (the run's settings and
    its pools)."""

    template_fields: Sequence[str] = (
        "regions",
        "clusters",
        "pools",
        "mode",
        "settings",
    )

    def __init__(
        self,
        *,
        regions: Any = None,
        clusters: Any = None,
        pools: Any = None,
        mode: str = "both",
        settings: Any = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.regions = regions
        self.clusters = clusters
        self.pools = pools
        self.mode = mode
        self.settings = settings

    def execute(self, context) -> list[dict[str, Any]]:
        from airflow.sdk.exceptions import AirflowFailException

        from gpufleet.airflow.operators.common import pools_per_run
        from gpufleet.errors import GpufleetError
        from gpufleet.services.validation.fanout import plan_cluster_runs

        try:
            per_run = pools_per_run()
        except GpufleetError as exc:
            raise AirflowFailException(str(exc)) from None
        targets = nightly_targets(
            self.log, self.regions, self.clusters, self.pools, self.mode, run_night(context)
        )
        runs = plan_cluster_runs(_keys(targets), context["run_id"], per_run)
        for run in runs:
            self.log.info("%s: %d pools (%s)", run.run_id, len(run.pools), ", ".join(run.pools))
        self.log.info(
            "%d pools in %d runs of nightly_fabric_validation (at most %d pools each)",
            sum(len(r.pools) for r in runs),
            len(runs),
            per_run,
        )
        return [run.trigger_kwargs(dict(self.settings or {}, mode=self.mode)) for run in runs]


class ValidationReportOperator(BaseOperator):
    """Judge drift, write the run's report; alert on drift (a warning:
    the task still succeeds when every check passed); fail if any check failed. A task that
    failed without a verdict is named in the log; the DAG's ``watcher`` fails the run for it.

    A run that planned checks and recorded none (every pool skipped: other runs hold their
    validation locks) fails, saying so in the report and in the failure: green must mean
    validated. A pool skipped behind a stuck holder (Airflow shows its run running, its lease
    lapsed: a killed ``airflow dags test``) fails the run too, naming the run and how to mark
    it failed. Airflow 3's Task SDK gives a task no way to write its own run's note (only a
    triggering operator's ``note``), so the failure's message is the run's last word.

    ``runs`` (the planner's: its plan, a list of ``trigger_run_id``/``conf`` mappings): report
    over the verdicts of those runs instead of this run's own; each judged its drift already."""

    template_fields: Sequence[str] = ("runs",)

    def __init__(self, *, runs: Any = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.runs = runs

    def execute(self, context) -> dict[str, str]:
        from airflow.sdk.exceptions import AirflowFailException

        from gpufleet.airflow.notifiers import send_alert
        from gpufleet.airflow.operators.common import failed_tasks, ledger
        from gpufleet.config.catalog import load_catalog
        from gpufleet.services.validation.unvalidated import nothing_validated_text
        from gpufleet.services.views.nightly_report import nightly_report

        run_id = context["run_id"]
        children = None if self.runs is None else [r["trigger_run_id"] for r in self.runs]
        book, catalog = ledger(), load_catalog()
        planned, skipped = self._not_validated(context, book, catalog, children)
        result = nightly_report(
            book, catalog, run_id, runs=children, not_validated=[s.text() for s in skipped]
        )
        self.log.info("report:\n%s", result.markdown)
        self.log.info("HTML report: %s", result.paths["report.html"])
        if result.warnings:
            send_alert(
                "fleet drifting (still passing)",
                f"{self.dag_id}.{self.task_id}",
                f"{len(result.warnings)} drift finding(s): " + " | ".join(result.warnings),
                run_id,
            )
        failed = list(result.failed)
        # a task that failed before recording a verdict (bad scope, lost cluster) is named
        # here; the run fails through its watcher, not through this report
        tasks = [f"task {key} did not succeed" for key in failed_tasks(context, ("report",))]
        for text in tasks:
            self.log.warning("%s", text)
        for s in skipped:
            self.log.warning("not validated: %s", s.text())
        if planned and result.checks == 0:
            # validated nothing (every pool skipped: other runs hold their locks): a green
            # run would read as "validated" to whoever looks; it fails, saying so first
            also = f" | also: {' | '.join(failed + tasks)}" if failed or tasks else ""
            raise AirflowFailException(nothing_validated_text(skipped, len(planned)) + also)
        # a stuck holder (alive to Airflow, silent past its lease) skips its pools every
        # night until cleared: a problem of this run's, with how to clear it
        failed += [s.text() for s in skipped if s.stuck]
        if failed:
            raise AirflowFailException(
                f"{len(failed)} problem(s) in this validation run: " + " | ".join(failed)
            )
        return dict(result.paths)

    def _not_validated(
        self, context, book: Ledger, catalog: Catalog, children: list[str] | None
    ) -> tuple[list[tuple[str, str, str]], list[NotValidated]]:
        """The checks this run planned (its targets; a planner's: its cluster runs' pools),
        and those it recorded no verdict for, each with its lock's holder
        (``services.validation.unvalidated``)."""
        from datetime import UTC, datetime

        from gpufleet.airflow.operators.runs import run_liveness
        from gpufleet.services.validation.unvalidated import not_validated, planned_checks

        run_id = context["run_id"]
        if children is None:
            ti = context["ti"]
            planned = [
                (t["cluster"], t["node_pool"], kind)
                for kind in ("fabric", "storage")
                for t in (ti.xcom_pull(task_ids=f"{kind}_targets") or [])
            ]
            rows = book.validations_for_run(run_id)
        else:
            planned = [
                check
                for r in self.runs or ()
                for check in planned_checks(
                    catalog, (r.get("conf") or {}).get("pools") or (), r["conf"].get("mode", "both")
                )
            ]
            rows = [row for child in children for row in book.validations_for_run(child)]
        skipped = not_validated(
            book,
            planned,
            rows,
            [run_id, *(children or ())],
            lambda dag_id, holder_run: run_liveness(context, dag_id, holder_run),
            datetime.now(UTC),
        )
        return planned, skipped
