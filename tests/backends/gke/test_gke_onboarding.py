"""Contract tests of GkeCloudBackend: the example GKE region onboarded through the real Google
client libraries (REST transports over HTTP) against the strict local fake.

Assertions read what the fake RECEIVED (``fake.bodies``/``fake.writes``), not what the backend
says it did; bodies arrive in the REST JSON form (camelCase, enum names after the fake's check).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.backends.base import CloudBackend, Taint
from gpufleet.backends.gke import GkeCloudBackend
from gpufleet.config.catalog import parse_catalog_file
from gpufleet.domain.workloads import UNVALIDATED_KEY
from tests.support.gcp_fake import GcpFake

EXAMPLE = Path(__file__).resolve().parents[3] / "include/fleet-examples/gke-a3-ultra.yaml"
PROJECT, ZONE, REGION = "my-gcp-project", "us-central1-b", "us-central1"
RES, BLOCK = "a3u-reservation-1", "a3u-reservation-1-block-0001"
UNVALIDATED = Taint(UNVALIDATED_KEY, "true", "NoSchedule")


@pytest.fixture
def region():
    return parse_catalog_file(EXAMPLE)[0]


@pytest.fixture
def fake():
    with GcpFake(operation_polls=2) as fake:
        fake.add_reservation(PROJECT, ZONE, RES, "a3-ultragpu-8g", 16, in_use=2, blocks=[BLOCK])
        yield fake


@pytest.fixture
def backend(fake, region, monkeypatch) -> GkeCloudBackend:
    monkeypatch.setenv("GPUFLEET_GCP_ENDPOINT", fake.url)  # the production override
    return GkeCloudBackend(region.clusters[0], region, poll_interval=0.001)


def wait_ready(get, attempts: int = 20):
    for _ in range(attempts):
        info = get()
        if info.status == "READY":
            return info
    raise AssertionError(f"not READY after {attempts} polls: {info}")


def onboard(backend: GkeCloudBackend) -> None:
    backend.ensure_network()
    backend.ensure_cluster()
    wait_ready(backend.get_cluster)
    backend.ensure_node_pool("a3u-pool-1", taints=(UNVALIDATED,))
    wait_ready(lambda: backend.get_node_pool("a3u-pool-1"))
    backend.ensure_filesystem("lustre-usc1")
    wait_ready(lambda: backend.get_filesystem("lustre-usc1"))


def test_protocol_and_reservation(backend, fake):
    assert isinstance(backend, CloudBackend)
    res = backend.get_reservation(RES)
    assert (res.count, res.in_use, res.free) == (16, 2, 14)
    assert (res.machine_type, res.zone, res.blocks, res.status) == (
        "a3-ultragpu-8g",
        ZONE,
        (BLOCK,),
        "active",
    )
    fake.add_reservation(PROJECT, ZONE, RES, "a3-ultragpu-8g", 16, blocks=None)
    assert backend.get_reservation(RES).blocks is None  # the API lists none: never guessed


def test_network_sent_mtu_profile_and_one_subnet_per_nic(backend, fake):
    results = backend.ensure_network()
    assert [(e.kind, e.action, e.status) for e in results[:3]] == [
        ("network", "created", "READY"),
        ("subnet", "created", "READY"),
        ("network", "created", "READY"),
    ]
    assert all(e.console_url.startswith("https://console.cloud.google.com/") for e in results)
    networks = {b["name"]: b for b in fake.bodies("POST", r"/global/networks$")}
    rdma = networks["a3u-rdma"]
    assert rdma["mtu"] == 8896 and rdma["autoCreateSubnetworks"] is False
    assert rdma["networkProfile"] == f"projects/{PROJECT}/global/networkProfiles/{ZONE}-vpc-roce"
    assert networks["a3u-gvnic-sub"]["mtu"] == 8896
    assert "networkProfile" not in networks["a3u-gvnic-sub"]
    subnets = {b["name"]: b for b in fake.bodies("POST", rf"/regions/{REGION}/subnetworks$")}
    assert len(subnets) == 9
    for i in range(8):
        sub = subnets[f"a3u-rdma-sub-{i}"]
        assert sub["ipCidrRange"] == f"192.168.{i}.0/24"
        assert sub["network"].endswith("/networks/a3u-rdma")
    assert subnets["a3u-gvnic-sub"]["network"].endswith("/networks/a3u-gvnic-sub")
    # every insert was waited on through the compute operations endpoints of the same host
    assert any("/operations/" in r.path for r in fake.requests if r.method == "GET")


def test_onboarding_sends_what_the_fabric_needs(backend, fake):
    created: list[tuple[str, dict]] = []
    fake.on_node_pool_created(lambda cluster, pool: created.append((cluster, pool)))
    onboard(backend)

    (cluster_req,) = fake.bodies("POST", r"/locations/us-central1-b/clusters$")
    cl = cluster_req["cluster"]
    assert cl["network"] == "default"
    assert cl["networkConfig"] == {
        "enableMultiNetworking": True,
        "datapathProvider": "ADVANCED_DATAPATH",
    }
    assert cl["ipAllocationPolicy"]["useIpAliases"] is True
    assert cl["addonsConfig"]["lustreCsiDriverConfig"]["enabled"] is True
    assert "initialClusterVersion" not in cl  # the example catalog leaves the version open
    (system,) = cl["nodePools"]
    assert system["name"] == "gpufleet-system" and "accelerators" not in system["config"]

    (pool_req,) = fake.bodies("POST", r"/nodePools$")
    pool = pool_req["nodePool"]
    assert pool["locations"] == [ZONE] and pool["initialNodeCount"] == 16
    config = pool["config"]
    assert config["machineType"] == "a3-ultragpu-8g"
    assert config["reservationAffinity"] == {
        "consumeReservationType": "SPECIFIC_RESERVATION",
        "key": "compute.googleapis.com/reservation-name",
        "values": [f"{RES}/reservationBlocks/{BLOCK}"],
    }
    assert config["accelerators"] == [
        {
            "acceleratorCount": "8",
            "acceleratorType": "nvidia-h200-141gb",
            "gpuDriverInstallationConfig": {"gpuDriverVersion": "LATEST"},
        }
    ]
    assert config["gvnic"] == {"enabled": True}
    assert config["labels"] == {"gpufleet.io/pool": "a3u-pool-1"}
    assert config["taints"] == [{"key": UNVALIDATED_KEY, "value": "true", "effect": "NO_SCHEDULE"}]
    extra = pool["networkConfig"]["additionalNodeNetworkConfigs"]
    assert extra[0] == {"network": "a3u-gvnic-sub", "subnetwork": "a3u-gvnic-sub"}
    assert extra[1:] == [
        {"network": "a3u-rdma", "subnetwork": f"a3u-rdma-sub-{i}"} for i in range(8)
    ]
    assert [c for c, _ in created] == ["train-usc1"] and created[0][1]["name"] == "a3u-pool-1"

    (fs_req,) = fake.bodies("POST", r"/instances$")
    assert fs_req["perUnitStorageThroughput"] == "500"
    assert fs_req["network"] == f"projects/{PROJECT}/global/networks/default"  # primary VPC
    assert fs_req["capacityGib"] == "36000"  # 36 TiB to the 500 tier's 18,000 GiB step
    assert fake.requests[-1].path.endswith("/instances/lustre-usc1")
    fs = backend.get_filesystem("lustre-usc1")
    assert fs.id == f"projects/{PROJECT}/locations/{ZONE}/instances/lustre-usc1"
    assert (fs.mount_name, fs.throughput_mbps_per_tib) == ("lustreus", 500)
    assert fs.endpoint.endswith("@tcp") and fs.network.endswith("/networks/default")

    info = backend.get_cluster()
    assert info.features == {"multi_networking": True, "dataplane_v2": True, "lustre_csi": True}
    assert backend.get_node_pool("a3u-pool-1").reservation == RES
    assert backend.get_reservation(RES).in_use == 18  # the pool consumed the reservation


def test_second_pass_and_dry_run_send_no_writes(backend, fake, region):
    onboard(backend)
    fake.clear_log()
    again = [
        *backend.ensure_network(),
        backend.ensure_cluster(),
        backend.ensure_node_pool("a3u-pool-1", taints=(UNVALIDATED,)),
        backend.ensure_filesystem("lustre-usc1"),
    ]
    assert {e.action for e in again} == {"found"}
    assert all(not e.differences for e in again), [e.differences for e in again]
    assert fake.writes() == [] and fake.requests

    with GcpFake() as empty:
        dry = GkeCloudBackend(region.clusters[0], region, endpoint=empty.url)
        plan = [
            *dry.ensure_network(dry_run=True),
            dry.ensure_cluster(dry_run=True),
            dry.ensure_node_pool("a3u-pool-1", dry_run=True),
            dry.ensure_filesystem("lustre-usc1", dry_run=True),
        ]
        assert {e.action for e in plan} == {"would_create"}
        assert {e.status for e in plan} == {"ABSENT"}
        assert empty.writes() == [] and empty.requests


def test_version_credentials_and_pool_delete(fake, region):
    cluster = region.clusters[0].model_copy(update={"kubernetes_version": "1.34"})
    backend = GkeCloudBackend(cluster, region, endpoint=fake.url, poll_interval=0.001)
    fake.set_cluster_endpoint("http://127.0.0.1:9999", ca_data="")
    backend.ensure_network()
    assert backend.ensure_cluster().status == "CREATING"
    assert backend.get_cluster().status == "CREATING"
    info = wait_ready(backend.get_cluster)
    assert info.version.startswith("1.34.")
    (req,) = fake.bodies("POST", r"/clusters$")
    assert req["cluster"]["initialClusterVersion"] == "1.34"
    creds = backend.cluster_credentials()
    assert creds.server == "http://127.0.0.1:9999" and creds.ca_data is None and creds.token

    backend.ensure_node_pool("a3u-pool-1")
    wait_ready(lambda: backend.get_node_pool("a3u-pool-1"))
    assert backend.delete_node_pool("a3u-pool-1") is True
    assert backend.get_node_pool("a3u-pool-1").status == "DELETING"
    for _ in range(5):
        if backend.get_node_pool("a3u-pool-1").status == "ABSENT":
            break
    assert backend.get_node_pool("a3u-pool-1").status == "ABSENT"
    assert backend.delete_node_pool("a3u-pool-1") is False
