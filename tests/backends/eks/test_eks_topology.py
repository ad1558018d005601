"""The provider's view of an EKS pool's racks, boto3 over HTTP to moto through the fake (whose
stand-in answers the EC2 topology calls moto lacks): the capacity reservation's topology, hosts
per network node of the pool's running instances keyed as the nodes' ``network-node-layer-N``
labels key them, degraded where EC2's system status check of the host is impaired, and the
report of a faulty rack, which EC2 and EKS do not have: ``unsupported``, nothing sent."""

from __future__ import annotations

import boto3
import pytest
from botocore.exceptions import ClientError
from eks_catalog import POOL, RESERVATION, eks_region, seed_block

from gpufleet.backends.base import CloudBackend
from gpufleet.backends.eks import EksCloudBackend
from gpufleet.backends.retry import RetryingCloudBackend, RetryPolicy
from gpufleet.backends.topology_api import DEGRADED, HEALTHY, UNSUPPORTED
from gpufleet.domain.topology import EKS_LAYERS, place_of
from gpufleet.errors import BackendError
from tests.support.aws_fake_nodegroup import NodeGroupPlayer

TOP, BLOCK = "nn-1f2e3d4c5b6a7980a", "nn-2a3b4c5d6e7f80912"
RACK_A, RACK_B, ELSEWHERE = "nn-3aaaaaaaaaaaaaaaa", "nn-3bbbbbbbbbbbbbbbb", "nn-3ccccccccccccccc"


@pytest.fixture
def backend(aws) -> EksCloudBackend:
    region, cluster = eks_region()
    seed_block(aws)
    aws.topology.reserve(RESERVATION, [TOP, BLOCK])
    return EksCloudBackend(cluster, region)


@pytest.fixture
def group(aws, backend) -> NodeGroupPlayer:
    return NodeGroupPlayer(aws, backend.cluster.name, POOL)


def test_hosts_per_network_node_keyed_as_the_nodes_labels_key_them(aws, backend, group):
    assert isinstance(backend, CloudBackend)
    a1, a2, b1, unplaced = group.launch(4)
    for instance in (a1, a2):
        aws.topology.place(instance, [TOP, BLOCK, RACK_A])
    aws.topology.place(b1, [TOP, BLOCK, RACK_B])
    aws.topology.impair(a2)  # its host fails EC2's system status check
    other = NodeGroupPlayer(aws, backend.cluster.name, "other-pool").launch(1)[0]
    aws.topology.place(other, [TOP, BLOCK, RACK_A])  # another pool's machine: not counted
    aws.clear_log()

    health = backend.subblock_health(POOL)
    assert [(h.key, h.status, h.hosts, h.healthy_hosts, h.degraded_hosts) for h in health] == [
        (f"{BLOCK}/{RACK_A}", DEGRADED, 2, 1, 1),
        (f"{BLOCK}/{RACK_B}", HEALTHY, 1, 1, 0),
    ]
    assert health[0].detail == {
        "reservation": RESERVATION,
        "instances": sorted([a1, a2]),
        "network_nodes": [TOP, BLOCK, RACK_A],
        "reservation_network_nodes": [TOP, BLOCK],
        "in_reservation": True,
    }
    labels = dict(zip(EKS_LAYERS, (TOP, BLOCK, RACK_A), strict=False))
    assert place_of(labels).key == health[0].key
    # what reached the fake: the reservation by id, the node group's running instances by the
    # tags EKS puts on them, then their topology and status checks by id (no MaxResults)
    assert aws.actions("ec2") == [
        "DescribeCapacityReservationTopology",
        "DescribeInstances",
        "DescribeInstanceTopology",
        "DescribeInstanceStatus",
    ]
    assert aws.sent("DescribeCapacityReservationTopology") == [
        {"Version": "2016-11-15", "CapacityReservationId.1": RESERVATION}
    ]
    (listed,) = aws.sent("DescribeInstances")
    assert {k: v for k, v in listed.items() if k.startswith("Filter.")} == {
        "Filter.1.Name": "tag:eks:cluster-name",
        "Filter.1.Value.1": backend.cluster.name,
        "Filter.2.Name": "tag:eks:nodegroup-name",
        "Filter.2.Value.1": POOL,
        "Filter.3.Name": "instance-state-name",
        "Filter.3.Value.1": "running",
    }
    (asked,) = aws.sent("DescribeInstanceTopology")
    assert sorted(v for k, v in asked.items() if k.startswith("InstanceId.")) == sorted(
        [a1, a2, b1, unplaced]
    )
    assert "MaxResults" not in asked


