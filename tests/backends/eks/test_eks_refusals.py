"""The EKS backend refuses what AWS would reject before sending it, reports differences
instead of changing what exists, and maps AWS errors: throttling, 5xx and dropped connections
are transient (retried by backends/retry.py), the rest name the API's code and what to do."""

from __future__ import annotations

import boto3
import pytest
from eks_catalog import FS, POOL, RESERVATION, eks_region, seed_block

from gpufleet.backends.base import EnsureAction
from gpufleet.backends.eks import EksCloudBackend
from gpufleet.domain.fleet import ReservationRef, Subnet
from gpufleet.errors import BackendError, CatalogError, TransientBackendError


def ready_backend(aws, **changes) -> EksCloudBackend:
    seed_block(aws)
    region, cluster = eks_region(**changes)
    backend = EksCloudBackend(cluster, region)
    backend.ensure_network()
    backend.ensure_cluster()
    return backend


def test_single_zone_network_is_refused_before_any_call(aws):
    # the example as first shipped: one subnet, 10.0.0.0/16 in us-east-1a
    single = (Subnet(name="train-use1a", cidr="10.0.0.0/16", zone="us-east-1a"),)
    region, cluster = eks_region()
    cluster = cluster.model_copy(
        update={"network": cluster.network.model_copy(update={"subnets": single})}
    )
    backend = EksCloudBackend(cluster, region)
    for call in (backend.ensure_network, backend.ensure_cluster):
        with pytest.raises(CatalogError, match="at least two availability zones") as err:
            call()
        assert "train-use1a (10.0.0.0/16, us-east-1a)" in str(err.value)
    assert aws.requests == []


def test_fsx_size_fsx_does_not_offer_is_refused_with_the_nearest(aws):
    backend = ready_backend(aws)
    fs = backend.cluster.filesystems[0].model_copy(update={"capacity_tib": 38.4})
    cluster = backend.cluster.model_copy(update={"filesystems": (fs,)})
    bad = EksCloudBackend(cluster, backend.region)
    with pytest.raises(CatalogError) as err:
        bad.ensure_filesystem(FS)
    message = str(err.value)
    assert "39321.6 GiB" in message
    assert "38400 GiB (capacity_tib: 37.5)" in message and "40800 GiB" in message
    assert "CreateFileSystem" not in aws.actions()


def test_fsx_throughput_outside_persistent_2_tiers_is_refused(aws):
    backend = ready_backend(aws)
    fs = backend.cluster.filesystems[0].model_copy(update={"throughput_mbps_per_tib": 200})
    bad = EksCloudBackend(backend.cluster.model_copy(update={"filesystems": (fs,)}), backend.region)
    with pytest.raises(CatalogError, match="125, 250, 500, 1000"):
        bad.ensure_filesystem(FS, dry_run=True)


def test_more_efa_interfaces_than_the_machine_has_is_refused(aws):
    backend = ready_backend(aws)
    net = backend.cluster.network.model_copy(update={"rdma_nics": 33})
    bad = EksCloudBackend(backend.cluster.model_copy(update={"network": net}), backend.region)
    with pytest.raises(CatalogError, match="p5.48xlarge supports 32 EFA"):
        bad.ensure_node_pool(POOL)
    assert "CreateLaunchTemplate" not in aws.actions()


def test_existing_node_group_differences_are_reported_not_changed(aws):
    backend = ready_backend(aws)
    backend.ensure_node_pool(POOL)
    aws.add_capacity_reservation("cr-0fedcba9876543210", "p5e.48xlarge", 8, "us-east-1a", "default")
    pool = backend.cluster.pool(POOL).model_copy(
        update={
            "nodes": 4,
            "machine_type": "p5e.48xlarge",
            "reservation": ReservationRef(name="cr-0fedcba9876543210"),
        }
    )
    changed = EksCloudBackend(
        backend.cluster.model_copy(update={"node_pools": (pool,)}), backend.region
    )
    aws.clear_log()
    ensured = changed.ensure_node_pool(POOL)
    assert ensured.action == EnsureAction.FOUND
    assert set(ensured.differences) == {
        "instance type: catalog p5e.48xlarge, cloud p5.48xlarge",
        "size: catalog 4 nodes, cloud min 8 max 8 desired 8",
        "capacity type: catalog ON_DEMAND, cloud CAPACITY_BLOCK",
        f"reservation: catalog cr-0fedcba9876543210, cloud {RESERVATION}",
    }
    assert aws.writes() == []
    info = changed.get_node_pool(POOL)  # what runs, as the cloud says
    assert (info.machine_type, info.node_count, info.reservation) == ("p5.48xlarge", 8, RESERVATION)


