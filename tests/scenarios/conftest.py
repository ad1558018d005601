"""The backends the cloud scenarios run against, one adapter each (``tests/scenarios/clouds.py``):
``onboarding_cloud`` and ``transition_cloud`` are parametrized over GKE (the strict GCP fake)
and EKS (moto behind the AWS fake), each with kmock as the cluster. The simulated fleet's
stories stay with the sim end-to-end tests (``tests/test_onboarding_dag.py``,
``tests/test_transition_dag.py``, ``tests/services/infrastructure/test_transition_resume.py``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack

import pytest

from tests.scenarios import eks, gke
from tests.scenarios.clouds import CloudUnderTest
from tests.support.kube_emulator import KubeEmulator

BACKENDS = ["gke", "eks"]


@pytest.fixture(scope="module")
def kube(request) -> Iterator[KubeEmulator]:
    """kmock, one per test module (each test resets it)."""
    with KubeEmulator(conn_id=f"kmock_{request.module.__name__.rsplit('.', 1)[-1]}") as emulator:
        yield emulator


@pytest.fixture(params=BACKENDS)
def onboarding_cloud(
    request, airflow_db, fleet_state, tmp_path, monkeypatch, kube
) -> Iterator[CloudUnderTest]:
    """The backend's example region as the only catalog region, nothing created yet."""
    if request.param == "gke":
        with gke.onboarding(tmp_path, monkeypatch, kube) as cloud:
            yield cloud
    else:
        aws = request.getfixturevalue("aws")
        with eks.onboarding(tmp_path, monkeypatch, kube, aws) as cloud:
            yield cloud


@pytest.fixture(params=BACKENDS)
def transition_cloud(
    request, fleet_state, tmp_path, monkeypatch, kube
) -> Iterator[Callable[..., CloudUnderTest]]:
    """``start(short=False)``: the backend's region with the old pool in service and a planned
    pool on a second reservation (``short``: the reservation lacks room for the pool)."""
    aws = request.getfixturevalue("aws") if request.param == "eks" else None
    with ExitStack() as stack:

        def start(short: bool = False) -> CloudUnderTest:
            if aws is None:
                return stack.enter_context(gke.transition(tmp_path, monkeypatch, kube, short))
            return stack.enter_context(eks.transition(tmp_path, monkeypatch, kube, aws, short))

        yield start


@pytest.fixture
def gke_transition(fleet_state, tmp_path, monkeypatch, kube) -> Iterator[gke.GkeCloud]:
    """The GKE region with the old pool in service and room on the new reservation."""
    with gke.transition(tmp_path, monkeypatch, kube) as cloud:
        yield cloud
