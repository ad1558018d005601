"""The fake is as strict as Google's front ends, and Google's errors become gpufleet's: 4xx a
``BackendError`` with the API's message and what to do, 429/5xx/connection failures a
``TransientBackendError`` that the retry rule retries."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests

from gpufleet.backends.gke import GkeCloudBackend
from gpufleet.backends.gke.clients import call
from gpufleet.backends.retry import RetryingCloudBackend, RetryPolicy
from gpufleet.config.catalog import parse_catalog_file
from gpufleet.errors import BackendError, TransientBackendError
from tests.support.gcp_fake import GcpFake
from tests.support.gcp_fake_schema import discovery

EXAMPLE = Path(__file__).resolve().parents[3] / "include/fleet-examples/gke-a3-ultra.yaml"
PROJECT, ZONE = "my-gcp-project", "us-central1-b"
RES = "a3u-reservation-1"
FABRIC = {"enableMultiNetworking": True, "datapathProvider": "ADVANCED_DATAPATH"}


@pytest.fixture
def region():
    return parse_catalog_file(EXAMPLE)[0]


@pytest.fixture
def fake():
    with GcpFake(operation_polls=1) as fake:
        fake.add_reservation(PROJECT, ZONE, RES, "a3-ultragpu-8g", 16)
        yield fake


@pytest.fixture
def backend(fake, region) -> GkeCloudBackend:
    return GkeCloudBackend(region.clusters[0], region, endpoint=fake.url, poll_interval=0.001)


def post(fake: GcpFake, path: str, body: dict) -> requests.Response:
    return requests.post(f"{fake.url}{path}", json=body, timeout=5)


CLUSTERS = f"/v1/projects/{PROJECT}/locations/{ZONE}/clusters"


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [
        (
            CLUSTERS,
            {"cluster": {"name": "c", "networkConfig": {"enableMultiNet": True}}},
            "Unknown name \"enableMultiNet\" at 'cluster.networkConfig'",
        ),
        (
            CLUSTERS,
            {"cluster": {"name": "c", "networkConfig": {"datapathProvider": "FAST"}}},
            "Invalid value at 'cluster.networkConfig.datapathProvider'",
        ),
        (
            CLUSTERS,
            {"cluster": {"name": "c", "networkConfig": {"datapathProvider": 99}}},
            "TYPE_ENUM",
        ),
        (
            CLUSTERS,
            {
                "cluster": {
                    "name": "c",
                    "nodePools": [
                        {"name": "p", "config": {"taints": [{"key": "k", "effect": "NoSchedule"}]}}
                    ],
                }
            },
            "TYPE_ENUM",
        ),
        (
            CLUSTERS,
            {"cluster": {"name": "c", "ipAllocationPolicy": {"useIpAliases": "yes"}}},
            "TYPE_BOOL",
        ),
        (
            f"/compute/v1/projects/{PROJECT}/global/networks",
            {"name": "n", "mtuu": 8896},
            'Unknown name "mtuu"',
        ),
        (
            f"/compute/v1/projects/{PROJECT}/global/networks",
            {"name": "n", "routingConfig": {"routingMode": "SIDEWAYS"}},
            "routingMode",
        ),
        (
            f"/v1/projects/{PROJECT}/locations/{ZONE}/instances?instanceId=fs",
            {
                "filesystem": "fs",
                "capacityGib": "18000",
                "perUnitStorageThroughput": "500",
                "network": f"projects/{PROJECT}/global/networks/default",
                "gkeSupport": True,
            },
            "gkeSupport",
        ),
        (
            f"/v1/projects/{PROJECT}/locations/{ZONE}/instances?instanceId=fs",
            {
                "filesystem": "fs",
                "capacityGib": "20000",
                "perUnitStorageThroughput": "500",
                "network": f"projects/{PROJECT}/global/networks/default",
            },
            "steps of 18000",
        ),
    ],
)
def test_fake_refuses_what_google_refuses(fake, path, body, message):
    response = post(fake, path, body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["status"] == "INVALID_ARGUMENT" and message in error["message"]
    assert fake.state.clusters == {} and fake.state.instances == {}
    assert set(fake.state.networks) == set()


def test_integer_enums_index_the_discovery_enums_as_the_protos_number_them():
    from google.cloud import container_v1 as c

    schemas = discovery("container.v1.json")["schemas"]
    for enum, (schema, field) in {
        c.DatapathProvider: ("NetworkConfig", "datapathProvider"),
        c.NodeTaint.Effect: ("NodeTaint", "effect"),
        c.ReservationAffinity.Type: ("ReservationAffinity", "consumeReservationType"),
        c.GPUDriverInstallationConfig.GPUDriverVersion: (
            "GPUDriverInstallationConfig",
            "gpuDriverVersion",
        ),
    }.items():
        names = schemas[schema]["properties"][field]["enum"]
        assert [names[m.value] for m in enum] == [m.name for m in enum]


def test_a_400_through_the_client_library_is_a_backend_error(backend, fake):
    from google.cloud import container_v1, lustre_v1

    clients = backend.scope.clients
    bad = container_v1.Cluster(
        name="c", network_config=container_v1.NetworkConfig(datapath_provider=99)
    )
    with pytest.raises(BackendError) as err:
        call(
            "create cluster c",
            "container.clusters.create",
            clients.container.create_cluster,
            parent=f"projects/{PROJECT}/locations/{ZONE}",
            cluster=bad,
        )
    assert not isinstance(err.value, TransientBackendError)
    assert "refused the request (400" in str(err.value) and "datapathProvider" in str(err.value)
    odd = lustre_v1.Instance(
        filesystem="fs",
        capacity_gib=1000,
        per_unit_storage_throughput=500,
        network=f"projects/{PROJECT}/global/networks/default",
    )
    with pytest.raises(BackendError, match="capacityGib 1000 is invalid"):
        call(
            "create fs",
            None,
            clients.lustre.create_instance,
            parent=f"projects/{PROJECT}/locations/{ZONE}",
            instance_id="fs",
            instance=odd,
        )


def test_api_rules_surface_as_backend_errors(backend, fake):
    fake.add_cluster(PROJECT, ZONE, "train-usc1", networkConfig=FABRIC, status="PROVISIONING")
    backend.ensure_network()
    with pytest.raises(BackendError, match="PROVISIONING: operations on node pools need"):
        backend.ensure_node_pool("a3u-pool-1")
    fake.state.clusters[(PROJECT, ZONE, "train-usc1")]["status"] = "RUNNING"
    with pytest.raises(BackendError, match="Reservation block 'a3u-reservation-1-block-0001'"):
        backend.ensure_node_pool("a3u-pool-1")  # the fake's reservation lists no blocks
    fake.state.reservations.clear()
    with pytest.raises(BackendError, match="not found.*check the project, location"):
        backend.get_reservation(RES)


def test_503_429_and_dropped_connections_are_transient(backend, fake, region):
    fake.inject_error(503, path_contains="/reservations/")
    with pytest.raises(TransientBackendError, match="503"):
        backend.get_reservation(RES)
    fake.inject_error(429, retry_after=7, path_contains="/clusters/")
    with pytest.raises(TransientBackendError) as err:
        backend.get_cluster()
    assert err.value.retry_after == 7.0
    fake.inject_error(503, method="POST", path_contains="/global/networks")
    with pytest.raises(TransientBackendError):
        backend.ensure_network()
    assert not any(r.method == "POST" for r in fake.requests[:-1])  # failed at the first insert

    closed = GkeCloudBackend(region.clusters[0], region, endpoint="http://127.0.0.1:9")
    with pytest.raises(TransientBackendError, match="could not reach the Google API"):
        closed.get_cluster()


def test_403_names_the_permission(backend, fake):
    fake.inject_error(403, path_contains="/clusters")
    with pytest.raises(BackendError) as err:
        backend.ensure_cluster()
    message = str(err.value)
    assert not isinstance(err.value, TransientBackendError)
    assert "permission denied (403" in message and "'container.clusters.get'" in message
    assert "roles/container.admin" in message


def test_the_retry_rule_retries_transient_google_errors(backend, fake):
    waits: list[float] = []
    retrying = RetryingCloudBackend(backend, RetryPolicy(attempts=3, sleep=waits.append))
    fake.inject_error(503, times=2, path_contains="/reservations/")
    assert retrying.get_reservation(RES).count == 16
    assert len(waits) == 2


def test_a_malformed_endpoint_override_is_refused(region, monkeypatch):
    monkeypatch.setenv("GPUFLEET_GCP_ENDPOINT", "ftp://127.0.0.1:1")
    with pytest.raises(BackendError, match="GPUFLEET_GCP_ENDPOINT='ftp://127.0.0.1:1'"):
        GkeCloudBackend(region.clusters[0], region)
