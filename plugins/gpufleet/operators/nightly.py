"""Operators around the per-pool validation: targets, run-scoped sim faults, the report.

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
        from gpufleet.catalog import load_catalog
        from gpufleet.services.nightly import plan_scope

        scope = plan_scope(
            load_catalog(),
            regions=self.regions or None,
            clusters=self.clusters or None,
            pools=self.pools or None,
            mode=self.mode,
        )[self.kind]
        self.log.info(
            "%s validation of %d pools: %s",
            self.kind,
            len(scope),
            ", ".join(f"{t['cluster']}/{t['node_pool']}" for t in scope) or "none",
        )
        return scope


class SimFaultsOperator(BaseOperator):
    """Inject ``cluster/pool=fault`` faults into sim clusters for this run only."""

    template_fields: Sequence[str] = ("faults",)

    def __init__(self, *, faults: Any = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.faults = faults

    def execute(self, context) -> int:
        from gpufleet.catalog import load_catalog
        from gpufleet.services.nightly import inject_run_faults

        return inject_run_faults(load_catalog(), list(self.faults or ()), context["run_id"])


class ValidationReportOperator(BaseOperator):
    """Write the run's report and metrics, clear run-scoped faults; fail if any check failed."""

    def execute(self, context) -> dict[str, str]:
        from airflow.sdk.exceptions import AirflowFailException

        from gpufleet.catalog import load_catalog
        from gpufleet.operators.common import ledger
        from gpufleet.services.nightly import clear_run_faults, nightly_report

        run_id = context["run_id"]
        clear_run_faults(run_id)
        result = nightly_report(ledger(), load_catalog(), run_id)
        self.log.info("report:\n%s", result["markdown"])
        self.log.info(
            "HTML report: %s; metrics: %s",
            result["paths"]["report.html"],
            result["paths"]["metrics.prom"],
        )
        if result["failed"]:
            raise AirflowFailException(
                f"{len(result['failed'])} of {result['checks']} checks failed: "
                + " | ".join(result["failed"])
            )
        return result["paths"]
