"""Reading a pair whose pod failed or never started before it printed anything (its node went
away, its partner was never placed: the cluster keeps no log for it): the pair fails, naming the
pod, and the validation goes on to localize; it does not stop with an error."""

from __future__ import annotations

from gpufleet.backends import cluster_backend
from gpufleet.backends.sim.state import SimState
from gpufleet.config.catalog import load_catalog
from gpufleet.domain.plumbing import NCCL_LOG_CONTAINER
from gpufleet.services.common.collect import read_pair
from gpufleet.services.validation.fabric import FabricValidation
from gpufleet.store import Ledger
from tests.support.fleet import _wait

CLUSTER, POOL = "a3u-sim", "h200-a"


def test_a_pod_that_failed_with_no_log_fails_its_pair_and_the_night_goes_on(fleet_state):
    ref = load_catalog().pool(CLUSTER, POOL)
    svc = FabricValidation(ref, Ledger(), cluster_backend(ref.cluster))
    state = svc.begin("night-1")
    wl = state.workload
    _wait(svc.backend, wl)
    lost = f"{wl.name}-pair-1-0-0"
    with SimState().tx() as conn:  # what a node lost before the pod started leaves
        conn.execute(
            "UPDATE pods SET logs='{}', outcome='Failed', message='node lost' "
            "WHERE cluster=? AND name LIKE ?",
            (CLUSTER, f"{lost}%"),
        )
    read = read_pair(svc.backend, wl, 1, NCCL_LOG_CONTAINER)
    assert read.run is None and read.failure and "failed: node lost" in read.failure
    state = svc.collect(state)  # judged, not an error: its nodes go on to localization
    assert not state.pass1[1]["passed"]
    assert all(r["passed"] for i, r in enumerate(state.pass1) if i != 1)


def test_a_pod_bound_but_never_started_has_no_log_and_fails_its_pair(fleet_state):
    """Its partner was never placed (its node replaced): the pod waits, bound, with no log."""
    ref = load_catalog().pool(CLUSTER, POOL)
    svc = FabricValidation(ref, Ledger(), cluster_backend(ref.cluster))
    state = svc.begin("night-1")
    wl = state.workload
    _wait(svc.backend, wl)
    with SimState().tx() as conn:
        conn.execute(
            "UPDATE pods SET logs='{}', outcome='Pending' WHERE cluster=? AND name LIKE ?",
            (CLUSTER, f"{wl.name}-pair-0-0-0%"),
        )
    read = read_pair(svc.backend, wl, 0, NCCL_LOG_CONTAINER)
    assert read.run is None and read.failure and "did not finish" in read.failure
