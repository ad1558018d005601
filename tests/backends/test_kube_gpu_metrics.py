"""KubeClusterBackend.gpu_metrics against the kube emulator over HTTP: the dcgm-exporter pod on
the node is found by its labels in any namespace and its /metrics read through the API server's
pod proxy (port 9400); no exporter is None; an exporter that cannot serve is an error."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpufleet.backends.base import ClusterBackend
from gpufleet.backends.kube.cluster import KubeClusterBackend
from gpufleet.backends.retry import RetryingClusterBackend, RetryPolicy
from gpufleet.backends.sim.dcgm_exporter import dcgm_exporter_metrics
from gpufleet.domain.faults import parse_fault
from gpufleet.errors import BackendError, TransientBackendError
from gpufleet.parsing.health import parse_dcgm_exporter
from tests.support.kube_emulator import KubeEmulator

CONN_ID = "kmock_gpu_metrics"
OPERATOR_NS = "gpu-operator"
OPERATOR = {"app": "nvidia-dcgm-exporter"}  # the GPU operator's DaemonSet pods
TEXT = 'DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-aaaa-0001"} 0\n'


@pytest.fixture(scope="module")
def kube() -> Iterator[KubeEmulator]:
    with KubeEmulator(conn_id=CONN_ID, namespace="training") as emulator:
        yield emulator


@pytest.fixture
def backend(kube: KubeEmulator) -> KubeClusterBackend:
    kube.reset()
    return KubeClusterBackend(conn_id=CONN_ID)


def exporter(kube: KubeEmulator, pod: str, node: str, text: str | None = TEXT, **kw) -> None:
    namespace = kw.pop("namespace", OPERATOR_NS)
    kube.seed_pod(pod, namespace, node=node, labels=kw.pop("labels", OPERATOR), **kw)
    if text is not None:
        kube.set_pod_proxy(pod, text, namespace)


def test_the_exporter_on_the_node_is_read_through_the_pod_proxy(kube, backend):
    exporter(kube, "nvidia-dcgm-exporter-7xk2p", "a-1")
    exporter(kube, "nvidia-dcgm-exporter-q9f4s", "a-2", text="other node\n")
    kube.seed_pod("trainer-0", node="a-1", labels={"app": "trainer"})
    kube.reset_requests()

    assert backend.gpu_metrics("a-1") == TEXT
    listed, proxied = kube.requests()
    assert listed.url.path == "/api/v1/pods"
    assert listed.params["labelSelector"] == "app=nvidia-dcgm-exporter"
    assert listed.params["fieldSelector"] == "spec.nodeName=a-1"
    assert proxied.url.path == (
        f"/api/v1/namespaces/{OPERATOR_NS}/pods/nvidia-dcgm-exporter-7xk2p:9400/proxy/metrics"
    )


def test_a_node_without_an_exporter_is_none(kube, backend):
    exporter(kube, "nvidia-dcgm-exporter-7xk2p", "a-1")
    kube.seed_pod("trainer-0", node="a-3", labels={"app": "trainer"})
    assert backend.gpu_metrics("a-3") is None
    assert backend.gpu_metrics("no-such-node") is None


def test_the_standalone_helm_charts_exporter_is_found_too(kube, backend):
    helm = {"app.kubernetes.io/name": "dcgm-exporter", "app.kubernetes.io/instance": "dcgm"}
    exporter(kube, "dcgm-exporter-h2x9d", "a-1", namespace="monitoring", labels=helm)
    assert backend.gpu_metrics("a-1") == TEXT


def test_a_running_exporter_is_preferred_to_one_still_starting(kube, backend):
    exporter(kube, "nvidia-dcgm-exporter-aaaaa", "a-1", text=None, phase="Pending")
    exporter(kube, "nvidia-dcgm-exporter-zzzzz", "a-1")
    assert backend.gpu_metrics("a-1") == TEXT


def test_an_exporter_that_is_not_running_is_an_error_naming_it(kube, backend):
    exporter(kube, "nvidia-dcgm-exporter-7xk2p", "a-1", text=None, phase="Pending",
             message="Unschedulable: 0/3 nodes are available")  # fmt: skip
    with pytest.raises(BackendError, match="nvidia-dcgm-exporter-7xk2p on node a-1 is Pending"):
        backend.gpu_metrics("a-1")


def test_an_exporter_whose_port_does_not_answer_is_a_transient_error(kube, backend):
    exporter(kube, "nvidia-dcgm-exporter-7xk2p", "a-1", text=None)
    with pytest.raises(TransientBackendError, match="port 9400.*503"):
        backend.gpu_metrics("a-1")


def test_the_retry_wrapper_passes_the_read_through_and_retries_it(kube, backend):
    exporter(kube, "nvidia-dcgm-exporter-7xk2p", "a-1")
    waits: list[float] = []
    retrying = RetryingClusterBackend(backend, RetryPolicy(sleep=waits.append))
    assert isinstance(retrying, ClusterBackend)
    with kube.fail("GET", r"/proxy/metrics$", 503, times=1):
        assert retrying.gpu_metrics("a-1") == TEXT
    assert len(waits) == 1
    assert retrying.gpu_metrics("a-3") is None


def test_what_the_sim_writes_travels_the_proxy_unchanged(kube, backend):
    """Exporter text with a fault in it, through the API server, back to the parser."""
    node = "a3u-sim-h200-a-1"
    text = dcgm_exporter_metrics(
        node, [parse_fault(f"nvlink-down:{node}")], gpu_model="H200", gpus=8
    )
    exporter(kube, "nvidia-dcgm-exporter-7xk2p", node, text=text)
    read = backend.gpu_metrics(node)
    assert read == text
    report = parse_dcgm_exporter(read)
    assert report.problems == () and report.hostname == node
    assert sum(link.down for gpu in report.gpus for link in gpu.links) == 1


# --- the event path's interval scrape (docs/events.md) -------------------------------------------


def test_one_list_finds_every_nodes_exporter_and_each_is_read_through_the_proxy(kube, backend):
    exporter(kube, "nvidia-dcgm-exporter-7xk2p", "a-1")
    exporter(kube, "nvidia-dcgm-exporter-q9f4s", "a-2", text="other node\n")
    exporter(kube, "nvidia-dcgm-exporter-aaaaa", "a-2", text=None, phase="Pending")
    kube.seed_pod("trainer-0", node="a-1", labels={"app": "trainer"})
    kube.reset_requests()

    pods = backend.dcgm_exporters()
    (listed,) = kube.requests()
    assert listed.url.path == "/api/v1/pods"
    assert listed.params["labelSelector"] == "app=nvidia-dcgm-exporter"
    assert "fieldSelector" not in listed.params  # the whole cluster, one call
    assert {n: p.name for n, p in pods.items()} == {
        "a-1": "nvidia-dcgm-exporter-7xk2p",
        "a-2": "nvidia-dcgm-exporter-q9f4s",  # the running one first
    }
    assert backend.exporter_metrics(pods["a-1"]) == TEXT
    assert backend.exporter_metrics(pods["a-2"]) == "other node\n"


def test_no_exporter_in_the_cluster_is_an_empty_map(kube, backend):
    kube.seed_pod("trainer-0", node="a-1", labels={"app": "trainer"})
    assert backend.dcgm_exporters() == {}
