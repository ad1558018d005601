"""The reservation transition on EKS: the service driven step by step through boto3 against moto
in server mode (behind the AWS fake's front, which serves the Capacity Blocks moto lacks), with
kmock as the cluster.

The catalog is the EKS example region with a second Capacity Block and a ``state: planned``
pool on it. The network, the cluster and the old node group are brought up through the cloud
backend first; ``CloudNodeController`` plays EKS's node controller (a node group's nodes
register in kmock, Ready, when it is created). kmock cannot run validation pods, so the tests
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
from tests.support.aws_fake import AwsFake
from tests.support.cloud_cluster import attach_eks
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
EXAMPLE = ROOT / "include/fleet-examples/eks-p5.yaml"
CLUSTER, OLD, NEW = "train-use1", "p5-cb-1", "p5-cb-2"
ZONE, MACHINE = "us-east-1a", "p5.48xlarge"
OLD_RES, NEW_RES = "cr-0123456789abcdef0", "cr-0fedcba9876543210"
UNVALIDATED = {"key": "gpufleet.io/unvalidated", "value": "true", "effect": "NO_SCHEDULE"}
LT_TARGET = "LaunchTemplateData.CapacityReservationSpecification.CapacityReservationTarget."
FAST = DrainSettings(batch_size=4, soak_s=0, poll_s=0.05)


@pytest.fixture(scope="module")
def kube():
    with KubeEmulator(conn_id="kmock_transition_eks") as emulator:
        yield emulator


@pytest.fixture(scope="module")
def aws_server():
    with AwsFake() as fake:
        yield fake


def eks_env(tmp_path, monkeypatch, kube, aws: AwsFake, new_available: int):
    kube.reset()
    aws.reset()
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    for key, value in aws.environ().items():
        monkeypatch.setenv(key, value)
    write_transition_catalog(
        EXAMPLE,
        tmp_path / "catalog",
        new_pool=NEW,
        reservation={"name": NEW_RES, "machine_type": MACHINE, "count": 8, "zone": ZONE},
        pool_ref={"name": NEW_RES},
    )
    monkeypatch.setenv("GPUFLEET_CATALOG_DIR", str(tmp_path / "catalog"))
    aws.add_capacity_reservation(OLD_RES, MACHINE, 8, ZONE)
    aws.add_capacity_reservation(NEW_RES, MACHINE, 8, ZONE, available=new_available)
    aws.set_cluster_endpoint(CLUSTER, kube.url)
    aws.nodegroup_describes_until_active = 1  # as real EKS: CREATING first
    nodes = attach_eks(aws, kube)
    bring_up_old_pool(CLUSTER, OLD)
    assert len(nodes.nodes[OLD]) == 8 and aws.callback_errors == [] == nodes.errors
    aws.clear_log()
    nodes.mark()
    return aws, nodes


@pytest.fixture
def eks(fleet_state, tmp_path, monkeypatch, kube, aws_server):
    """The old node group in service; the new Capacity Block has room for the pool."""
    return eks_env(tmp_path, monkeypatch, kube, aws_server, new_available=8)


@pytest.fixture
def eks_short(fleet_state, tmp_path, monkeypatch, kube, aws_server):
    """As ``eks``, but the new Capacity Block has 3 of 8 instances available."""
    return eks_env(tmp_path, monkeypatch, kube, aws_server, new_available=3)


def service(run_id: str, action: str = "run") -> ReservationTransition:
    svc = ReservationTransition(load_catalog(), CLUSTER, OLD, NEW, Ledger(), run_id, FAST)
    svc.open(action, lambda dag, run: False)
    return svc


def deleted_groups(aws: AwsFake) -> list[str]:
    return [p["nodegroupName"] for p in aws.sent("DeleteNodegroup")]


def launch_template_id(name: str) -> str:
    import boto3

    ec2 = boto3.client("ec2")
    (found,) = ec2.describe_launch_templates(LaunchTemplateNames=[name])["LaunchTemplates"]
    return found["LaunchTemplateId"]


def forward_to(svc: ReservationTransition, last: Step) -> None:
    for step in FORWARD[1 : FORWARD.index(last) + 1]:
        if step is Step.NEW_POOL_VALIDATED:
            play_validation(svc)  # the test plays the validation: kmock cannot run its pods
        drive(svc, step)


def test_eks_transition_moves_the_work_and_retires_the_old_group(eks, kube):
    aws, nodes = eks
    svc = service("run-1")

    drive(svc, Step.PREFLIGHTED)
    assert aws.writes() == []  # preflight only reads

    drive(svc, Step.NEW_POOL_CREATED)
    # a node group of its own on its own launch template, which targets the NEW block
    (group,) = aws.sent("CreateNodegroup")
    assert group["nodegroupName"] == NEW and group["capacityType"] == "CAPACITY_BLOCK"
    assert group["taints"] == [UNVALIDATED]
    assert group["labels"] == {"gpufleet.io/pool": NEW}
    (template,) = aws.sent("CreateLaunchTemplate")
    assert template[LT_TARGET + "CapacityReservationId"] == NEW_RES
    assert group["launchTemplate"]["id"] == launch_template_id(template["LaunchTemplateName"])
    assert stop_policies(kube, NEW) == {NEW: "Hold"}  # nothing lands on it before validation

    drive(svc, Step.NEW_POOL_READY)  # CREATING first, then ACTIVE with its nodes Ready
    assert len(nodes.nodes[NEW]) == 8 and nodes.errors == []
    play_validation(svc)
    drive(svc, Step.NEW_POOL_VALIDATED)

    drive(svc, Step.SCHEDULING_SWITCHED)
    assert stop_policies(kube, OLD, NEW) == {OLD: "Hold", NEW: "None"}
    assert not any(cordoned(kube, nodes.nodes[OLD]))  # running jobs keep running

    drive(svc, Step.OLD_POOL_CORDONED)
    assert all(cordoned(kube, nodes.nodes[OLD]))
    assert not any(cordoned(kube, nodes.nodes[NEW]))
    drive(svc, Step.OLD_POOL_DRAINED)  # no pods on the old nodes: drained in two batches

    assert deleted_groups(aws) == []
    drive(svc, Step.OLD_POOL_RETIRED)
    assert deleted_groups(aws) == [OLD]
    drive(svc, Step.DONE)

    ledger = Ledger()
    assert ledger.transition(svc.tid)["state"] == "done"
    steps = ledger.transition_steps(svc.tid)
    assert [r["step"] for r in steps] == [s.value for s in FORWARD[1:]]
    assert all(r["state"] == "done" and r["finished_at"] for r in steps)
    assert len(aws.sent("CreateNodegroup")) == 1  # one new node group, ever


def test_eks_rollback_after_the_switch_restores_the_old_group(eks, kube):
    aws, nodes = eks
    forward_to(service("run-1"), Step.OLD_POOL_CORDONED)
    assert all(cordoned(kube, nodes.nodes[OLD]))

    back = service("run-2", action="rollback")
    outcome = roll_back(back)
    assert Ledger().transition(back.tid)["state"] == "rolled_back"
    assert stop_policies(kube, OLD, NEW) == {OLD: "None", NEW: "Hold"}
    assert not any(cordoned(kube, nodes.nodes[OLD]))
    assert deleted_groups(aws) == [NEW]  # the new node group, never the old one
    assert "serves as before" in outcome.notes[-1]


def test_eks_preflight_refuses_a_short_block_before_any_write(eks_short, kube):
    aws, nodes = eks_short
    svc = service("run-1")
    with pytest.raises(TransitionRefused, match=r"capacity short: .*need 8 machines.*3 free"):
        svc.advance(Step.PREFLIGHTED)
    assert aws.writes() == [] and aws.requests  # it read the block, wrote nothing
    assert "DescribeCapacityReservations" in aws.actions()
    assert nodes.writes() == []
    assert Ledger().transition(svc.tid)["state"] == "failed"
    assert NEW not in nodes.nodes


def test_eks_old_group_is_retired_only_once_eks_reports_it_gone(eks, kube):
    aws, nodes = eks
    forward_to(service("run-1"), Step.OLD_POOL_DRAINED)

    first = service("run-1").advance(Step.OLD_POOL_RETIRED)
    assert not first.done and first.next_check_s > 0  # accepted: deferred until it is gone
    assert deleted_groups(aws) == [OLD]
    assert (Ledger().pool_state(CLUSTER, OLD) or {}).get("state") != "retired"

    drive(service("run-2"), Step.OLD_POOL_RETIRED)  # run-1 killed while waiting: run-2 waits
    assert deleted_groups(aws) == [OLD]  # one delete, ever
    assert aws.actions("eks")[-1] == "DescribeNodegroup"  # gone, as EKS reports it
    assert Ledger().pool_state(CLUSTER, OLD)["state"] == "retired"
