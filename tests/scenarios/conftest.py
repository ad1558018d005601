"""The backends the cloud scenarios run against, one adapter each (``tests/scenarios/clouds.py``):
``onboarding_cloud`` and ``transition_cloud`` are parametrized over GKE (the strict GCP fake)
and EKS (moto behind the AWS fake), each with kmock as the cluster. The simulated fleet's
stories stay with the sim end-to-end tests (``tests/test_onboarding_dag.py``,
``tests/test_transition_dag.py``, ``tests/test_transition_resume.py``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager

import pytest

from tests.scenarios import eks, gke
from tests.scenarios.clouds import CloudUnderTest
from tests.support.aws_fake import AwsFake
from tests.support.kube_emulator import KubeEmulator

BACKENDS = ["gke", "eks"]


@pytest.fixture(scope="module")
def kube(request) -> Iterator[KubeEmulator]:
    """kmock, one per test module (each test resets it)."""
    with KubeEmulator(conn_id=f"kmock_{request.module.__name__.rsplit('.', 1)[-1]}") as emulator:
        yield emulator


@pytest.fixture(scope="session")
def aws_server() -> Iterator[AwsFake]:
    """moto behind the AWS fake, started once for both scenario modules (about 6 s; each test
    resets it) when the first EKS scenario asks for it."""
    with AwsFake() as fake:
        yield fake


@pytest.fixture(scope="module", autouse=True)
def botocore_models_read_once() -> Iterator[None]:
    """Every boto3 session here (the EKS backend makes one per backend object, so one per task;
    moto's server others) reads botocore's service models from one cache instead of parsing
    them again: ec2's and the endpoints file are megabytes of JSON, about 6 s of a scenario."""
    with shared_botocore_loader_cache():
        yield


# botocore.loaders.Loader's cached reads (``@instance_cache``: one cache per Loader, so per
# session) -> their results, shared by every Loader of the same search paths and extras.
_BOTOCORE_READS: dict[tuple, object] = {}
_LOADER_METHODS = (
    "list_available_services",
    "determine_latest_version",
    "list_api_versions",
    "load_service_model",
    "load_data_with_path",
)


@contextmanager
def shared_botocore_loader_cache() -> Iterator[None]:
    """botocore's Loader caches what it reads per instance; here across instances too. The
    same objects a Loader already hands every client of its session, now handed to every
    session's: botocore treats them as read-only (a service model's SDK extras are merged once,
    where it is loaded, as before)."""
    from botocore.loaders import Loader

    originals = {name: Loader.__dict__[name] for name in _LOADER_METHODS}

    def shared(name: str, method: Callable) -> Callable:
        def read(self, *args, **kwargs):
            key = (name, tuple(self.search_paths), tuple(self.extras_types), args)
            key += tuple(sorted(kwargs.items()))
            if key not in _BOTOCORE_READS:
                _BOTOCORE_READS[key] = method(self, *args, **kwargs)
            return _BOTOCORE_READS[key]

        return read

    for name, method in originals.items():
        setattr(Loader, name, shared(name, method))
    try:
        yield
    finally:
        for name, method in originals.items():
            setattr(Loader, name, method)


@pytest.fixture(params=BACKENDS)
def onboarding_cloud(
    request, airflow_db, fleet_state, tmp_path, monkeypatch, kube
) -> Iterator[CloudUnderTest]:
    """The backend's example region as the only catalog region, nothing created yet."""
    if request.param == "gke":
        with gke.onboarding(tmp_path, monkeypatch, kube) as cloud:
            yield cloud
    else:
        aws = request.getfixturevalue("aws_server")
        with eks.onboarding(tmp_path, monkeypatch, kube, aws) as cloud:
            yield cloud


@pytest.fixture(params=BACKENDS)
def transition_cloud(
    request, fleet_state, tmp_path, monkeypatch, kube
) -> Iterator[Callable[..., CloudUnderTest]]:
    """``start(short=False)``: the backend's region with the old pool in service and a planned
    pool on a second reservation (``short``: the reservation lacks room for the pool)."""
    aws = request.getfixturevalue("aws_server") if request.param == "eks" else None
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
