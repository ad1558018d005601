"""GKE's "Cluster is running incompatible operation" (400 FAILED_PRECONDITION while an
auto-upgrade, an auto-repair or another change holds the cluster) is temporary: the retry rule
waits and retries it, a bounded number of times, through the real client library against the
GCP fake. Time is injected: the policy's ``sleep`` records the waits instead of sleeping."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.backends.base import EnsureAction
from gpufleet.backends.gke import GkeCloudBackend
from gpufleet.backends.gke.clients import BUSY_CLUSTER_WAIT
from gpufleet.backends.retry import RetryingCloudBackend, RetryPolicy
from gpufleet.config.catalog import parse_catalog_file
from gpufleet.errors import BackendError, TransientBackendError
from tests.support.gcp_fake import GcpFake

EXAMPLE = Path(__file__).resolve().parents[3] / "include/fleet-examples/gke-a3-ultra.yaml"
PROJECT, ZONE, MACHINE = "my-gcp-project", "us-central1-b", "a3-ultragpu-8g"
RES, BLOCK = "a3u-reservation-1", "a3u-reservation-1-block-0001"
FABRIC = {"enableMultiNetworking": True, "datapathProvider": "ADVANCED_DATAPATH"}
POOLS = f"/v1/projects/{PROJECT}/locations/{ZONE}/clusters/train-usc1/nodePools"


@pytest.fixture
def fake():
    with GcpFake(operation_polls=1) as fake:
        fake.add_reservation(PROJECT, ZONE, RES, MACHINE, 16, blocks=[BLOCK])
        yield fake


@pytest.fixture
def backend(fake) -> GkeCloudBackend:
    region = parse_catalog_file(EXAMPLE)[0]
    backend = GkeCloudBackend(region.clusters[0], region, endpoint=fake.url, poll_interval=0)
    backend.ensure_network()
    fake.add_cluster(PROJECT, ZONE, "train-usc1", networkConfig=FABRIC)
    fake.clear_log()
    return backend


def test_a_busy_cluster_is_waited_for_and_the_create_goes_through(backend, fake):
    waits: list[float] = []
    retrying = RetryingCloudBackend(backend, RetryPolicy(attempts=5, sleep=waits.append))
    fake.inject_incompatible_operation(times=3, method="POST", path_contains="/nodePools")

    ensured = retrying.ensure_node_pool("a3u-pool-1")

    assert ensured.action == EnsureAction.CREATED
    assert [r.method for r in fake.requests if r.path == POOLS] == ["POST"] * 4
    assert waits == [BUSY_CLUSTER_WAIT] * 3  # waited as Google says, not 0.2 s


def test_a_cluster_busy_for_too_long_surfaces_as_temporary_after_the_bounded_retries(backend, fake):
    waits: list[float] = []
    retrying = RetryingCloudBackend(backend, RetryPolicy(attempts=3, sleep=waits.append))
    fake.inject_incompatible_operation(times=10, method="POST", path_contains="/nodePools")

    with pytest.raises(TransientBackendError) as err:
        retrying.ensure_node_pool("a3u-pool-1")

    assert len(waits) == 2 and len([r for r in fake.requests if r.path == POOLS]) == 3
    message = str(err.value)
    assert "busy with another operation" in message and "incompatible operation" in message
    assert "fix the catalog" not in message


def test_a_real_refusal_is_still_permanent(backend, fake):
    fake.state.clusters[(PROJECT, ZONE, "train-usc1")]["status"] = "PROVISIONING"
    waits: list[float] = []
    retrying = RetryingCloudBackend(backend, RetryPolicy(attempts=3, sleep=waits.append))
    with pytest.raises(BackendError, match="fix the catalog entry") as err:
        retrying.ensure_node_pool("a3u-pool-1")
    assert not isinstance(err.value, TransientBackendError) and waits == []
