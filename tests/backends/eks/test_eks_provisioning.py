"""The EKS backend against moto (server mode) and the AWS fake, through boto3 over HTTP:
what it sends to create a region's network, cluster, node group and FSx, and that a second
pass and a dry run send no create or update."""

from __future__ import annotations

import base64
import urllib.parse

import pytest
from eks_catalog import FS, POOL, RESERVATION, eks_region, seed_block

from gpufleet.backends.base import CloudBackend, EnsureAction, ResourceStatus, Taint
from gpufleet.backends.eks import EksCloudBackend
from gpufleet.backends.retry import RetryingCloudBackend, RetryPolicy
from gpufleet.errors import BackendError

UNVALIDATED = Taint("gpufleet.io/validation-pending", None, "NoSchedule")


def provision(backend: EksCloudBackend, dry_run: bool = False) -> list:
    out = list(backend.ensure_network(dry_run=dry_run))
    out.append(backend.ensure_cluster(dry_run=dry_run))
    out.append(backend.ensure_node_pool(POOL, dry_run=dry_run, taints=(UNVALIDATED,)))
    out.append(backend.ensure_filesystem(FS, dry_run=dry_run))
    return out


@pytest.fixture
def backend(aws):
    seed_block(aws)
    region, cluster = eks_region()
    return EksCloudBackend(cluster, region)


def test_is_a_cloud_backend(backend):
    assert isinstance(backend, CloudBackend)


def test_reservation_figures_from_ec2(aws):
    aws.add_capacity_reservation(RESERVATION, "p5.48xlarge", 8, "us-east-1a", available=3)
    aws.add_capacity_reservation("cr-0000000000000000a", "p5.48xlarge", 2, "us-east-1b", "default")
    region, cluster = eks_region()
    backend = EksCloudBackend(cluster, region)
    block = backend.get_reservation(RESERVATION)
    assert (block.machine_type, block.count, block.in_use, block.free) == ("p5.48xlarge", 8, 5, 3)
    assert (block.zone, block.kind, block.status, block.blocks) == (
        "us-east-1a",
        "capacity-block",
        "active",
        None,
    )
    assert backend.get_reservation("cr-0000000000000000a").kind == "capacity-reservation"
    assert aws.sent("DescribeCapacityReservations")[0] == {
        "Version": "2016-11-15",
        "CapacityReservationId.1": RESERVATION,
    }


def test_first_pass_creates_everything_with_the_right_settings(aws, backend):
    ensured = provision(backend)
    by_kind = {(e.kind, e.name): e for e in ensured}
    assert {e.action for e in ensured} == {EnsureAction.CREATED}
    assert all(e.console_url and e.console_url.startswith("https://") for e in ensured)

    vpc = aws.sent("CreateVpc")[0]
    assert vpc["CidrBlock"] == "10.0.0.0/16"
    assert vpc["TagSpecification.1.Tag.1.Value"] == "train-use1-vpc"
    subnets = aws.sent("CreateSubnet")
    assert [(s["CidrBlock"], s["AvailabilityZone"]) for s in subnets] == [
        ("10.0.0.0/17", "us-east-1a"),
        ("10.0.128.0/17", "us-east-1b"),
    ]
    group_id = by_kind[("firewall", "train-use1-vpc-efa")].detail["id"]
    for action in ("AuthorizeSecurityGroupIngress", "AuthorizeSecurityGroupEgress"):
        rule = aws.sent(action)[0]
        assert rule["IpPermissions.1.IpProtocol"] == "-1"
        assert rule["IpPermissions.1.Groups.1.GroupId"] == group_id

    cluster = aws.sent("CreateCluster")[0]
    assert cluster["accessConfig"]["authenticationMode"] == "API_AND_CONFIG_MAP"
    assert cluster["roleArn"] == "arn:aws:iam::123456789012:role/gpufleet-eks-cluster"
    assert len(cluster["resourcesVpcConfig"]["subnetIds"]) == 2

    template = aws.sent("CreateLaunchTemplate")[0]
    assert template["LaunchTemplateName"] == "train-use1-p5-cb-1"
    data = "LaunchTemplateData."
    assert (
        template[
            data + "CapacityReservationSpecification.CapacityReservationTarget."
            "CapacityReservationId"
        ]
        == RESERVATION
    )
    assert template[data + "InstanceMarketOptions.MarketType"] == "capacity-block"
    efa = [
        key
        for key, value in template.items()
        if key.startswith(data + "NetworkInterface.")
        and key.endswith(".InterfaceType")
        and value == "efa"
    ]
    assert len(efa) == 32
    cards = sorted(int(v) for k, v in template.items() if k.endswith(".NetworkCardIndex"))
    assert cards == list(range(32))
    assert template[data + "NetworkInterface.2.SecurityGroupId.1"] == group_id

    group = aws.sent("CreateNodegroup")[0]
    assert group["capacityType"] == "CAPACITY_BLOCK"
    assert group["scalingConfig"] == {"minSize": 8, "maxSize": 8, "desiredSize": 8}
    assert "instanceTypes" not in group  # named by the launch template, as EKS asks
    assert template[data + "InstanceType"] == "p5.48xlarge"
    assert group["amiType"] == "AL2023_x86_64_NVIDIA"
    assert group["labels"] == {"gpufleet.io/pool": POOL}
    assert group["taints"] == [{"key": "gpufleet.io/validation-pending", "effect": "NO_SCHEDULE"}]
    assert group["nodeRole"] == "arn:aws:iam::123456789012:role/gpufleet-eks-nodes"
    us_east_1a = by_kind[("subnet", "train-use1a")].detail["id"]
    assert group["subnets"] == [us_east_1a]  # only the reservation's zone
    template_ensured = by_kind[("node_pool", POOL)].detail["launch_template"]
    assert group["launchTemplate"]["id"] == template_ensured["detail"]["id"]

    fsx = aws.sent("CreateFileSystem")[0]
    assert fsx["FileSystemType"] == "LUSTRE"
    assert fsx["StorageCapacity"] == 38400
    assert fsx["LustreConfiguration"] == {
        "DeploymentType": "PERSISTENT_2",
        "PerUnitStorageThroughput": 250,
    }
    assert fsx["SubnetIds"] == [us_east_1a]
    assert fsx["SecurityGroupIds"] == [group_id]
    assert {"Key": "Name", "Value": FS} in fsx["Tags"]


