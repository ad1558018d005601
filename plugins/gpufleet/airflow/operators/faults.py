"""A run's simulated faults as Airflow tasks (``services.validation.run_faults``).

``RunFaultsSweepOperator``, the first task of the production DAGs that validate, removes the
faults of runs that are no longer alive (``runs.run_alive``: a ``sim_fault_drill`` run killed
with ``kill -9`` never ran its teardown). In ``sim_fault_drill`` only,
``RunFaultsSetupOperator`` (``.as_setup()``) sweeps the same way, then checks the run's
``sim_faults`` against the pools the run validates (its ``regions``/``clusters``/``pools``) and
injects them with the run's lease (the DAG's ``dagrun_timeout``, else ``DEFAULT_RUN_LEASE_S``);
``RunFaultsTeardownOperator`` (``.as_teardown(setups=...)``) clears them whatever happened to the
run's other tasks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator


def lease_seconds(dag: Any) -> float:
    """How long a run's faults may stay in force at most: the DAG's ``dagrun_timeout`` (a run
    cannot outlive it), else ``DEFAULT_RUN_LEASE_S``."""
    from gpufleet.domain.faults import DEFAULT_RUN_LEASE_S

    timeout = getattr(dag, "dagrun_timeout", None)
    return timeout.total_seconds() if timeout else DEFAULT_RUN_LEASE_S


def sweep_ended_runs(context) -> int:
    """Remove the faults of runs no longer alive (or past their lease); how many."""
    from gpufleet.airflow.operators.runs import run_alive
    from gpufleet.services.validation.run_faults import sweep_ended_runs as sweep

    return len(sweep(lambda dag_id, run_id: run_alive(context, dag_id, run_id)))


class RunFaultsSweepOperator(BaseOperator):
    """Remove the sim faults of runs that are over (none where no sim fleet was ever used)."""

    ui_color = "#fff0d0"

    def execute(self, context) -> int:
        swept = sweep_ended_runs(context)
        if swept:
            self.log.warning("removed %d sim fault(s) left by runs that are over", swept)
        return swept


class RunFaultsSetupOperator(BaseOperator):
    """Setup task: sweep faults of ended runs, then inject this run's ``sim_faults``
    (``cluster/pool=fault``, sim clusters and this run's own pools only), refused whole before
    any is injected."""

    template_fields: Sequence[str] = ("sim_faults", "regions", "clusters", "pools")
    ui_color = "#fff0d0"

    def __init__(
        self,
        *,
        sim_faults: Any = None,
        regions: Any = None,
        clusters: Any = None,
        pools: Any = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.sim_faults = sim_faults
        self.regions = regions
        self.clusters = clusters
        self.pools = pools

    def execute(self, context) -> int:
        from airflow.sdk.exceptions import AirflowFailException

        from gpufleet.airflow.operators.common import catalog, ledger
        from gpufleet.domain.faults import RunLease
        from gpufleet.errors import GpufleetError
        from gpufleet.services.validation.run_faults import inject_run_faults, nightly_fault_scope

        swept = sweep_ended_runs(context)
        if swept:
            self.log.warning("removed %d sim fault(s) left by runs that are over", swept)
        specs = list(self.sim_faults or ())
        if not specs:
            return 0
        try:  # bad faults or names will not get better by retrying
            fleet = catalog()
            scope = nightly_fault_scope(
                fleet,
                regions=self.regions or None,
                clusters=self.clusters or None,
                pools=self.pools or None,
                in_service=ledger().transitioned_pools(),
            )
            dag = context["dag"]
            lease = RunLease(dag.dag_id, context["run_id"], lease_seconds(dag))
            return inject_run_faults(fleet, specs, scope, lease)
        except GpufleetError as exc:
            raise AirflowFailException(str(exc)) from None


class RunFaultsTeardownOperator(BaseOperator):
    """Teardown task: clear the faults this run's setup injected."""

    ui_color = "#fff0d0"

    def execute(self, context) -> int:
        from gpufleet.services.validation.run_faults import clear_run_faults

        cleared = clear_run_faults(context["dag"].dag_id, context["run_id"])
        self.log.info("cleared %d sim fault(s) of this run", cleared)
        return cleared
