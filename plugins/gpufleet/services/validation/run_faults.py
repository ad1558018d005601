"""A run's simulated faults (the ``sim_faults`` Param of the ``sim_fault_drill`` DAG, the one
form that has it): kept inside the run's own scope, and alive no longer than the run.

- Scope: a run names faults only for pools it works on (``FaultScope``: the pools the drill
  run validates, ``nightly_fault_scope``). ``check_run_faults`` reads every
  spec with the fault grammar's one parser and refuses, before anything is injected, a
  non-sim cluster or a pool outside the scope, naming the pool and the scope.
- Lifetime: faults are injected with the run's ``RunLease`` (its dag_id and run_id, and a
  lease: the sim never applies a fault past it), cleared by the run's teardown
  (``clear_run_faults``), and swept by the next drill's setup (or the nightly's and onboarding's
  first task, the transition's lock, the launch's gate) once their run is no longer alive
  (``sweep_ended_runs``), so a killed run cannot leave one behind.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass

from gpufleet.backends.faults import clear_faults, fault_injection, sweep_run_faults
from gpufleet.domain.faults import ActiveFault, Fault, RunLease, parse_pool_fault, run_scope
from gpufleet.domain.fleet import Catalog, PoolRef
from gpufleet.errors import GpufleetError

log = logging.getLogger(__name__)

__all__ = [
    "FaultScope",
    "check_run_faults",
    "clear_run_faults",
    "inject_run_faults",
    "nightly_fault_scope",
    "parse_fault_specs",
    "sweep_ended_runs",
]

_NAMED = 8  # pools of the scope a refusal names before "... and N more"


@dataclass(frozen=True)
class FaultScope:
    """The pools (``cluster/pool`` keys) a run may put faults on, and what they are (for
    messages: ``the pools this run validates``)."""

    name: str
    pools: frozenset[str]

    def names(self) -> str:
        keys = sorted(self.pools)
        more = f" and {len(keys) - _NAMED} more" if len(keys) > _NAMED else ""
        return ", ".join(keys[:_NAMED]) + more if keys else "no pools"


def nightly_fault_scope(
    catalog: Catalog,
    *,
    regions: list[str] | None = None,
    clusters: list[str] | None = None,
    pools: list[str] | None = None,
    in_service: Collection[tuple[str, str]] = (),
) -> FaultScope:
    """The pools a drill run validates (the nightly's regions, clusters and pools Params; as
    ``services.validation.scope.plan_scope`` selects them)."""
    from gpufleet.services.validation.scope import plan_scope  # it imports nothing of this module

    targets = plan_scope(
        catalog, regions=regions, clusters=clusters, pools=pools, in_service=in_service
    )["fabric"]
    keys = frozenset(f"{t['cluster']}/{t['node_pool']}" for t in targets)
    return FaultScope("the pools this run validates", keys)


def parse_fault_specs(catalog: Catalog, specs: list[str]) -> list[tuple[PoolRef, Fault]]:
    """``cluster/pool=fault`` strings -> (pool, typed fault); refuses non-sim targets and any
    fault the grammar refuses."""
    out = []
    for spec in specs or ():
        cluster, pool, fault = parse_pool_fault(spec)
        ref = catalog.pool(cluster, pool)
        if ref.cluster.provider != "sim":
            raise GpufleetError(
                f"faults can only be injected into sim clusters, not "
                f"{ref.cluster.provider} cluster {ref.cluster.name!r}"
            )
        out.append((ref, fault))
    return out


def check_run_faults(
    catalog: Catalog, specs: list[str], scope: FaultScope
) -> list[tuple[PoolRef, Fault]]:
    """``parse_fault_specs``, and every pool inside ``scope``: all are checked before any is
    injected."""
    parsed = parse_fault_specs(catalog, specs)
    for ref, fault in parsed:
        if ref.key not in scope.pools:
            raise GpufleetError(
                f"sim fault {fault.text!r} on {ref.key} is outside this run's scope "
                f"({scope.name}: {scope.names()}): a run injects faults only into the pools "
                "it works on; name one of those, or put a lasting fault in with "
                "`gpufleet sim inject`"
            )
    return parsed


def inject_run_faults(
    catalog: Catalog, specs: list[str], scope: FaultScope, lease: RunLease
) -> int:
    """Inject faults for one run only (``lease``: whose, and for how long at most); refused
    whole, before any is injected, when one is out of ``scope`` or malformed."""
    parsed = check_run_faults(catalog, specs, scope)
    for ref, fault in parsed:
        fault_injection(ref.cluster).inject(ref.pool.name, fault, lease=lease)
        log.warning(
            "injected sim fault %s into %s for run %s of %s (for %g s at most)",
            fault.text,
            ref.key,
            lease.run_id,
            lease.dag_id,
            lease.seconds,
        )
    return len(parsed)


def clear_run_faults(dag_id: str, run_id: str) -> int:
    """Remove the faults ``inject_run_faults`` put in for this run."""
    return clear_faults(run_scope(dag_id, run_id))


def sweep_ended_runs(alive: Callable[[str, str], bool]) -> list[ActiveFault]:
    """Remove the faults of runs no longer alive, or past their lease (``sweep_run_faults``),
    logging each."""
    removed = sweep_run_faults(alive)
    for f in removed:
        log.warning(
            "removed sim fault %s on %s/%s of %s: its run is over or its lease ran out",
            f.text,
            f.cluster,
            f.pool,
            f.scope,
        )
    return removed