def test_second_pass_only_reads(aws, backend):
    provision(backend)
    backend.cluster_credentials()
    aws.clear_log()
    again = provision(backend)
    backend.cluster_credentials()
    assert aws.writes() == []
    assert {e.action for e in again} == {EnsureAction.FOUND}
    assert all(not e.differences for e in again)
    assert all(a.startswith(("Describe", "List", "Get")) for a in aws.actions())


def test_dry_run_writes_nothing(aws, backend):
    planned = provision(backend, dry_run=True)
    assert aws.writes() == []
    assert {e.action for e in planned} == {EnsureAction.WOULD_CREATE}
    assert all(
        e.console_url.startswith("https://us-east-1.console.aws.amazon.com/") for e in planned
    )
    assert [e.kind for e in planned] == [
        "network",
        "subnet",
        "subnet",
        "firewall",
        "cluster",
        "node_pool",
        "filesystem",
    ]


def test_statuses_while_creating_and_after(aws, backend):
    provision(backend)
    assert (
        backend.get_cluster().status == ResourceStatus.READY
    )  # moto's clusters are ACTIVE at once
    assert backend.get_cluster().version  # moto's default: the catalog names none
    pool = backend.get_node_pool(POOL)
    assert (pool.node_count, pool.machine_type, pool.status) == (
        8,
        "p5.48xlarge",
        ResourceStatus.READY,
    )
    first = backend.get_filesystem(FS)
    assert first.status == ResourceStatus.CREATING and first.id.startswith("fs-")
    ready = backend.get_filesystem(FS)
    assert ready.status == ResourceStatus.READY
    assert ready.mount_name and ready.endpoint.endswith(".amazonaws.com")
    assert ready.capacity_tib == 37.5 and ready.throughput_mbps_per_tib == 250


def test_credentials_token_is_a_presigned_get_caller_identity(aws, backend):
    provision(backend)
    creds = backend.cluster_credentials()
    assert creds.server.startswith("https://")
    assert creds.ca_data
    prefix = "k8s-aws-v1."
    assert creds.token.startswith(prefix) and "=" not in creds.token
    payload = creds.token[len(prefix) :]
    url = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)).decode()
    parts = urllib.parse.urlsplit(url)
    query = urllib.parse.parse_qs(parts.query)
    assert parts.netloc == urllib.parse.urlsplit(aws.url).netloc
    assert query["Action"] == ["GetCallerIdentity"]
    assert query["X-Amz-Expires"] == ["60"]
    assert query["X-Amz-Algorithm"] == ["AWS4-HMAC-SHA256"]
    assert "/sts/aws4_request" in query["X-Amz-Credential"][0]
    assert query["X-Amz-SignedHeaders"][0].split(";") == ["host", "x-k8s-aws-id"]
    assert len(query["X-Amz-Signature"][0]) == 64


