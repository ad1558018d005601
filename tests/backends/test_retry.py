"""The retry rule (gpufleet.backends.retry) on the real kube backend, against kmock over HTTP.

Faults are injected at the emulator, so each case goes through the whole chain: official client
-> ApiException -> kube/errors.py's classification -> tenacity. Waits are recorded by the
policy's ``sleep`` instead of slept.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from gpufleet.backends import cluster_backend
from gpufleet.backends.base import CloudBackend, ClusterBackend
from gpufleet.backends.kube.cluster import KubeClusterBackend
from gpufleet.backends.retry import (
    RetryingCloudBackend,
    RetryingClusterBackend,
    RetryPolicy,
    is_transient_status,
    parse_retry_after,
)
from gpufleet.domain.workloads import POOL_LABEL
from gpufleet.errors import BackendError, TransientBackendError
from tests.support.kube_emulator import KubeEmulator

CONN_ID = "kmock_retry"
NS = "training"
NODES = "/api/v1/nodes"
CONFIGMAPS = f"/api/v1/namespaces/{NS}/configmaps"


@pytest.fixture(scope="module")
def kube() -> Iterator[KubeEmulator]:
    with KubeEmulator(conn_id=CONN_ID, namespace=NS) as emulator:
        yield emulator


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def policy(sleeps: list[float]) -> RetryPolicy:
    return RetryPolicy(attempts=4, first_delay=0.5, max_delay=10.0, sleep=sleeps.append)


@pytest.fixture
def backend(kube: KubeEmulator, policy: RetryPolicy) -> RetryingClusterBackend:
    kube.reset()
    kube.seed_node("a-1", "pool-a")
    kube.reset_requests()
    return RetryingClusterBackend(KubeClusterBackend(conn_id=CONN_ID), policy)


def calls(kube: KubeEmulator, method: str, path: str) -> int:
    return sum(1 for r in kube.requests() if r.method == method and r.url.path == path)


def configmap(name: str, **data: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


# ---- transient: retried -----------------------------------------------------------------------


@pytest.mark.parametrize("status", [429, 500, 503])
def test_transient_then_success(kube, backend, policy, sleeps, status) -> None:
    with kube.fail("GET", f"^{NODES}$", status, times=2):
        nodes = backend.list_nodes()
    assert [n.name for n in nodes] == ["a-1"]
    assert calls(kube, "GET", NODES) == 3  # two failures, then the list
    # exponential backoff from the policy's first delay, no Retry-After sent
    assert sleeps == [policy.first_delay, policy.first_delay * 2]


def test_gives_up_after_n_attempts_with_the_last_error(kube, backend, policy, sleeps) -> None:
    early = kube.fail("GET", f"^{NODES}$", 503, times=policy.attempts - 1, message="early")
    last = kube.fail("GET", f"^{NODES}$", 500, message="the last one")
    with early, last, pytest.raises(TransientBackendError) as err:
        backend.list_nodes()
    assert "the last one" in str(err.value) and "HTTP 500" in str(err.value)
    assert calls(kube, "GET", NODES) == policy.attempts
    assert len(sleeps) == policy.attempts - 1


def test_a_dropped_connection_is_retried(
    kube: KubeEmulator, policy: RetryPolicy, sleeps: list[float], monkeypatch
) -> None:
    dead = dict(kube.connection())
    config = kube.kube_config()
    config["clusters"][0]["cluster"]["server"] = "http://127.0.0.1:9"  # discard port: refused
    dead["extra"] = {"kube_config": config}
    monkeypatch.setenv("AIRFLOW_CONN_KMOCK_RETRY_DEAD", json.dumps(dead))
    backend = RetryingClusterBackend(KubeClusterBackend(conn_id="kmock_retry_dead"), policy)
    with pytest.raises(TransientBackendError, match="cannot reach"):
        backend.list_nodes()
    assert len(sleeps) == policy.attempts - 1


def test_retry_after_is_honoured(kube, backend, policy, sleeps) -> None:
    with kube.fail("GET", f"^{NODES}$", 429, times=1, retry_after="7"):
        backend.list_nodes()
    assert sleeps == [7.0]  # the server's wait, longer than the first backoff

    sleeps.clear()
    with kube.fail("GET", f"^{NODES}$", 503, times=1, retry_after="0"):
        backend.list_nodes()
    assert sleeps == [policy.first_delay]  # at least the backoff

    sleeps.clear()
    with kube.fail("GET", f"^{NODES}$", 503, times=1, retry_after="86400"):
        backend.list_nodes()
    assert sleeps == [policy.max_retry_after]  # capped


def test_the_kube_backend_reads_retry_after_into_the_error(kube, backend) -> None:
    with (
        kube.fail("GET", f"^{NODES}$", 429, retry_after="12"),
        pytest.raises(TransientBackendError) as err,
    ):
        backend.inner.list_nodes()
    assert err.value.retry_after == 12.0
    with kube.fail("GET", f"^{NODES}$", 503), pytest.raises(TransientBackendError) as err:
        backend.inner.list_nodes()
    assert err.value.retry_after is None


# ---- a 409 on create: found, not retried ------------------------------------------------------


def test_conflict_on_create_returns_the_existing_object_without_a_retry(
    kube, backend, sleeps
) -> None:
    first = backend.apply(configmap("env", A="1"))
    kube.reset_requests()
    again = backend.apply(configmap("env", A="2"))
    assert again["data"] == first["data"] == {"A": "1"}
    assert sleeps == []
    assert calls(kube, "POST", CONFIGMAPS) == 1  # the create that answered 409, once
    assert calls(kube, "GET", f"{CONFIGMAPS}/env") == 1  # then the read of what exists


def test_conflict_with_an_object_being_deleted_is_transient(kube, backend, policy, sleeps) -> None:
    body = {**configmap("old"), "metadata": {"name": "old", "finalizers": ["test/hold"]}}
    kube.core.create_namespaced_config_map(NS, body)
    kube.core.delete_namespaced_config_map("old", NS)  # held by its finalizer: being deleted
    kube.reset_requests()
    with pytest.raises(TransientBackendError, match="being deleted"):
        backend.apply(configmap("old"))
    assert calls(kube, "POST", CONFIGMAPS) == policy.attempts
    assert len(sleeps) == policy.attempts - 1


# ---- anything else: surfaces at once ----------------------------------------------------------


@pytest.mark.parametrize("status", [400, 403, 422])
def test_a_non_transient_error_is_not_retried(kube, backend, sleeps, status) -> None:
    with kube.fail("POST", f"^{CONFIGMAPS}$", status), pytest.raises(BackendError) as err:
        backend.apply(configmap("cm"))
    assert not isinstance(err.value, TransientBackendError)
    assert f"HTTP {status}" in str(err.value)
    assert calls(kube, "POST", CONFIGMAPS) == 1
    assert sleeps == []


def test_answers_that_are_not_errors_are_not_retried(kube, backend, sleeps) -> None:
    assert backend.delete("ConfigMap", "absent", NS) is False  # 404 on delete: nothing to delete
    assert backend.workload_status("Job", "absent", NS).phase == "NotFound"
    kube.seed_pod("guarded", node="a-1")
    kube.block_eviction("guarded")
    assert backend.evict("guarded", NS) is False  # a PDB's 429: "not now", for the caller
    assert calls(kube, "POST", f"/api/v1/namespaces/{NS}/pods/guarded/eviction") == 1
    assert sleeps == []


# ---- the rule's parts -------------------------------------------------------------------------


def test_transient_statuses() -> None:
    assert {s for s in range(100, 700) if is_transient_status(s)} == {429, *range(500, 600)}


def test_parse_retry_after() -> None:
    now = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    assert parse_retry_after("30") == 30.0
    assert parse_retry_after(format_datetime(now + timedelta(seconds=90), usegmt=True), now) == 90
    assert parse_retry_after(format_datetime(now - timedelta(hours=1), usegmt=True), now) == 0
    assert parse_retry_after(None) is None
    assert parse_retry_after("soon") is None


@pytest.mark.parametrize(
    ("wrapper", "protocol"),
    [(RetryingClusterBackend, ClusterBackend), (RetryingCloudBackend, CloudBackend)],
)
def test_the_wrappers_cover_every_protocol_method(wrapper, protocol) -> None:
    # the protocol's own methods and those of the protocols it extends (CloudBackend extends
    # topology_api.ProviderTopology)
    methods = {
        n
        for cls in protocol.__mro__
        if getattr(cls, "_is_protocol", False) and cls.__module__.startswith("gpufleet.")
        for n, v in vars(cls).items()
        if not n.startswith("_") and callable(v)
    }
    assert methods and methods <= set(vars(wrapper))
    if protocol is CloudBackend:
        assert {"subblock_health", "report_faulty_subblock"} <= methods


def test_cluster_backend_wraps_the_kube_backend() -> None:
    from gpufleet.config.catalog import load_catalog
    from tests.support.fleet import ROOT

    cluster = load_catalog(ROOT / "include" / "fleet-examples").cluster("train-usc1")
    backend = cluster_backend(cluster)
    assert isinstance(backend, RetryingClusterBackend) and isinstance(backend, ClusterBackend)
    assert isinstance(backend.inner, KubeClusterBackend)
    assert POOL_LABEL in backend.inner.pool_label_keys