def test_four_layer_instances_and_instances_outside_the_reservation(aws, backend, group):
    deep, stray = group.launch(2)
    aws.topology.place(deep, [TOP, BLOCK, RACK_A, "nn-4dddddddddddddddd"])
    aws.topology.place(stray, ["nn-1eeeeeeeeeeeeeeee", "nn-2ffffffffffffffff", ELSEWHERE])
    health = {h.key: h for h in backend.subblock_health(POOL)}
    assert health[f"{RACK_A}/nn-4dddddddddddddddd"].detail["in_reservation"] is True
    assert health[f"nn-2ffffffffffffffff/{ELSEWHERE}"].detail["in_reservation"] is False
    labels = dict(zip(EKS_LAYERS, (TOP, BLOCK, RACK_A, "nn-4dddddddddddddddd"), strict=True))
    assert place_of(labels).key in health


def test_before_launch_the_reservation_topology_is_all_there_is(aws, backend):
    topo = backend.reservation_topology(POOL)
    assert (topo.reservation, topo.network_nodes, topo.instance_type, topo.state) == (
        RESERVATION,
        (TOP, BLOCK),
        "p5.48xlarge",
        "active",
    )
    assert backend.subblock_health(POOL) == []
    assert "DescribeInstanceTopology" not in aws.actions("ec2")


def test_the_reservation_read_before_launch_has_its_network_nodes_and_no_subblocks(aws, backend):
    aws.clear_log()
    view = backend.reservation_health(POOL)
    assert (view.reservation, view.block, view.subblocks) == (RESERVATION, None, None)
    assert view.detail["network_nodes"] == [TOP, BLOCK]
    assert (view.detail["instance_type"], view.detail["state"]) == ("p5.48xlarge", "active")
    assert "no host health of a capacity reservation" in view.why
    assert aws.actions("ec2") == ["DescribeCapacityReservationTopology"]


def test_an_unknown_reservation_is_a_clear_error(aws, backend):
    aws.reservations.clear()
    with pytest.raises(BackendError, match="capacity reservation 'cr-0123456789abcdef0' does not"):
        backend.subblock_health(POOL)
    with pytest.raises(BackendError, match="capacity reservation 'cr-0123456789abcdef0' does not"):
        backend.reservation_health(POOL)


def test_more_than_100_instances_are_asked_for_100_at_a_time(aws, backend, group):
    ids = group.launch(101)
    for instance in ids:
        aws.topology.place(instance, [TOP, BLOCK, RACK_A])
    (only,) = backend.subblock_health(POOL)
    assert only.hosts == 101
    sizes = [
        sum(1 for k in params if k.startswith("InstanceId."))
        for params in aws.sent("DescribeInstanceTopology")
    ]
    assert sizes == [100, 1]


def test_there_is_no_report_call_on_eks_and_nothing_is_sent(aws, backend):
    aws.clear_log()
    for dry_run in (False, True):
        done = backend.report_faulty_subblock(POOL, f"{BLOCK}/{RACK_A}", "uplink", dry_run)
        assert (done.kind, done.name, done.action, done.status) == (
            "subblock_report",
            f"{BLOCK}/{RACK_A}",
            UNSUPPORTED,
            "ABSENT",
        )
        assert "no API to report a faulty network node" in done.detail["why"]
    assert aws.requests == []
    with pytest.raises(BackendError, match="expected <block>/<sub-block>"):
        backend.report_faulty_subblock(POOL, RACK_A, "uplink")


def test_throttling_is_retried(aws, backend, group):
    (one,) = group.launch(1)
    aws.topology.place(one, [TOP, BLOCK, RACK_B])
    aws.throttle("ec2", "DescribeInstanceTopology")
    waits: list[float] = []
    retrying = RetryingCloudBackend(backend, RetryPolicy(attempts=3, sleep=waits.append))
    assert [h.key for h in retrying.subblock_health(POOL)] == [f"{BLOCK}/{RACK_B}"]
    assert len(waits) == 1


def test_the_stand_in_keeps_the_apis_rules(aws, backend):
    ec2 = boto3.client("ec2", region_name=aws.region)
    with pytest.raises(ClientError, match="InvalidParameterCombination"):
        ec2.describe_capacity_reservation_topology(
            CapacityReservationIds=[RESERVATION], MaxResults=5
        )
    with pytest.raises(ClientError, match="InvalidParameterValue"):
        ec2.describe_instance_topology(MaxResults=101)
    with pytest.raises(ClientError, match="InvalidInstanceID.NotFound"):
        ec2.describe_instance_topology(InstanceIds=["i-0000000000000dead"])
