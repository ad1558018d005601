"""New nodes keep the ``unvalidated`` taint until their pool's whole verdict passes (issue 16,
finding 8): a node whose own NCCL pair passed stays tainted while the pool fails, whichever of
the pool's checks (fabric, storage) finishes last."""

from __future__ import annotations

import pytest

from gpufleet.backends import cluster_backend
from gpufleet.backends.base import Taint
from gpufleet.backends.sim.state import SimState
from gpufleet.config.catalog import load_catalog
from gpufleet.domain.workloads import UNVALIDATED_KEY
from gpufleet.services.validation.fabric import FabricValidation
from gpufleet.services.validation.storage import StorageValidation
from gpufleet.store import Ledger
from tests.support.fleet import _wait

CLUSTER, POOL = "a3u-sim", "h200-a"  # 6 nodes of 8xH200 with a Lustre filesystem


def _new_pool():
    """The pool's nodes as a new pool's come up: every one tainted unvalidated."""
    ref = load_catalog().pool(CLUSTER, POOL)
    kube = cluster_backend(ref.cluster)
    names = [n.name for n in kube.list_nodes(POOL)]
    for name in names:
        kube.add_taint(name, Taint(UNVALIDATED_KEY, "true", "NoSchedule"))
    return ref, kube, names


def _fabric(ref, run_id):
    svc = FabricValidation(ref, Ledger())
    state = svc.begin(run_id)
    while state.workload:
        _wait(svc.backend, state.workload)
        state = svc.collect(state)
    return svc.finish(state)


def _storage(ref, run_id):
    svc = StorageValidation(ref, Ledger())
    state = svc.begin(run_id)
    _wait(svc.backend, state.workload)
    return svc.finish(state)


def _tainted(kube) -> list[str]:
    return sorted(n.name for n in kube.list_nodes(POOL) if n.unvalidated)


@pytest.mark.parametrize("storage_first", [False, True], ids=["fabric-first", "storage-first"])
def test_a_pool_whose_storage_fails_keeps_every_new_node_tainted(fleet_state, storage_first):
    """Fabric passes with one bad node quarantined (the other pairs passed), Lustre is slow:
    the pool fails, so no new node is released, in either finishing order."""
    ref, kube, names = _new_pool()
    SimState().inject(CLUSTER, POOL, f"bad-node:{names[3]}")
    SimState().inject(CLUSTER, POOL, "lustre-slow:0.3")
    first, second = (_storage, _fabric) if storage_first else (_fabric, _storage)
    results = {type(r).__name__: r for r in (first(ref, "onb-1"), second(ref, "onb-1"))}
    assert results["FabricSummary"].passed and results["FabricSummary"].quarantined == [names[3]]
    assert not results["StorageSummary"].passed
    assert _tainted(kube) == names


@pytest.mark.parametrize("storage_first", [False, True], ids=["fabric-first", "storage-first"])
def test_new_nodes_are_released_once_every_check_of_the_pool_passed(fleet_state, storage_first):
    """Both checks pass: the nodes that passed lose the taint; the quarantined one keeps it."""
    ref, kube, names = _new_pool()
    SimState().inject(CLUSTER, POOL, f"bad-node:{names[3]}")
    first, second = (_storage, _fabric) if storage_first else (_fabric, _storage)
    first(ref, "onb-2")
    assert _tainted(kube) == names  # one check is not the pool's verdict
    second(ref, "onb-2")
    assert _tainted(kube) == [names[3]]


def test_a_failing_fabric_with_passing_pairs_releases_nobody(fleet_state):
    """Two bad nodes in six: more than may be quarantined, the pool is degraded; the nodes of
    the pair that passed stay tainted too, even after a passing storage check."""
    ref, kube, names = _new_pool()
    SimState().inject(CLUSTER, POOL, f"bad-node:{names[0]}")
    SimState().inject(CLUSTER, POOL, f"bad-node:{names[2]}:nic")
    fabric = _fabric(ref, "onb-3")
    assert not fabric.passed and fabric.state == "degraded"
    assert _storage(ref, "onb-3").passed
    assert _tainted(kube) == names


def test_a_later_run_whose_checks_all_pass_releases_them(fleet_state):
    """The verdict that releases is one run's: a pass of storage in an earlier run and of
    fabric in this one is not the pool passing."""
    ref, kube, names = _new_pool()
    _storage(ref, "night-1")
    SimState().inject(CLUSTER, POOL, "lustre-slow:0.3")
    _fabric(ref, "night-2")
    assert not _storage(ref, "night-2").passed
    assert _tainted(kube) == names
    SimState().clear(CLUSTER, POOL)
    _fabric(ref, "night-3")
    assert _tainted(kube) == names
    _storage(ref, "night-3")
    assert _tainted(kube) == []


def test_a_new_node_signalled_bad_during_its_check_stays_pending(fleet_state):
    """A node whose bad signal (the event path's) is newer than the check's start keeps the
    taint though its pair passed; the others are released."""
    from gpufleet.domain.signals import Response, Signal, Source
    from gpufleet.services.nodes.drain import backend_clock

    ref, kube, names = _new_pool()
    svc = FabricValidation(ref, Ledger())
    state = svc.begin("onb-3")
    clock = backend_clock(kube)
    clock.advance(1)
    Ledger().record_signals(
        [
            Signal(
                CLUSTER,
                names[1],
                Source.XID,
                "79",
                Response.QUARANTINE,
                "Xid 79",
                clock.now(),
                POOL,
                version="1",
            )
        ]
    )
    while state.workload:
        _wait(svc.backend, state.workload)
        state = svc.collect(state)
    svc.finish(state)
    _storage(ref, "onb-3")
    assert _tainted(kube) == [names[1]]


def test_a_node_tainted_under_the_old_name_is_validated_and_released_the_same_way(fleet_state):
    """``gpufleet.io/unvalidated`` (the taint's name before ``validation-pending``) is read,
    tolerated by the validation pods and removed like the new one."""
    from gpufleet.domain.workloads import LEGACY_UNVALIDATED_KEY, UNVALIDATED_KEY

    ref, kube, names = _new_pool()
    kube.remove_taint(names[0], UNVALIDATED_KEY)
    kube.add_taint(names[0], Taint(LEGACY_UNVALIDATED_KEY, "true", "NoSchedule"))
    assert names[0] in _tainted(kube)
    _fabric(ref, "onb-4")
    _storage(ref, "onb-4")
    assert _tainted(kube) == []
    keys = {t.key for n in kube.list_nodes(POOL) for t in n.taints}
    assert not keys & {UNVALIDATED_KEY, LEGACY_UNVALIDATED_KEY}