def test_existing_cluster_version_difference_and_config_map_only_refusal(aws):
    backend = ready_backend(aws)
    region, cluster = eks_region(kubernetes_version="1.35")
    assert EksCloudBackend(cluster, region).ensure_cluster().differences == (
        f"kubernetes version: catalog 1.35, cloud {backend.get_cluster().version}",
    )
    # A cluster made without access entries (authenticationMode CONFIG_MAP) cannot be reached.
    eks = boto3.client("eks", region_name="us-east-1")
    eks.delete_cluster(name=cluster.name)
    subnets = backend.network.ids().subnet_ids(cluster)
    eks.create_cluster(
        name=cluster.name,
        roleArn=cluster.iam.cluster_role_arn,
        resourcesVpcConfig={"subnetIds": subnets},
    )
    with pytest.raises(BackendError, match="authenticationMode CONFIG_MAP"):
        backend.ensure_cluster()


def test_unknown_reservation_and_wrong_machine_type(aws):
    region, cluster = eks_region()
    backend = EksCloudBackend(cluster, region)
    with pytest.raises(BackendError, match="does not exist") as err:
        backend.get_reservation("cr-0000000000000dead")
    assert "InvalidCapacityReservationId.NotFound" in str(err.value)
    aws.add_capacity_reservation(RESERVATION, "p5e.48xlarge", 8, "us-east-1a")
    backend.ensure_network()
    backend.ensure_cluster()
    with pytest.raises(BackendError, match="p5.48xlarge but reservation .* p5e.48xlarge"):
        backend.ensure_node_pool(POOL)
    assert "CreateNodegroup" not in aws.actions()


@pytest.mark.parametrize(
    ("service", "action", "call"),
    [
        ("eks", "DescribeCluster", lambda b: b.get_cluster()),
        ("ec2", "DescribeCapacityReservations", lambda b: b.get_reservation(RESERVATION)),
        ("ec2", "DescribeVpcs", lambda b: b.ensure_network()),
        ("fsx", "DescribeFileSystems", lambda b: b.get_filesystem(FS)),
        ("sts", "GetCallerIdentity", lambda b: b.ensure_access_entry()),
    ],
)
def test_throttling_is_transient_and_tried_once(aws, service, action, call):
    backend = ready_backend(aws)
    aws.throttle(service, action)
    with pytest.raises(TransientBackendError, match="retrying may help"):
        call(backend)
    assert [r.action for r in aws.requests if r.injected] == [action]
    call(backend)  # one attempt per call: the retry rule lives in backends/retry.py


def test_server_error_carries_retry_after(aws):
    backend = ready_backend(aws)
    aws.fail("eks", "DescribeCluster", status=503, retry_after="7")
    with pytest.raises(TransientBackendError) as err:
        backend.get_cluster()
    assert err.value.retry_after == 7.0


def test_access_denied_names_the_permission(aws):
    seed_block(aws)
    region, cluster = eks_region()
    aws.fail("ec2", "CreateVpc", status=403, code="UnauthorizedOperation")
    with pytest.raises(BackendError) as err:
        EksCloudBackend(cluster, region).ensure_network()
    assert not isinstance(err.value, TransientBackendError)
    assert "'ec2:CreateVpc'" in str(err.value) and "UnauthorizedOperation" in str(err.value)


def test_unreachable_endpoint_is_transient(aws, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    region, cluster = eks_region()
    with pytest.raises(TransientBackendError, match="could not reach AWS"):
        EksCloudBackend(cluster, region).get_cluster()
