"""Fault injection, behind one small interface: how services and the CLI put faults into a
cluster without knowing which backend serves it.

``fault_injection(cluster)`` returns the cluster's injector. Only the simulated fleet takes
injected faults: for any other provider it raises a ``BackendError`` saying so. Faults are
typed (``gpufleet.domain.faults.Fault``, read by its one parser); ``clear_faults(scope)``,
``sweep_run_faults(alive)`` and ``reset_simulated_fleet()`` act on the whole simulated fleet.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from gpufleet.backends.base import NodeInfo
from gpufleet.domain.faults import ActiveFault, Fault, RunLease
from gpufleet.domain.fleet import Cluster
from gpufleet.errors import BackendError


class FaultInjection(Protocol):
    """The faults of one cluster."""

    cluster: Cluster

    def inject(
        self, pool: str, fault: Fault | str, scope: str = "cli", lease: RunLease | None = None
    ) -> bool:
        """Put a fault in force on ``pool`` (checked first; for one run with its ``lease``);
        False when it already was."""

    def clear(self, pool: str | None = None, scope: str | None = None) -> int:
        """Remove injected faults (of one pool, of one scope); returns how many."""

    def active(self) -> list[ActiveFault]:
        """The faults in force: injected ones and standing ones from the catalog."""

    def nodes(self, pool: str | None = None) -> list[NodeInfo]:
        """The cluster's nodes as they are, with no injected API errors on the way."""


def fault_injection(cluster: Cluster) -> FaultInjection:
    """The injector of ``cluster``; a ``BackendError`` unless it is a ``provider: sim`` one."""
    if cluster.provider != "sim":
        raise BackendError(
            f"faults can only be injected into sim clusters, not {cluster.provider} cluster "
            f"{cluster.name!r}"
        )
    from gpufleet.backends.sim.injection import SimFaultInjection

    return SimFaultInjection(cluster)


def clear_faults(scope: str) -> int:
    """Remove every injected fault of ``scope`` (e.g. ``run:<run id>``) from the simulated
    fleet; 0 when the simulated fleet was never used."""
    from gpufleet.backends.sim.injection import clear_scope

    return clear_scope(scope)


def sweep_run_faults(alive: Callable[[str, str], bool]) -> list[ActiveFault]:
    """Remove the run-scoped faults of runs no longer alive (``alive(dag_id, run_id)``) or past
    their lease from the simulated fleet; the faults removed."""
    from gpufleet.backends.sim.injection import sweep_runs

    return sweep_runs(alive)


def reset_simulated_fleet() -> None:
    """Forget all simulated state: nodes come back from the catalog, taints and faults go."""
    from gpufleet.backends.sim.injection import reset

    reset()
