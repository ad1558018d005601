"""Fixtures for the manifest tests: pools of both provider shapes, from the sim fleet and from
the real-provider examples."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.config.catalog import load_catalog
from gpufleet.domain.fleet import PoolRef

ROOT = Path(__file__).resolve().parents[2]

# (catalog folder, cluster, pool): a GKE-shaped and an EKS-shaped pool from each
POOLS = {
    "sim-gke": ("include/fleet", "a3u-sim", "h200-a"),
    "sim-eks": ("include/fleet", "p5-sim", "h100-a"),
    "example-gke": ("include/fleet-examples", "train-usc1", "a3u-pool-1"),
    "example-eks": ("include/fleet-examples", "train-use1", "p5-cb-1"),
}


def pool_ref(key: str) -> PoolRef:
    folder, cluster, pool = POOLS[key]
    return load_catalog(ROOT / folder).pool(cluster, pool)


@pytest.fixture(params=sorted(POOLS))
def ref(request: pytest.FixtureRequest) -> PoolRef:
    """Each pool in turn: sim and example, GKE and EKS shapes."""
    return pool_ref(request.param)


@pytest.fixture
def gke_ref() -> PoolRef:
    return pool_ref("sim-gke")


@pytest.fixture
def eks_ref() -> PoolRef:
    return pool_ref("sim-eks")
