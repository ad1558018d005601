"""Kueue keeps a Topology's levels, and the spec of a ResourceFlavor naming one, immutable:
``ensure_object`` never tries to edit them. Against the real-cluster backend (the official client
over HTTP, kmock) and the simulated cluster: a same object is left alone, a differing one is
refused with an error naming it and nothing is written, a change Kueue allows still converges."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gpufleet.backends.kube.cluster import KubeClusterBackend
from gpufleet.domain.kueue import GKE_TOPOLOGY
from gpufleet.errors import BackendError
from tests.support.kube_emulator import KubeEmulator

CONN_ID = "kmock_kueue_immutable"
KUEUE = "kueue.x-k8s.io/v1beta1"
TOPOLOGY = {
    "apiVersion": KUEUE,
    "kind": "Topology",
    "metadata": {"name": GKE_TOPOLOGY.name, "labels": {"app.kubernetes.io/managed-by": "gpufleet"}},
    "spec": {"levels": [{"nodeLabel": level} for level in GKE_TOPOLOGY.levels]},
}
FLAVOR = {
    "apiVersion": KUEUE,
    "kind": "ResourceFlavor",
    "metadata": {"name": "gpufleet-h200-a"},
    "spec": {
        "nodeLabels": {"cloud.google.com/gke-nodepool": "h200-a"},
        "topologyName": GKE_TOPOLOGY.name,
    },
}


def changed(obj: dict[str, Any], edit: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    edit(out)
    return out


class Cluster:
    """One backend under test and a way to read back what it stores."""

    def __init__(self, backend: Any, stored: Callable[[str, str], dict | None], writes=None):
        self.backend, self.stored, self.writes = backend, stored, writes


@pytest.fixture(scope="module")
def emulator() -> Iterator[KubeEmulator]:
    with KubeEmulator(conn_id=CONN_ID, namespace="default") as kube:
        yield kube


@pytest.fixture(params=["kube", "sim"])
def cluster(request, emulator) -> Cluster:
    if request.param == "kube":
        emulator.reset()
        plural = {"Topology": "topologies", "ResourceFlavor": "resourceflavors"}

        def writes() -> list[str]:
            out = [r.method for r in emulator.requests() if r.method != "GET"]
            emulator.reset_requests()
            return out

        return Cluster(
            KubeClusterBackend(conn_id=CONN_ID),
            lambda kind, name: emulator.stored(f"{KUEUE}/{plural[kind]}", None, name),
            writes,
        )
    request.getfixturevalue("fleet_state")
    from gpufleet.backends import cluster_backend
    from gpufleet.config.catalog import load_catalog

    backend = cluster_backend(load_catalog().cluster("a3u-sim"))
    return Cluster(backend, lambda kind, name: backend.inner.get(kind, name))


def spec_of(cluster: Cluster, obj: dict) -> dict:
    return cluster.stored(obj["kind"], obj["metadata"]["name"])["spec"]


def test_a_topology_is_created_left_alone_and_never_edited(cluster: Cluster):
    assert cluster.backend.ensure_object(copy.deepcopy(TOPOLOGY)) == "created"
    assert cluster.backend.ensure_object(copy.deepcopy(TOPOLOGY)) == "unchanged"
    if cluster.writes:
        cluster.writes()
    fewer = changed(TOPOLOGY, lambda o: o["spec"]["levels"].pop(0))
    with pytest.raises(BackendError) as err:
        cluster.backend.ensure_object(fewer)
    message = str(err.value)
    assert message.startswith(f"Topology {GKE_TOPOLOGY.name} exists with another spec")
    assert "(spec.levels)" in message and "Delete it" in message
    assert spec_of(cluster, TOPOLOGY) == TOPOLOGY["spec"]  # nothing written
    if cluster.writes:
        assert cluster.writes() == []
    # its labels are not its spec: they still converge
    relabelled = changed(TOPOLOGY, lambda o: o["metadata"]["labels"].update(team="infra"))
    assert cluster.backend.ensure_object(relabelled) == "updated"


def test_a_flavor_naming_a_topology_is_never_edited(cluster: Cluster):
    assert cluster.backend.ensure_object(copy.deepcopy(FLAVOR)) == "created"
    if cluster.writes:
        cluster.writes()
    moved = changed(FLAVOR, lambda o: o["spec"]["nodeLabels"].update({"x.io/pool": "h200-c"}))
    with pytest.raises(BackendError, match=r"ResourceFlavor gpufleet-h200-a .*spec.nodeLabels"):
        cluster.backend.ensure_object(moved)
    assert spec_of(cluster, FLAVOR) == FLAVOR["spec"]
    if cluster.writes:
        assert cluster.writes() == []


def test_a_flavor_without_a_topology_gains_one_as_kueue_allows(cluster: Cluster):
    plain = changed(FLAVOR, lambda o: o["spec"].pop("topologyName"))
    assert cluster.backend.ensure_object(plain) == "created"
    assert cluster.backend.ensure_object(copy.deepcopy(FLAVOR)) == "updated"
    assert spec_of(cluster, FLAVOR)["topologyName"] == GKE_TOPOLOGY.name
