"""The EKS reboot sends ``ec2:RebootInstances`` for a node's instance (boto3 over HTTP to moto
through the fake) and tags it with the reboot's time, since EC2 shows no reboot under way: a
second call within the window is found and sends nothing; ``dry_run`` sends nothing; provider
ids of another cloud or region, instances of no node group of this cluster, and instances
being replaced or not running are refused; EC2's 503 is transient."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from eks_catalog import POOL, eks_region

from gpufleet.backends.base import EnsureAction, NodeInfo
from gpufleet.backends.eks import EksCloudBackend
from gpufleet.backends.eks import reboot as eks_reboot
from gpufleet.backends.retry import RetryingCloudBackend, RetryPolicy
from gpufleet.errors import BackendError, TransientBackendError
from tests.support.aws_fake_nodegroup import NodeGroupPlayer

NODE = "ip-10-0-1-23.ec2.internal"
T0 = datetime(2026, 5, 4, 3, 2, 1, tzinfo=UTC)


def node(provider_id: str | None) -> NodeInfo:
    return NodeInfo(NODE, POOL, {}, (), True, True, provider_id=provider_id)


@pytest.fixture
def clock(monkeypatch) -> list[datetime]:
    """The time the reboot reads: ``clock[0]``, moved by the test."""
    at = [T0]
    monkeypatch.setattr(eks_reboot, "now", lambda: at[0])
    return at


@pytest.fixture
def backend(aws, clock) -> EksCloudBackend:
    region, cluster = eks_region()
    return EksCloudBackend(cluster, region)


@pytest.fixture
def group(aws, backend) -> NodeGroupPlayer:
    return NodeGroupPlayer(aws, backend.cluster.name, POOL)


def reboot_tag(group: NodeGroupPlayer, instance_id: str) -> str | None:
    found = group.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
    tags = found[0]["Instances"][0].get("Tags") or []
    return next((t["Value"] for t in tags if t["Key"] == eks_reboot.REBOOT_TAG), None)


def test_reboot_reboots_the_instance_and_tags_it_with_the_time(aws, backend, group):
    victim, bystander = group.launch(2)
    done = backend.reboot_node(node(group.provider_id(victim)))
    assert (done.kind, done.name, done.action, done.status) == (
        "reboot",
        NODE,
        EnsureAction.CREATED,
        "UPDATING",
    )
    assert done.detail == {
        "instance": victim,
        "zone": "us-east-1a",
        "state": "running",
        "node_group": POOL,
        "rebooted_at": "2026-05-04T03:02:01Z",
    }
    assert victim in done.console_url
    assert [(w.action, w.params) for w in aws.writes()] == [
        ("RebootInstances", {"Version": "2016-11-15", "InstanceId.1": victim}),
        (
            "CreateTags",
            {
                "Version": "2016-11-15",
                "ResourceId.1": victim,
                "Tag.1.Key": "gpufleet.io/rebooted-at",
                "Tag.1.Value": "2026-05-04T03:02:01Z",
            },
        ),
    ]
    assert reboot_tag(group, victim) == "2026-05-04T03:02:01Z"
    assert reboot_tag(group, bystander) is None
    # a reboot keeps the machine: nothing terminated, nothing replaced
    assert group.state(victim) == "running" and group.replacements == {}


def test_a_reboot_within_the_window_is_found_and_nothing_is_sent(aws, backend, group, clock):
    (victim,) = group.launch(1)
    assert backend.reboot_node(node(group.provider_id(victim))).action == EnsureAction.CREATED
    aws.clear_log()
    clock[0] = T0 + timedelta(seconds=eks_reboot.REBOOT_WINDOW_S - 1)
    again = backend.reboot_node(node(group.provider_id(victim)))
    assert (again.action, again.detail["rebooted_at"]) == (
        EnsureAction.FOUND,
        "2026-05-04T03:02:01Z",
    )
    assert aws.writes() == []
    # once the window passed, a reboot is a new one
    clock[0] = T0 + timedelta(seconds=eks_reboot.REBOOT_WINDOW_S + 1)
    assert backend.reboot_node(node(group.provider_id(victim))).action == EnsureAction.CREATED
    assert [w.action for w in aws.writes()] == ["RebootInstances", "CreateTags"]


def test_dry_run_sends_nothing(aws, backend, group):
    (victim,) = group.launch(1)
    planned = backend.reboot_node(node(group.provider_id(victim)), dry_run=True)
    assert (planned.kind, planned.action) == ("reboot", EnsureAction.WOULD_CREATE)
    assert planned.detail["node_group"] == POOL
    assert aws.writes() == [] and reboot_tag(group, victim) is None


def test_a_failed_tag_leaves_the_reboot_standing(aws, backend, group):
    (victim,) = group.launch(1)
    aws.fail("ec2", "CreateTags", status=403, code="UnauthorizedOperation")
    done = backend.reboot_node(node(group.provider_id(victim)))
    assert (
        done.action == EnsureAction.CREATED and "UnauthorizedOperation" in done.detail["untagged"]
    )
    assert [w.action for w in aws.writes()] == ["RebootInstances", "CreateTags"]


@pytest.mark.parametrize(
    ("provider_id", "message"),
    [
        (None, "cannot tell which EC2 instance to reboot"),
        ("gce://my-gcp-project/us-central1-b/vm-1", "not an EC2 instance"),
        ("aws:///us-east-1a", "expected aws:///ZONE/i-"),
        ("aws:///eu-west-1a/i-0123456789abcdef0", "outside the catalog cluster's region"),
    ],
)
def test_missing_or_foreign_provider_ids_are_refused_before_any_call(
    aws, backend, provider_id, message
):
    with pytest.raises(BackendError, match=message):
        backend.reboot_node(node(provider_id))
    assert aws.requests == []


def test_an_instance_of_no_node_group_of_this_cluster_is_never_rebooted(aws, backend):
    stranger = NodeGroupPlayer(aws, "someone-elses-cluster", "gpus")
    (other,) = stranger.launch(1)
    with pytest.raises(BackendError, match="refusing to reboot it"):
        backend.reboot_node(node(stranger.provider_id(other)))
    assert aws.writes() == []


def test_an_unknown_instance_is_a_clear_error(aws, backend):
    with pytest.raises(BackendError, match="i-0123456789abcdef0 does not exist"):
        backend.reboot_node(node("aws:///us-east-1a/i-0123456789abcdef0"))
    assert aws.writes() == []


def test_an_instance_being_replaced_or_stopped_is_refused(aws, backend, group):
    replaced, stopped = group.launch(2)
    assert backend.repair_node(node(group.provider_id(replaced))).action == EnsureAction.CREATED
    group.ec2.stop_instances(InstanceIds=[stopped])
    aws.clear_log()
    with pytest.raises(BackendError, match="a repair is under way"):
        backend.reboot_node(node(group.provider_id(replaced)))
    with pytest.raises(BackendError, match="stopp(ing|ed), not running"):
        backend.reboot_node(node(group.provider_id(stopped)))
    assert aws.writes() == []


def test_503_is_transient_and_the_retry_rule_retries_it(aws, backend, group):
    (victim,) = group.launch(1)
    aws.fail("ec2", "RebootInstances", status=503)
    with pytest.raises(TransientBackendError, match="503"):
        backend.reboot_node(node(group.provider_id(victim)))
    assert reboot_tag(group, victim) is None  # a failed reboot never reads as one under way
    waits: list[float] = []
    aws.fail("ec2", "RebootInstances", status=503)
    retrying = RetryingCloudBackend(backend, RetryPolicy(attempts=3, sleep=waits.append))
    assert retrying.reboot_node(node(group.provider_id(victim))).action == EnsureAction.CREATED
    assert len(waits) == 1 and reboot_tag(group, victim) is not None
