"""The reservation transition on GKE: the service driven step by step through the real Google
client libraries (REST over HTTP) against the strict GCP fake, with kmock as the cluster.

The catalog is the GKE example region with a second reservation and a ``state: planned`` pool
on it. The network, the cluster and the old pool are brought up through the cloud backend
first; ``CloudNodeController`` plays GKE's node controller (a pool's nodes register in kmock,
Ready, when its create operation completes). kmock cannot run validation pods, so the tests
play the validation (a passing verdict recorded in the ledger for the run). Assertions read what
the fake RECEIVED and what kmock STORED.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.config.catalog import load_catalog
from gpufleet.domain.transition import FORWARD, Step
from gpufleet.services.drain import DrainSettings
from gpufleet.services.transition import ReservationTransition, TransitionRefused
from gpufleet.store import Ledger
from tests.support.cloud_cluster import attach_gke, finish_compute_operations_at_once
from tests.support.gcp_fake import GcpFake
from tests.support.kube_emulator import KubeEmulator
from tests.support.transition_clouds import (
    bring_up_old_pool,
    cordoned,
    drive,
    play_validation,
    roll_back,
    stop_policies,
    write_transition_catalog,
)

pytestmark = [pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "include/fleet-examples/gke-a3-ultra.yaml"
CLUSTER, OLD, NEW = "train-usc1", "a3u-pool-1", "a3u-pool-2"
PROJECT, ZONE, MACHINE = "my-gcp-project", "us-central1-b", "a3-ultragpu-8g"
OLD_RES, OLD_BLOCK = "a3u-reservation-1", "a3u-reservation-1-block-0001"
NEW_RES, NEW_BLOCK = "a3u-reservation-2", "a3u-reservation-2-block-0001"
UNVALIDATED = {"key": "gpufleet.io/unvalidated", "value": "true", "effect": "NO_SCHEDULE"}
FAST = DrainSettings(batch_size=8, soak_s=0, poll_s=0.05)


@pytest.fixture(scope="module")
def kube():
    with KubeEmulator(conn_id="kmock_transition_gke") as emulator:
        yield emulator


def gke_env(tmp_path, monkeypatch, kube, new_in_use: int):
    kube.reset()
    write_transition_catalog(
        EXAMPLE,
        tmp_path / "catalog",
        new_pool=NEW,
        reservation={
            "name": NEW_RES,
            "machine_type": MACHINE,
            "count": 16,
            "zone": ZONE,
            "blocks": [NEW_BLOCK],
        },
        pool_ref={"name": NEW_RES, "block": NEW_BLOCK},
    )
    monkeypatch.setenv("GPUFLEET_CATALOG_DIR", str(tmp_path / "catalog"))
    fake = GcpFake(operation_polls=2).start()
    monkeypatch.setenv("GPUFLEET_GCP_ENDPOINT", fake.url)
    fake.add_reservation(PROJECT, ZONE, OLD_RES, MACHINE, 16, blocks=[OLD_BLOCK])
    fake.add_reservation(PROJECT, ZONE, NEW_RES, MACHINE, 16, in_use=new_in_use, blocks=[NEW_BLOCK])
    fake.set_cluster_endpoint(kube.url, ca_data="")
    finish_compute_operations_at_once(fake)
    nodes = attach_gke(fake, kube)
    bring_up_old_pool(CLUSTER, OLD)
    assert len(nodes.nodes[OLD]) == 16
    fake.clear_log()
    nodes.mark()
    return fake, nodes


@pytest.fixture
def gke(fleet_state, tmp_path, monkeypatch, kube):
    """The old pool in service on a fresh fake; the new reservation has room for the pool."""
    fake, nodes = gke_env(tmp_path, monkeypatch, kube, new_in_use=0)
    yield fake, nodes
    fake.stop()


@pytest.fixture
def gke_short(fleet_state, tmp_path, monkeypatch, kube):
    """As ``gke``, but the new reservation has 6 of 16 machines free (the pool needs 16)."""
    fake, nodes = gke_env(tmp_path, monkeypatch, kube, new_in_use=10)
    yield fake, nodes
    fake.stop()


def service(run_id: str, action: str = "run") -> ReservationTransition:
    svc = ReservationTransition(load_catalog(), CLUSTER, OLD, NEW, Ledger(), run_id, FAST)
    svc.open(action, lambda dag, run: False)
    return svc


def deletes(fake: GcpFake) -> list[str]:
    return [r.path for r in fake.writes() if r.method == "DELETE"]


def forward_to(svc: ReservationTransition, last: Step) -> None:
    for step in FORWARD[1 : FORWARD.index(last) + 1]:
        if step is Step.NEW_POOL_VALIDATED:
            play_validation(svc)  # the test plays the validation: kmock cannot run its pods
        drive(svc, step)


def test_gke_transition_moves_the_work_and_retires_the_old_pool(gke, kube):
    fake, nodes = gke
    svc = service("run-1")

    drive(svc, Step.PREFLIGHTED)
    assert fake.writes() == []  # preflight only reads

    drive(svc, Step.NEW_POOL_CREATED)
    (body,) = fake.bodies("POST", r"/clusters/train-usc1/nodePools$")
    pool = body["nodePool"]
    assert pool["name"] == NEW and pool["initialNodeCount"] == 16
    assert pool["config"]["reservationAffinity"] == {
        "consumeReservationType": "SPECIFIC_RESERVATION",
        "key": "compute.googleapis.com/reservation-name",
        "values": [f"{NEW_RES}/reservationBlocks/{NEW_BLOCK}"],
    }
    assert pool["config"]["taints"] == [UNVALIDATED]
    assert stop_policies(kube, NEW) == {NEW: "Hold"}  # nothing lands on it before validation

    drive(svc, Step.NEW_POOL_READY)  # the create operation completes; the nodes register
    assert len(nodes.nodes[NEW]) == 16 and nodes.errors == []
    play_validation(svc)
    drive(svc, Step.NEW_POOL_VALIDATED)

    drive(svc, Step.SCHEDULING_SWITCHED)
    assert stop_policies(kube, OLD, NEW) == {OLD: "Hold", NEW: "None"}
    assert not any(cordoned(kube, nodes.nodes[OLD]))  # running jobs keep running

    drive(svc, Step.OLD_POOL_CORDONED)
    assert all(cordoned(kube, nodes.nodes[OLD]))
    assert not any(cordoned(kube, nodes.nodes[NEW]))
    drive(svc, Step.OLD_POOL_DRAINED)  # no pods on the old nodes: drained at once

    assert deletes(fake) == []
    drive(svc, Step.OLD_POOL_RETIRED)
    assert deletes(fake) == [
        f"/v1/projects/{PROJECT}/locations/{ZONE}/clusters/{CLUSTER}/nodePools/{OLD}"
    ]
    drive(svc, Step.DONE)

    ledger = Ledger()
    assert ledger.transition(svc.tid)["state"] == "done"
    steps = ledger.transition_steps(svc.tid)
    assert [r["step"] for r in steps] == [s.value for s in FORWARD[1:]]
    assert all(r["state"] == "done" and r["finished_at"] for r in steps)
    assert len(fake.bodies("POST", r"/nodePools$")) == 1  # one new pool, ever


def test_gke_rollback_after_the_switch_restores_the_old_pool(gke, kube):
    fake, nodes = gke
    forward_to(service("run-1"), Step.OLD_POOL_CORDONED)
    assert all(cordoned(kube, nodes.nodes[OLD]))
    assert stop_policies(kube, OLD, NEW) == {OLD: "Hold", NEW: "None"}

    back = service("run-2", action="rollback")
    outcome = roll_back(back)
    assert Ledger().transition(back.tid)["state"] == "rolled_back"
    assert stop_policies(kube, OLD, NEW) == {OLD: "None", NEW: "Hold"}
    assert not any(cordoned(kube, nodes.nodes[OLD]))
    assert deletes(fake) == [
        f"/v1/projects/{PROJECT}/locations/{ZONE}/clusters/{CLUSTER}/nodePools/{NEW}"
    ]  # the new pool, never the old one
    assert "serves as before" in outcome.notes[-1]


def test_gke_preflight_refuses_a_short_reservation_before_any_write(gke_short, kube):
    fake, nodes = gke_short
    svc = service("run-1")
    with pytest.raises(TransitionRefused, match=r"capacity short: .*need 16 machines.*6 free"):
        svc.advance(Step.PREFLIGHTED)
    assert fake.writes() == [] and fake.requests  # it read the reservation, wrote nothing
    assert nodes.writes() == []
    assert Ledger().transition(svc.tid)["state"] == "failed"
    assert NEW not in nodes.nodes


def pool_path(pool: str) -> str:
    return f"/v1/projects/{PROJECT}/locations/{ZONE}/clusters/{CLUSTER}/nodePools/{pool}"


def retired(pool: str) -> bool:
    return (Ledger().pool_state(CLUSTER, pool) or {}).get("state") == "retired"


def test_gke_old_pool_is_retired_only_when_its_delete_is_done_and_a_rerun_waits_on_it(gke, kube):
    fake, nodes = gke
    forward_to(service("run-1"), Step.OLD_POOL_DRAINED)
    fake.slow_node_pool_delete(OLD, polls=4)  # GKE takes a while to delete a pool

    first = service("run-1").advance(Step.OLD_POOL_RETIRED)
    assert not first.done and first.next_check_s > 0  # deferred, as the other waits
    assert deletes(fake) == [pool_path(OLD)]
    assert not retired(OLD)  # accepted is not gone

    resumed = service("run-2")  # run-1 was killed while waiting: the rerun waits on it
    polls = 0
    while not (outcome := resumed.advance(Step.OLD_POOL_RETIRED)).done:
        polls += 1
        assert polls < 10, outcome.notes
        assert not retired(OLD)
    assert polls >= 1
    assert deletes(fake) == [pool_path(OLD)]  # one delete, ever
    assert retired(OLD)
    assert (PROJECT, ZONE, CLUSTER, OLD) not in fake.state.pools
    drive(resumed, Step.DONE)


def test_gke_a_failed_delete_is_reported_not_retired_and_a_rerun_deletes_again(gke, kube):
    from gpufleet.errors import BackendError

    fake, nodes = gke
    forward_to(service("run-1"), Step.OLD_POOL_DRAINED)
    fake.slow_node_pool_delete(OLD, polls=2, error="Internal error: instance group not deleted")
    svc = service("run-1")

    with pytest.raises(BackendError, match="instance group not deleted") as err:
        for _ in range(10):
            svc.advance(Step.OLD_POOL_RETIRED)
    assert "not retired" in str(err.value) and "run again" in str(err.value)
    assert not retired(OLD)
    assert (PROJECT, ZONE, CLUSTER, OLD) in fake.state.pools  # the pool is still there
    assert Step.OLD_POOL_RETIRED not in svc.steps()[0]

    drive(service("run-2"), Step.OLD_POOL_RETIRED)  # the rerun deletes it again, and waits
    assert deletes(fake) == [pool_path(OLD)] * 2
    assert retired(OLD) and (PROJECT, ZONE, CLUSTER, OLD) not in fake.state.pools
