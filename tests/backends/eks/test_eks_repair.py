"""The EKS repair terminates a node's EC2 instance (boto3 over HTTP to moto through the fake)
so its managed node group replaces it; the harness plays the node group, since moto replaces
nothing. An instance already going or gone is found (no second call), ``dry_run`` sends
nothing, provider ids of another cloud or region and instances of no node group of this
cluster are refused, and EC2's 503 is transient."""

from __future__ import annotations

import pytest
from eks_catalog import POOL, eks_region

from gpufleet.backends.base import EnsureAction, NodeInfo
from gpufleet.backends.eks import EksCloudBackend
from gpufleet.backends.retry import RetryingCloudBackend, RetryPolicy
from gpufleet.errors import BackendError, TransientBackendError
from tests.support.aws_fake_nodegroup import NodeGroupPlayer

NODE = "ip-10-0-1-23.ec2.internal"


def node(provider_id: str | None) -> NodeInfo:
    return NodeInfo(NODE, POOL, {}, (), True, True, provider_id=provider_id)


@pytest.fixture
def backend(aws) -> EksCloudBackend:
    region, cluster = eks_region()
    return EksCloudBackend(cluster, region)


@pytest.fixture
def group(aws, backend) -> NodeGroupPlayer:
    return NodeGroupPlayer(aws, backend.cluster.name, POOL)


def test_repair_terminates_the_instance_and_the_node_group_replaces_it(aws, backend, group):
    (victim,) = group.launch(1)
    done = backend.repair_node(node(group.provider_id(victim)))
    assert (done.kind, done.name, done.action) == ("repair", NODE, EnsureAction.CREATED)
    assert done.detail == {
        "instance": victim,
        "zone": "us-east-1a",
        "state": "shutting-down",
        "node_group": POOL,
    }
    assert [(w.action, w.params) for w in aws.writes()] == [
        ("TerminateInstances", {"Version": "2016-11-15", "InstanceId.1": victim})
    ]
    assert group.state(victim) == "terminated"
    # the harness's node group launched a replacement in the same zone, with the group's tags
    replacement = group.replacements[victim]
    assert group.state(replacement) in ("pending", "running")
    assert aws.callback_errors == []


def test_an_instance_already_terminating_is_found_and_nothing_is_sent(aws, backend, group):
    (victim,) = group.launch(1)
    assert backend.repair_node(node(group.provider_id(victim))).action == EnsureAction.CREATED
    aws.clear_log()
    again = backend.repair_node(node(group.provider_id(victim)))
    assert again.action == EnsureAction.FOUND and again.detail["state"] in (
        "shutting-down",
        "terminated",
    )
    assert aws.writes() == []
    assert len(group.replacements) == 1


def test_dry_run_sends_nothing(aws, backend, group):
    (victim,) = group.launch(1)
    planned = backend.repair_node(node(group.provider_id(victim)), dry_run=True)
    assert planned.action == EnsureAction.WOULD_CREATE and planned.detail["node_group"] == POOL
    assert aws.writes() == []
    assert group.state(victim) in ("pending", "running")


@pytest.mark.parametrize(
    ("provider_id", "message"),
    [
        (None, "has no spec.providerID"),
        ("gce://my-gcp-project/us-central1-b/vm-1", "not an EC2 instance"),
        ("aws:///us-east-1a", "expected aws:///ZONE/i-"),
        ("aws:///us-east-1a/vol-0123", "expected aws:///ZONE/i-"),
        ("aws:///eu-west-1a/i-0123456789abcdef0", "outside the catalog cluster's region"),
    ],
)
def test_missing_or_foreign_provider_ids_are_refused_before_any_call(
    aws, backend, provider_id, message
):
    with pytest.raises(BackendError, match=message):
        backend.repair_node(node(provider_id))
    assert aws.requests == []


def test_an_instance_of_no_node_group_of_this_cluster_is_never_terminated(aws, backend):
    stranger = NodeGroupPlayer(aws, "someone-elses-cluster", "gpus")
    (other,) = stranger.launch(1)
    with pytest.raises(BackendError, match="refusing to terminate it"):
        backend.repair_node(node(stranger.provider_id(other)))
    assert aws.writes() == [] and stranger.state(other) in ("pending", "running")


def test_an_unknown_instance_is_a_clear_error(aws, backend):
    with pytest.raises(BackendError, match="i-0123456789abcdef0 does not exist"):
        backend.repair_node(node("aws:///us-east-1a/i-0123456789abcdef0"))
    assert aws.writes() == []


def test_503_is_transient_and_the_retry_rule_retries_it(aws, backend, group):
    (victim,) = group.launch(1)
    aws.fail("ec2", "TerminateInstances", status=503)
    with pytest.raises(TransientBackendError, match="503"):
        backend.repair_node(node(group.provider_id(victim)))
    assert group.replacements == {}
    waits: list[float] = []
    aws.fail("ec2", "TerminateInstances", status=503)
    retrying = RetryingCloudBackend(backend, RetryPolicy(attempts=3, sleep=waits.append))
    assert retrying.repair_node(node(group.provider_id(victim))).action == EnsureAction.CREATED
    assert len(waits) == 1 and set(group.replacements) == {victim}
