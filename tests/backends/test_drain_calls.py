"""The calls a node drain makes on a real cluster (``KubeClusterBackend`` over HTTP, kmock).

``pods_on_node`` lists every unfinished pod bound to the node in any namespace, with its
namespace and owner kind (DaemonSet pods must be recognisable: a drain leaves them), and
``evict`` answers False when a PodDisruptionBudget refuses (the API's 429). The emulator
filters ``fieldSelector`` as the API server does; assertions read what the emulator stored.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from gpufleet.backends.kube.cluster import KubeClusterBackend
from gpufleet.backends.retry import RetryingClusterBackend, RetryPolicy
from gpufleet.domain.workloads import POOL_LABEL
from tests.support.kube_emulator import KubeEmulator

CONN_ID = "kmock_drain_calls"
NS = "training"


@pytest.fixture(scope="module")
def kube() -> Iterator[KubeEmulator]:
    with KubeEmulator(conn_id=CONN_ID, namespace=NS) as emulator:
        yield emulator


@pytest.fixture
def backend(kube: KubeEmulator) -> KubeClusterBackend:
    kube.reset()
    return KubeClusterBackend(conn_id=CONN_ID, pool_label_keys=(POOL_LABEL,))


def owned_pod(
    kube: KubeEmulator, name: str, namespace: str, node: str, owner_kind: str, phase: str
) -> None:
    """A pod as a controller creates it: ``metadata.ownerReferences`` naming the controller."""
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app": name},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": owner_kind,
                    "name": f"{name}-owner",
                    "uid": f"uid-{name}",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "busybox"}]},
    }
    kube.core.create_namespaced_pod(namespace, body)
    kube.set_pod_phase(name, namespace, phase)


def test_pods_on_node_lists_that_nodes_unfinished_pods_in_every_namespace(
    kube: KubeEmulator, backend: KubeClusterBackend
) -> None:
    kube.seed_node("n1", "old")
    kube.seed_node("n2", "old")
    kube.seed_pod("w-0", NS, node="n1", labels={"jobset.sigs.k8s.io/jobset-name": "w"})
    kube.seed_pod("starting", NS, node="n1", phase="Pending")
    kube.seed_pod("done", NS, node="n1", phase="Succeeded")
    kube.seed_pod("crashed", NS, node="n1", phase="Failed")
    kube.seed_pod("elsewhere", NS, node="n2")
    kube.seed_pod("unbound", NS, phase="Pending")
    owned_pod(kube, "nccl-installer", "kube-system", "n1", "DaemonSet", "Running")
    owned_pod(kube, "web-abc", "apps", "n1", "ReplicaSet", "Running")

    pods = backend.pods_on_node("n1")

    assert [(p.namespace, p.name) for p in pods] == [
        ("apps", "web-abc"),
        ("kube-system", "nccl-installer"),
        (NS, "starting"),
        (NS, "w-0"),
    ]
    by_name = {p.name: p for p in pods}
    assert by_name["nccl-installer"].owner_kind == "DaemonSet"
    assert by_name["nccl-installer"].daemonset
    assert by_name["web-abc"].owner_kind == "ReplicaSet"
    assert not by_name["web-abc"].daemonset
    assert by_name["w-0"].owner_kind is None  # seeded bare
    assert by_name["w-0"].labels == {"jobset.sigs.k8s.io/jobset-name": "w"}
    assert {p.node for p in pods} == {"n1"}
    assert {p.phase for p in pods} == {"Running", "Pending"}

    (listing,) = [r for r in kube.requests() if r.url.path == "/api/v1/pods"]
    assert listing.params["fieldSelector"] == (
        "spec.nodeName=n1,status.phase!=Succeeded,status.phase!=Failed"
    )
    assert backend.pods_on_node("nowhere") == []


def test_list_pods_carries_namespace_and_owner_kind(
    kube: KubeEmulator, backend: KubeClusterBackend
) -> None:
    owned_pod(kube, "web-abc", "apps", "n1", "ReplicaSet", "Running")
    (pod,) = backend.list_pods(None, "app=web-abc")
    assert (pod.namespace, pod.owner_kind) == ("apps", "ReplicaSet")


def test_eviction_a_budget_refuses_returns_false_and_leaves_the_pod(
    kube: KubeEmulator, backend: KubeClusterBackend
) -> None:
    kube.seed_node("n1", "old")
    kube.seed_pod("guarded", NS, node="n1")
    kube.seed_pod("free", NS, node="n1")
    kube.block_eviction("guarded", NS)
    # through the retry wrapper, as services get it: a 429 from a PDB is an answer, not a retry
    waits: list[float] = []
    retrying = RetryingClusterBackend(backend, RetryPolicy(sleep=waits.append))

    assert retrying.evict("guarded", NS) is False
    assert kube.exists("v1/pods", NS, "guarded")
    assert retrying.evict("free", NS) is True
    assert not kube.exists("v1/pods", NS, "free")
    assert [p.name for p in retrying.pods_on_node("n1")] == ["guarded"]
    assert waits == []
    evictions = [r for r in kube.requests() if r.subresource == "eviction"]
    assert len(evictions) == 2  # one call each, no retry