def test_credentials_follow_an_emulator_endpoint(aws, backend):
    provision(backend)
    aws.set_cluster_endpoint("train-use1", "http://127.0.0.1:8999")
    creds = backend.cluster_credentials()
    assert (creds.server, creds.ca_data) == ("http://127.0.0.1:8999", None)
    config = creds.kube_config("train-use1")
    assert config["users"][0]["user"]["token"] == creds.token


def test_access_entry_created_once_for_the_caller(aws, backend):
    provision(backend)
    backend.cluster_credentials()
    backend.cluster_credentials()
    assert len(aws.sent("CreateAccessEntry")) == 1
    (policy,) = aws.sent("AssociateAccessPolicy")
    assert policy["policyArn"].endswith("/AmazonEKSClusterAdminPolicy")
    assert policy["accessScope"] == {"type": "cluster"}
    assert policy["principalArn"] == "arn:aws:sts::123456789012:user/moto"  # moto's caller


def test_access_entry_for_the_catalog_principal(aws):
    seed_block(aws)
    region, cluster = eks_region()
    iam = cluster.iam.model_copy(
        update={"airflow_principal_arn": "arn:aws:iam::123456789012:role/airflow"}
    )
    region, cluster = eks_region(iam=iam)
    backend = EksCloudBackend(cluster, region)
    backend.ensure_network()
    backend.ensure_cluster()
    entry = backend.ensure_access_entry()
    assert (entry.kind, entry.name, entry.action) == (
        "access",
        "arn:aws:iam::123456789012:role/airflow",
        EnsureAction.CREATED,
    )
    assert "GetCallerIdentity" not in aws.actions()
    assert backend.ensure_access_entry().action == EnsureAction.FOUND


def test_capacity_reservation_runs_on_demand_without_capacity_block_market(aws):
    seed_block(aws, kind="default")
    region, cluster = eks_region()
    backend = EksCloudBackend(cluster, region)
    provision(backend)
    assert aws.sent("CreateNodegroup")[0]["capacityType"] == "ON_DEMAND"
    template = aws.sent("CreateLaunchTemplate")[0]
    assert not any("InstanceMarketOptions" in key for key in template)


def test_node_group_callback_sees_the_created_group(aws, backend):
    seen = []
    aws.on_nodegroup_created(seen.append)
    provision(backend)
    (event,) = seen
    assert (event.cluster, event.name, event.desired_size) == ("train-use1", POOL, 8)
    assert event.instance_types == ("p5.48xlarge",)
    assert event.labels == {"gpufleet.io/pool": POOL}
    assert aws.callback_errors == []


def test_delete_node_pool(aws, backend):
    provision(backend)
    assert backend.delete_node_pool(POOL) is True
    assert backend.delete_node_pool(POOL) is False


def test_eks_creates_report_creating_until_active(aws, backend):
    aws.cluster_describes_until_active = 1
    aws.nodegroup_describes_until_active = 1
    backend.ensure_network()
    assert backend.ensure_cluster().status == ResourceStatus.CREATING
    assert backend.get_cluster().status == ResourceStatus.CREATING
    assert backend.get_cluster().status == ResourceStatus.READY
    with pytest.raises(BackendError, match="not ACTIVE"):
        aws.cluster_describes_until_active = 1
        aws.pending[("cluster", "train-use1")] = 1
        backend.cluster_credentials()
    created = backend.ensure_node_pool(POOL)
    assert (created.action, created.status) == (EnsureAction.CREATED, ResourceStatus.CREATING)
    assert backend.get_node_pool(POOL).status == ResourceStatus.CREATING
    assert backend.get_node_pool(POOL).status == ResourceStatus.READY


def test_retry_rule_resumes_a_failed_node_pool_without_duplicates(aws, backend):
    waits: list[float] = []
    retrying = RetryingCloudBackend(backend, RetryPolicy(sleep=waits.append))
    retrying.ensure_network()
    retrying.ensure_cluster()
    aws.throttle("eks", "CreateNodegroup", times=2)
    ensured = retrying.ensure_node_pool(POOL, taints=(UNVALIDATED,))
    assert ensured.action == EnsureAction.CREATED
    assert len(waits) == 2
    assert len(aws.sent("CreateLaunchTemplate")) == 1  # found on the retries, not recreated
    assert [r.injected for r in aws.requests if r.action == "CreateNodegroup"] == [
        True,
        True,
        False,
    ]
