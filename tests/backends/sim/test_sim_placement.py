"""Placement in the simulated fleet: a GPU pod takes a node no other GPU pod holds; a pod that
requests no GPU (a storage check's fio client) is placed beside one, as Kubernetes places it,
so a pool's storage check and its fabric pairs can run in one nightly at once."""

from __future__ import annotations

from gpufleet.backends import cluster_backend
from gpufleet.config.catalog import load_catalog
from gpufleet.domain.workloads import workload_selector
from gpufleet.manifests.nccl_validation import render_nccl_validation
from gpufleet.manifests.storage_validation import render_storage_validation

CLUSTER, POOL = "a3u-sim", "h200-a"


def phases(backend, manifest) -> list[tuple[str | None, str]]:
    meta = manifest["metadata"]
    pods = backend.list_pods(meta["namespace"], workload_selector(manifest["kind"], meta["name"]))
    return sorted((p.node, p.phase) for p in pods)


def test_fio_goes_beside_an_nccl_pair_and_a_second_pair_waits(fleet_state):
    ref = load_catalog().pool(CLUSTER, POOL)
    backend = cluster_backend(ref.cluster)
    nodes = [n.name for n in backend.list_nodes(POOL)][:2]
    pair = render_nccl_validation(ref, [tuple(nodes)], "night-1")
    backend.apply(pair)
    assert all(node in nodes for node, _ in phases(backend, pair))
    fio = render_storage_validation(ref, nodes, "night-1")  # pinned to the pair's nodes
    backend.apply(fio)
    assert sorted(node for node, _ in phases(backend, fio)) == sorted(nodes)  # placed
    again = render_nccl_validation(ref, [tuple(nodes)], "night-2")  # GPUs still held
    backend.apply(again)
    assert [node for node, _ in phases(backend, again)] == [None, None]  # not placed
