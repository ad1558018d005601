"""Fault injection into the simulated fleet: the sim's side of ``gpufleet.backends.faults``.

Faults are checked before they are stored: the pool must be a pool of the cluster and a
``bad-node`` fault must name one of its nodes. Injected faults carry a scope (``cli``: in
force until cleared; or ``run:<dag id>/<run id>`` for one DAG run, with its ``RunLease``: in
force at most until the lease ends, and swept once the run is over) so they can be cleared
together; the catalog's standing faults are listed with them but cannot be cleared here (edit
the catalog).
"""

from __future__ import annotations

from collections.abc import Callable

from gpufleet.backends.base import NodeInfo
from gpufleet.backends.sim.cluster import SimClusterBackend
from gpufleet.backends.sim.state import SimState, db_path
from gpufleet.backends.sim.topology import sim_place
from gpufleet.domain.faults import ActiveFault, Fault, FaultError, RunLease, parse_fault
from gpufleet.domain.fleet import Cluster, NodePool


class SimFaultInjection:
    """Inject, list and clear the faults of one ``provider: sim`` cluster."""

    def __init__(self, cluster: Cluster, state: SimState | None = None):
        self._backend = SimClusterBackend(cluster, state)
        self.cluster = cluster
        self.state = self._backend.state

    def nodes(self, pool: str | None = None) -> list[NodeInfo]:
        """The cluster's nodes as they are (no injected API errors on this path)."""
        return self._backend.nodes(pool)

    def inject(
        self, pool: str, fault: Fault | str, scope: str = "cli", lease: RunLease | None = None
    ) -> bool:
        """Put ``fault`` in force on ``pool`` (for one run, with its ``lease``); False when it
        already was."""
        parsed = fault if isinstance(fault, Fault) else parse_fault(fault)
        node_pool = self.cluster.pool(pool)  # CatalogError naming the pools when unknown
        if parsed.node is not None:
            names = [n.name for n in self.nodes(node_pool.name)]
            # a pool still to be created (onboarding) will have the sim's usual node names
            names += [
                self.state.node_name(self.cluster.name, node_pool.name, i)
                for i in range(node_pool.nodes)
                if self.state.node_name(self.cluster.name, node_pool.name, i) not in names
            ]
            if parsed.node not in names:
                raise FaultError(
                    f"{self.cluster.name}/{node_pool.name} has no node {parsed.node!r} "
                    f"(nodes: {', '.join(names)})"
                )
        if parsed.place is not None:
            self._check_place(node_pool, parsed)
        return self.state.inject(self.cluster.name, node_pool.name, parsed, scope, lease)

    def _check_place(self, node_pool: NodePool, fault: Fault) -> None:
        """A topology fault names one of the pool's sub-blocks (``subblock-down``) or its
        block (``block-slow``), as ``backends.sim.topology`` places its nodes."""
        places = {
            sim_place(node_pool, self.state.node_name(self.cluster.name, node_pool.name, i))
            for i in range(node_pool.nodes)
        }
        known = sorted({p.subblock if fault.kind == "subblock-down" else p.block for p in places})
        if fault.place not in known:
            what = "sub-block" if fault.kind == "subblock-down" else "block"
            raise FaultError(
                f"{self.cluster.name}/{node_pool.name} has no {what} {fault.place!r} "
                f"({what}s: {', '.join(known)})"
            )

    def clear(self, pool: str | None = None, scope: str | None = None) -> int:
        """Remove injected faults of this cluster (of one pool, of one scope); how many."""
        return self.state.clear(self.cluster.name, pool, scope)

    def active(self) -> list[ActiveFault]:
        """Injected faults and the catalog's standing faults, oldest first."""
        return self.state.faults(self._backend.catalog, cluster=self.cluster.name)


def clear_scope(scope: str) -> int:
    """Remove every injected fault of ``scope``, whatever the cluster; 0 if the simulated
    fleet was never used (its state file is not created for this)."""
    if not db_path().exists():
        return 0
    return SimState().clear(scope=scope)


def sweep_runs(alive: Callable[[str, str], bool]) -> list[ActiveFault]:
    """Remove the faults of runs that are no longer alive (``alive(dag_id, run_id)``) or whose
    lease ran out, whatever the cluster; the faults removed (none if the simulated fleet was
    never used)."""
    if not db_path().exists():
        return []
    return SimState().sweep(alive)


def reset() -> None:
    """Forget all simulated state: nodes are re-created from the catalog on next use."""
    SimState().reset()
