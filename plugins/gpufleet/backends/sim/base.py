"""What both simulated backends share: the catalog cluster they serve, the state file, the
faults in force, and the cloud/cluster API errors an ``api-errors`` fault injects."""

from __future__ import annotations

import random

from gpufleet.backends.sim import calls
from gpufleet.backends.sim.faults import PoolFaults
from gpufleet.backends.sim.sim_clock import SimClock
from gpufleet.backends.sim.state import SimState
from gpufleet.config.catalog import load_catalog
from gpufleet.domain.fleet import Catalog, Cluster
from gpufleet.errors import BackendError, TransientBackendError


class SimBackendBase:
    """A backend bound to one ``provider: sim`` cluster of the catalog."""

    def __init__(self, cluster: Cluster, state: SimState | None = None):
        if cluster.provider != "sim":
            raise BackendError(f"cluster {cluster.name!r} is {cluster.provider}, not sim")
        self.cluster = cluster
        self.state = state or SimState()
        if cluster.sim is None or cluster.sim.preexisting:
            self.state.ensure_seeded(cluster)
        self._catalog: Catalog | None = None

    @property
    def catalog(self) -> Catalog:
        """The catalog, read once per backend (its standing faults and reservations)."""
        if self._catalog is None:
            self._catalog = load_catalog()
        return self._catalog

    def faults(self, pool: str | None = None) -> PoolFaults:
        """The faults in force on ``pool`` (on any pool of the cluster when None)."""
        return PoolFaults.of(self.state.faults(self.catalog, cluster=self.cluster.name), pool)

    def _api_call(self, what: str) -> None:
        """Injected cloud/cluster API errors: fail this call with the configured probability
        (with ``after=N``, only once N calls went through since the fault was injected).
        Counted in the cluster's call log when one is kept (``sim.calls``)."""
        calls.record(self.cluster.name, what)
        faults = self.faults()
        rate = faults.api_error_rate
        if not rate:
            return
        if faults.api_errors_after and self.state.count_call(self.cluster.name) <= (
            faults.api_errors_after
        ):
            return
        if random.random() < rate:
            raise TransientBackendError(
                f"sim {self.cluster.name}: {what}: 503 Service Unavailable (injected api-errors)"
            )

    def cluster_exists(self) -> bool:
        """A preexisting sim cluster always exists; another one once onboarding created it."""
        if self.cluster.sim is None or self.cluster.sim.preexisting:
            return True
        with self.state.read() as conn:
            row = conn.execute(
                "SELECT 1 FROM cloud WHERE cluster=? AND kind='cluster'", (self.cluster.name,)
            ).fetchone()
        return row is not None

    def _require_cluster(self) -> None:
        if not self.cluster_exists():
            raise BackendError(
                f"sim cluster {self.cluster.name!r} does not exist yet: onboard its region "
                "first (the region_onboarding DAG)"
            )

    @property
    def clock(self) -> SimClock:
        """The sim's clock (in the state file): what its delays, leases and repairs run on,
        and what a drain of its pools measures soak and timeout on."""
        return self.state.clock
