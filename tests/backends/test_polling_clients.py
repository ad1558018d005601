"""A trigger polling a real cluster keeps its clients (``polling_cluster_backend``): built once
per cluster per process, rebuilt when they are old or the catalog entry changed."""

from __future__ import annotations

from gpufleet.backends import POLLER_CLIENT_TTL_S, polling_cluster_backend
from gpufleet.config.catalog import load_catalog
from tests.support.fleet import ROOT


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_a_real_clusters_clients_are_kept_between_polls_until_they_are_old():
    cluster = load_catalog(ROOT / "include" / "fleet-examples").cluster("train-usc1")
    clock = Clock()
    first = polling_cluster_backend(cluster, clock)
    clock.t += POLLER_CLIENT_TTL_S - 1
    assert polling_cluster_backend(cluster, clock) is first
    clock.t += 2
    renewed = polling_cluster_backend(cluster, clock)
    assert renewed is not first
    assert polling_cluster_backend(cluster, clock) is renewed


def test_a_changed_catalog_entry_gets_new_clients():
    cluster = load_catalog(ROOT / "include" / "fleet-examples").cluster("train-usc1")
    clock = Clock()
    first = polling_cluster_backend(cluster, clock)
    moved = cluster.model_copy(update={"location": "us-east4"})
    assert polling_cluster_backend(moved, clock) is not first


def test_a_sim_cluster_is_built_afresh(fleet_state):
    cluster = load_catalog().cluster("a3u-sim")
    clock = Clock()
    assert polling_cluster_backend(cluster, clock) is not polling_cluster_backend(cluster, clock)
