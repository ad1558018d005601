"""Operators around the per-pool validation: targets, the report (a run's sim faults are
``operators.faults``' setup and teardown tasks).

Plain operators rather than TaskFlow functions: the DAG file stays cheap to parse (the
TaskFlow machinery costs more to import than the rest of the DAG)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator


class ValidationTargetsOperator(BaseOperator):
    """The pools to validate (``kind``: fabric or storage), as mapping kwargs."""

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

    def execute(self, context) -> list[dict[str, str]]:
        from airflow.sdk.exceptions import AirflowFailException

        from gpufleet.airflow.operators.common import ledger
        from gpufleet.config.catalog import load_catalog
        from gpufleet.errors import GpufleetError
        from gpufleet.services.validation.scope import plan_scope

        try:  # bad names or faults will not get better by retrying
            catalog = load_catalog()
            book = ledger()
            scope = plan_scope(
                catalog,
                regions=self.regions or None,
                clusters=self.clusters or None,
                pools=self.pools or None,
                mode=self.mode,
                in_service=book.transitioned_pools(),
            )[self.kind]
        except GpufleetError as exc:
            raise AirflowFailException(str(exc)) from None
        from gpufleet.services.infrastructure.onboarding import clusters_not_created

        absent = clusters_not_created(catalog, book, {t["cluster"] for t in scope})
        for reason in absent.values():
            self.log.warning("left out: %s", reason)
        retired = {key for key, row in book.pool_states().items() if row["state"] == "retired"}
        for key in sorted(retired):
            self.log.warning("left out: %s/%s is retired: remove it from the catalog", *key)
        scope = [
            t
            for t in scope
            if t["cluster"] not in absent and (t["cluster"], t["node_pool"]) not in retired
        ]
        self.log.info(
            "%s validation of %d pools: %s",
            self.kind,
            len(scope),
            ", ".join(f"{t['cluster']}/{t['node_pool']}" for t in scope) or "none",
        )
        return scope


class ValidationReportOperator(BaseOperator):
    """Judge drift, write the run's report; alert on drift (a warning:
    the task still succeeds when every check passed); fail if any check failed."""

    def execute(self, context) -> dict[str, str]:
        from airflow.sdk.exceptions import AirflowFailException

        from gpufleet.airflow.notifiers import send_alert
        from gpufleet.airflow.operators.common import failed_tasks, ledger
        from gpufleet.config.catalog import load_catalog
        from gpufleet.services.views.nightly_report import nightly_report

        run_id = context["run_id"]
        result = nightly_report(ledger(), load_catalog(), run_id)
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
        # a task that failed before recording a verdict (bad scope, lost cluster) fails the
        # run too: the report is the run's last word
        failed += [f"task {key} did not succeed" for key in failed_tasks(context, ("report",))]
        if failed:
            raise AirflowFailException(
                f"{len(failed)} problem(s) in this validation run: " + " | ".join(failed)
            )
        return dict(result.paths)
