"""The reservation transition on each cloud backend (GKE: the strict GCP fake; EKS: moto behind
the AWS fake), written once: the service driven step by step through the real client
libraries, kmock as the cluster (``tests/scenarios/conftest.py``).

The catalog is the backend's example region with a second reservation and a ``state: planned``
pool on it; the network, the cluster and the old pool are brought up through the cloud backend
first, and the backend's node controller registers a pool's nodes (Ready) once it is created.
kmock cannot run validation pods, so the tests play the validation (a passing verdict recorded
in the ledger for the run). The DAG's tasks are thin wrappers around these calls (``dag.test()``
on the sim covers the wiring). Assertions read what the fake RECEIVED and what kmock STORED;
what a create carried on each provider is checked by its adapter (``gke.py``, ``eks.py``).
"""

from __future__ import annotations

import pytest

from gpufleet.config.catalog import load_catalog
from gpufleet.domain.transition import FORWARD, Step
from gpufleet.services.infrastructure.transition import ReservationTransition, TransitionRefused
from gpufleet.store import Ledger
from tests.scenarios.clouds import CloudUnderTest
from tests.support.transition_clouds import (
    cordoned,
    drive,
    play_validation,
    roll_back,
    stop_policies,
)

pytestmark = [pytest.mark.slow]


def service(cloud: CloudUnderTest, run_id: str, action: str = "run") -> ReservationTransition:
    svc = ReservationTransition(
        load_catalog(), cloud.cluster, cloud.old, cloud.new, Ledger(), run_id, cloud.drain
    )
    svc.open(action, lambda dag, run: False)
    return svc


def forward_to(svc: ReservationTransition, last: Step) -> None:
    for step in FORWARD[1 : FORWARD.index(last) + 1]:
        if step is Step.NEW_POOL_VALIDATED:
            play_validation(svc)  # the test plays the validation: kmock cannot run its pods
        drive(svc, step)


def retired(cloud: CloudUnderTest, pool: str) -> bool:
    return (Ledger().pool_state(cloud.cluster, pool) or {}).get("state") == "retired"


def test_transition_moves_the_work_and_retires_the_old_pool(transition_cloud):
    cloud = transition_cloud()
    kube, nodes, old, new = cloud.kube, cloud.nodes, cloud.old, cloud.new
    svc = service(cloud, "run-1")

    drive(svc, Step.PREFLIGHTED)
    assert cloud.writes() == []  # preflight only reads

    drive(svc, Step.NEW_POOL_CREATED)
    cloud.assert_new_pool_sent()
    assert stop_policies(kube, new) == {new: "Hold"}  # nothing lands on it before validation

    drive(svc, Step.NEW_POOL_READY)  # the create completes; the nodes register, Ready
    assert len(nodes.nodes[new]) == cloud.pool_size and nodes.errors == []
    play_validation(svc)
    drive(svc, Step.NEW_POOL_VALIDATED)

    drive(svc, Step.SCHEDULING_SWITCHED)
    assert stop_policies(kube, old, new) == {old: "Hold", new: "None"}
    assert not any(cordoned(kube, nodes.nodes[old]))  # running jobs keep running

    drive(svc, Step.OLD_POOL_CORDONED)
    assert all(cordoned(kube, nodes.nodes[old]))
    assert not any(cordoned(kube, nodes.nodes[new]))
    drive(svc, Step.OLD_POOL_DRAINED)  # no pods on the old nodes: drained batch by batch

    assert cloud.deleted_pools() == []
    drive(svc, Step.OLD_POOL_RETIRED)
    assert cloud.deleted_pools() == [old]
    drive(svc, Step.DONE)

    ledger = Ledger()
    assert ledger.transition(svc.tid)["state"] == "done"
    steps = ledger.transition_steps(svc.tid)
    assert [r["step"] for r in steps] == [s.value for s in FORWARD[1:]]
    assert all(r["state"] == "done" and r["finished_at"] for r in steps)
    assert cloud.pool_creates() == 1  # one new pool, ever


def test_rollback_after_the_switch_restores_the_old_pool(transition_cloud):
    cloud = transition_cloud()
    kube, nodes, old, new = cloud.kube, cloud.nodes, cloud.old, cloud.new
    forward_to(service(cloud, "run-1"), Step.OLD_POOL_CORDONED)
    assert all(cordoned(kube, nodes.nodes[old]))
    assert stop_policies(kube, old, new) == {old: "Hold", new: "None"}

    back = service(cloud, "run-2", action="rollback")
    outcome = roll_back(back)
    assert Ledger().transition(back.tid)["state"] == "rolled_back"
    assert stop_policies(kube, old, new) == {old: "None", new: "Hold"}
    assert not any(cordoned(kube, nodes.nodes[old]))
    assert cloud.deleted_pools() == [new]  # the new pool, never the old one
    assert "serves as before" in outcome.notes[-1]


def test_preflight_refuses_a_short_reservation_before_any_write(transition_cloud):
    cloud = transition_cloud(short=True)
    svc = service(cloud, "run-1")
    with pytest.raises(TransitionRefused, match=cloud.short_refusal):
        svc.advance(Step.PREFLIGHTED)
    assert cloud.writes() == [] and cloud.requests()  # it read the reservation, wrote nothing
    cloud.assert_reservation_read()
    assert cloud.nodes.writes() == []
    assert Ledger().transition(svc.tid)["state"] == "failed"
    assert cloud.new not in cloud.nodes.nodes


def test_old_pool_is_retired_only_once_the_cloud_reports_it_gone(transition_cloud):
    cloud = transition_cloud()
    old = cloud.old
    forward_to(service(cloud, "run-1"), Step.OLD_POOL_DRAINED)
    cloud.slow_pool_delete(old)

    first = service(cloud, "run-1").advance(Step.OLD_POOL_RETIRED)
    assert not first.done and first.next_check_s > 0  # accepted: deferred until it is gone
    assert cloud.deleted_pools() == [old]
    assert not retired(cloud, old)  # accepted is not gone

    resumed = service(cloud, "run-2")  # run-1 was killed while waiting: the rerun waits on it
    polls = 0
    while not (outcome := resumed.advance(Step.OLD_POOL_RETIRED)).done:
        polls += 1
        assert polls < 10, outcome.notes
        assert not retired(cloud, old)
    assert outcome.failed is None, outcome.failed
    assert polls >= cloud.delete_polls
    assert cloud.deleted_pools() == [old]  # one delete, ever
    assert retired(cloud, old)
    cloud.assert_delete_confirmed(old)
    drive(resumed, Step.DONE)
