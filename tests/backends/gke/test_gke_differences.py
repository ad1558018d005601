"""GkeCloudBackend against resources that already exist and differ from the catalog: a cluster
without what the fabric needs is refused, any other difference is reported and nothing is
written."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.backends.gke import GkeCloudBackend
from gpufleet.config.catalog import parse_catalog_file
from gpufleet.errors import BackendError, CatalogError
from tests.support.gcp_fake import GcpFake

EXAMPLE = Path(__file__).resolve().parents[3] / "include/fleet-examples/gke-a3-ultra.yaml"
PROJECT, ZONE, REGION = "my-gcp-project", "us-central1-b", "us-central1"
FABRIC = {"enableMultiNetworking": True, "datapathProvider": "ADVANCED_DATAPATH"}
LUSTRE_ON = {"lustreCsiDriverConfig": {"enabled": True}}


@pytest.fixture
def region():
    return parse_catalog_file(EXAMPLE)[0]


@pytest.fixture
def fake():
    with GcpFake(operation_polls=1) as fake:
        fake.add_reservation(PROJECT, ZONE, "a3u-reservation-1", "a3-ultragpu-8g", 16)
        yield fake


@pytest.fixture
def backend(fake, region) -> GkeCloudBackend:
    return GkeCloudBackend(region.clusters[0], region, endpoint=fake.url, poll_interval=0.001)


@pytest.mark.parametrize(
    ("network_config", "named"),
    [
        ({"datapathProvider": "ADVANCED_DATAPATH"}, "multi-networking"),
        ({"enableMultiNetworking": True}, "Dataplane V2 (ADVANCED_DATAPATH)"),
        ({}, "multi-networking and Dataplane V2 (ADVANCED_DATAPATH)"),
    ],
)
def test_existing_cluster_without_fabric_features_is_refused(backend, fake, network_config, named):
    fake.add_cluster(
        PROJECT, ZONE, "train-usc1", networkConfig=network_config, addonsConfig=LUSTRE_ON
    )
    with pytest.raises(BackendError) as err:
        backend.ensure_cluster()
    message = str(err.value)
    assert f"without {named}," in message and "only when a cluster is created" in message
    assert fake.writes() == []
    with pytest.raises(BackendError):
        backend.ensure_cluster(dry_run=True)  # a plan refuses it too


def test_existing_cluster_differences_are_reported(backend, fake):
    fake.add_cluster(PROJECT, ZONE, "train-usc1", networkConfig=FABRIC, network="other-vpc")
    found = backend.ensure_cluster()
    assert (found.action, found.status) == ("found", "READY")
    lustre, network = found.differences
    assert "Managed Lustre CSI driver" in lustre
    assert "gcloud container clusters update train-usc1" in lustre
    assert "--update-addons=LustreCsiDriver=ENABLED" in lustre
    assert network == "cluster network: catalog default, cloud other-vpc"
    assert backend.get_cluster().features["lustre_csi"] is False
    assert fake.writes() == []


def test_existing_network_differences_are_reported(backend, fake):
    fake.add_network(PROJECT, "a3u-rdma", mtu=1460)
    fake.add_network(PROJECT, "a3u-gvnic-sub", mtu=8896)
    fake.add_subnet(PROJECT, REGION, "a3u-rdma-sub-0", "a3u-rdma", "10.9.0.0/24")
    fake.add_subnet(PROJECT, REGION, "a3u-gvnic-sub", "a3u-gvnic-sub", "192.168.64.0/24")
    results = {(e.kind, e.name): e for e in backend.ensure_network(dry_run=True)}
    rdma = results[("network", "a3u-rdma")]
    assert rdma.action == "found"
    assert rdma.differences[0] == "network a3u-rdma MTU: catalog 8896, cloud 1460"
    assert "network profile" in rdma.differences[1] and "vpc-roce" in rdma.differences[1]
    sub0 = results[("subnet", "a3u-rdma-sub-0")]
    assert sub0.differences == (
        "subnet a3u-rdma-sub-0 CIDR: catalog 192.168.0.0/24, cloud 10.9.0.0/24",
    )
    assert results[("network", "a3u-gvnic-sub")].differences == ()
    assert results[("subnet", "a3u-rdma-sub-1")].action == "would_create"
    assert fake.writes() == []


def test_existing_pool_and_filesystem_differences_are_reported(backend, fake):
    fake.add_cluster(PROJECT, ZONE, "train-usc1", networkConfig=FABRIC, addonsConfig=LUSTRE_ON)
    fake.add_node_pool(
        PROJECT,
        ZONE,
        "train-usc1",
        "a3u-pool-1",
        initialNodeCount=4,
        config={
            "machineType": "a3-highgpu-8g",
            "reservationAffinity": {
                "consumeReservationType": "SPECIFIC_RESERVATION",
                "key": "compute.googleapis.com/reservation-name",
                "values": ["old-reservation"],
            },
        },
    )
    pool = backend.ensure_node_pool("a3u-pool-1")
    assert pool.action == "found"
    machine, count, reservation = pool.differences
    assert machine == "machine type: catalog a3-ultragpu-8g, cloud a3-highgpu-8g"
    assert count == "node count: catalog 16, cloud 4"
    assert reservation.startswith(
        "reservation: catalog a3u-reservation-1/reservationBlocks/a3u-reservation-1-block-0001, "
        "cloud old-reservation"
    )
    fake.state.instances[(PROJECT, ZONE, "lustre-usc1")] = {
        "name": f"projects/{PROJECT}/locations/{ZONE}/instances/lustre-usc1",
        "filesystem": "lustre",
        "capacityGib": "18000",
        "perUnitStorageThroughput": "1000",
        "network": f"projects/{PROJECT}/global/networks/a3u-rdma",
        "state": "ACTIVE",
    }
    fs = backend.ensure_filesystem("lustre-usc1")
    capacity, tier, network = fs.differences
    assert capacity == "capacity: catalog 36000 GiB, cloud 18000 GiB"
    assert tier == "throughput tier: catalog 500 MB/s per TiB, cloud 1000"
    assert "the cluster's primary VPC" in network and "a3u-rdma" in network
    assert fake.writes() == []


def test_catalog_values_the_api_cannot_take_are_refused_before_any_call(fake, region):
    cluster = region.clusters[0]
    pool = cluster.node_pools[0]
    odd = cluster.model_copy(
        update={
            "node_pools": (
                pool.model_copy(update={"gpu": pool.gpu.model_copy(update={"model": "MI300X"})}),
            )
        }
    )
    backend = GkeCloudBackend(odd, region, endpoint=fake.url)
    fake.add_cluster(PROJECT, ZONE, "train-usc1", networkConfig=FABRIC, addonsConfig=LUSTRE_ON)
    with pytest.raises(CatalogError, match="MI300X.*no known GKE accelerator type"):
        backend.ensure_node_pool("a3u-pool-1")
    fs = cluster.filesystems[0]
    slow = cluster.model_copy(
        update={"filesystems": (fs.model_copy(update={"throughput_mbps_per_tib": 300}),)}
    )
    with pytest.raises(CatalogError, match="tier 300 .*does not exist"):
        GkeCloudBackend(slow, region, endpoint=fake.url).ensure_filesystem("lustre-usc1")
    assert fake.writes() == []


def test_accelerator_types():
    from gpufleet.backends.gke.pools import accelerator_type

    assert accelerator_type("H200", "a3-ultragpu-8g") == "nvidia-h200-141gb"
    assert accelerator_type("H100", "a3-megagpu-8g") == "nvidia-h100-mega-80gb"
    assert accelerator_type("H100", "a3-highgpu-8g") == "nvidia-h100-80gb"
    assert accelerator_type("b200", "a4-highgpu-8g") == "nvidia-b200"
