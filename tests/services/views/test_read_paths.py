"""The read paths read the ledger only (issue 18): the fleet and pool pages, their JSON twins,
``/metrics`` and ``gpufleet status`` show each pool's nodes from the node snapshot the last
validation recorded, and never call a cluster: every attempt to reach one (a backend built or
asked, a cloud or Kubernetes API call) is recorded, then refused, and each read path must leave
the record empty; refusing alone proves nothing, since ``gather_facts`` takes any exception as
"nodes not listed" (issue 32). The run's report and the JSON twins are read the same way. The
launch gate is not a read path: it lists the nodes it decides on (and is recorded doing so)."""

from __future__ import annotations

import json
import sys

import pytest

from gpufleet.store import Ledger
from tests.services.views.test_metrics import samples
from tests.support.cluster_calls import ClusterCalled, cluster_calls_refused
from tests.support.fleet import validate
from tests.test_ui import auth, auth_manager, rows, token  # noqa: F401 - fixtures

CLUSTER, POOL = "a3u-sim", "h200-a"
METRICS_TOKEN = "scrape-token"


@pytest.fixture
def validated(airflow_db, fleet_state):
    """A real validation of a3u-sim/h200-a: its verdicts and its node snapshot."""
    assert validate(CLUSTER, POOL, run_id="night-1")["passed"]
    return Ledger()


@pytest.fixture
def no_cluster(validated):
    """From here on (the validation done), every attempt to build a cluster backend, ask one
    anything or call a cloud or Kubernetes API is recorded, then refused
    (``tests/support/cluster_calls``). A read path must leave the record empty: refusing
    alone would not do, since ``gather_facts`` takes any exception as "nodes not listed"."""
    with cluster_calls_refused() as calls:
        yield calls


def test_a_validation_records_the_pools_node_snapshot(validated):
    snap = validated.node_snapshots(CLUSTER)[(CLUSTER, POOL)]
    assert (snap["nodes"], snap["ready"], snap["free"], snap["quarantined"], snap["busy"]) == (
        6, 6, 6, 0, 0)  # fmt: skip
    assert snap["run_id"] == "night-1" and snap["source"] in ("fabric", "storage")
    assert sorted(d["name"] for d in snap["detail"]) == [f"a3u-sim-h200-a-{i}" for i in range(6)]


def test_pages_metrics_and_status_never_call_a_cluster(validated, token, no_cluster, monkeypatch):  # noqa: F811
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from gpufleet.airflow.ui.app import create_app

    root = FastAPI()  # mounted as the api-server mounts plugin apps
    root.mount("/gpufleet", create_app())
    client = TestClient(root)
    page = client.get("/gpufleet/fleet", headers=auth(token))
    assert page.status_code == 200, page.text
    (row,) = [
        r
        for r in rows(page.text, "fleet", "data-pool")
        if r["attrs"]["data-pool"] == f"{CLUSTER}/{POOL}"
    ]
    assert row["attrs"]["data-ready"] == "yes"
    assert no_cluster.take() == [], "the fleet page"
    api = client.get("/gpufleet/api/fleet", headers=auth(token)).json()
    (pool,) = [p for p in api["pools"] if p["key"] == f"{CLUSTER}/{POOL}"]
    assert (pool["nodes"], pool["nodes_ready"], pool["free"], pool["quarantined"]) == (6, 6, 6, 0)
    assert pool["nodes_seen_at"]
    assert no_cluster.take() == [], "/api/fleet"
    assert client.get(f"/gpufleet/pools/{CLUSTER}/{POOL}", headers=auth(token)).status_code == 200
    assert no_cluster.take() == [], "the pool page"
    api_pool = client.get(f"/gpufleet/api/pools/{CLUSTER}/{POOL}", headers=auth(token))
    assert api_pool.status_code == 200, api_pool.text
    assert no_cluster.take() == [], "/api/pools"
    report = client.get("/gpufleet/runs/night-1/report", headers=auth(token))
    assert report.status_code == 200 and f"{CLUSTER}/{POOL}" in report.text
    assert no_cluster.take() == [], "the run's report"

    monkeypatch.setenv(
        "AIRFLOW_CONN_GPUFLEET_METRICS",
        json.dumps({"conn_type": "generic", "password": METRICS_TOKEN}),
    )
    scrape = client.get("/gpufleet/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    assert scrape.status_code == 200, scrape.text
    ready = {
        dict(labels)["pool"]: value
        for (name, labels), value in samples(scrape.text).items()
        if name == "gpufleet_pool_ready" and dict(labels)["cluster"] == CLUSTER
    }
    assert ready[POOL] == 1
    assert no_cluster.take() == [], "/metrics"

    from gpufleet.cli import main

    assert main(["status"]) == 0
    assert no_cluster.take() == [], "gpufleet status"


def test_gpu_health_shows_from_the_ledger_only(validated, token, no_cluster, monkeypatch, capsys):  # noqa: F811
    """The health rows (issue 20) beside fabric and storage: the same read paths, no cluster."""
    from datetime import UTC, datetime

    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from gpufleet.airflow.ui.app import create_app

    sick = f"{CLUSTER}-{POOL}-2"
    validated.record_validation(
        run_id="night-1",
        cluster=CLUSTER,
        pool=POOL,
        kind="health",
        passed=False,
        started_at=datetime.now(UTC),
        nodes_tested=6,
        reasons=[f"{sick}: Xid 79 on GPU 1"],
        details={
            "levels": {"1": 6},
            "nodes": {sick: {"level": 1, "action": "reboot", "reasons": ["Xid 79 on GPU 1"]}},
        },
    )
    root = FastAPI()
    root.mount("/gpufleet", create_app())
    client = TestClient(root)
    page = client.get("/gpufleet/fleet", headers=auth(token))
    cells = {r["attrs"]["data-pool"]: r["cells"] for r in rows(page.text, "fleet", "data-pool")}
    assert cells[f"{CLUSTER}/{POOL}"]["health bad"].startswith("FAIL L1 1/6 unhealthy (1 reboot)")
    assert cells[f"{CLUSTER}/h200-b"]["health"] == "not checked"
    assert no_cluster.take() == [], "the fleet page"
    pool = client.get(f"/gpufleet/pools/{CLUSTER}/{POOL}", headers=auth(token))
    assert pool.status_code == 200 and f'data-node="{sick}" data-action="reboot"' in pool.text
    assert no_cluster.take() == [], "the pool page"
    monkeypatch.setenv(
        "AIRFLOW_CONN_GPUFLEET_METRICS",
        json.dumps({"conn_type": "generic", "password": METRICS_TOKEN}),
    )
    scrape = client.get("/gpufleet/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    labels = (("action", "reboot"), ("cluster", CLUSTER), ("pool", POOL))
    assert samples(scrape.text)[("gpufleet_health_unhealthy_nodes", labels)] == 1
    assert no_cluster.take() == [], "/metrics"

    from gpufleet.cli import main

    assert main(["status"]) == 0
    assert "HEALTH" in capsys.readouterr().out
    assert no_cluster.take() == [], "gpufleet status"


def test_the_guard_records_a_node_listing_that_gather_facts_swallows(validated, no_cluster):
    """What a raising guard missed: ``gather_facts`` asked to list the nodes (as the pages did
    before issue 18) takes the refusal as "nodes not listed", and the record still has it."""
    from gpufleet.config.catalog import load_catalog
    from gpufleet.services.launch.gate import gather_facts

    (facts,) = gather_facts(load_catalog(), validated, CLUSTER, [POOL])
    assert facts.error and facts.error.startswith("cannot list nodes: "), facts.error
    (call,) = no_cluster.take()
    assert call.startswith("cluster_backend() from gpufleet/services/launch/gate.py:")
    assert no_cluster.take() == []


def test_the_guard_records_a_backend_built_before_it(validated):
    """A backend kept from before the guard (a poller's, say) is recorded when asked, and so is
    one built directly, round the factory."""
    from gpufleet.backends import cluster_backend
    from gpufleet.backends.sim.cluster import SimClusterBackend
    from gpufleet.config.catalog import load_catalog

    cluster = load_catalog().cluster(CLUSTER)
    kept = cluster_backend(cluster)
    with cluster_calls_refused() as calls:
        with pytest.raises(ClusterCalled):
            kept.list_nodes(None)
        with pytest.raises(ClusterCalled):
            SimClusterBackend(cluster)
    assert [c.split(" from ")[0] for c in calls.take()] == [
        "RetryingClusterBackend.list_nodes",
        "SimClusterBackend(...)",
    ]


def _kubernetes():
    from kubernetes.client import ApiClient

    ApiClient().call_api("/api/v1/nodes", "GET")


def _aws():
    import boto3

    eks = boto3.client(
        "eks", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    eks.list_clusters()


def _google_api():
    from google.api_core.gapic_v1.method import wrap_method

    wrap_method(lambda request: None)({})


def _google_rest():
    from google.auth.credentials import AnonymousCredentials
    from google.auth.transport.requests import AuthorizedSession

    AuthorizedSession(AnonymousCredentials()).request("GET", "http://127.0.0.1:9/")


@pytest.mark.parametrize(
    ("reach", "recorded"),
    [
        (_kubernetes, "kubernetes.client.ApiClient.call_api"),
        (_aws, "botocore.client.BaseClient._make_api_call"),
        (_google_api, "google.api_core.gapic_v1.method._GapicCallable.__call__"),
        (_google_rest, "google.auth.transport.requests.AuthorizedSession.request"),
    ],
    ids=["kubernetes", "aws", "google-api", "google-rest"],
)
def test_the_guard_records_a_cloud_or_kubernetes_call_round_the_backends(reach, recorded):
    """A read that goes round the backends, straight to an SDK, is recorded too (and never
    leaves this process: the call is refused before it is sent)."""
    with cluster_calls_refused() as calls, pytest.raises(ClusterCalled):
        reach()
    assert [c.split(" from ")[0] for c in calls.take()] == [recorded]


def test_the_guard_leaves_no_refusal_behind(monkeypatch):
    """A module first imported while the guard stands (as the fleet cache imports the gate)
    takes the refusal by name; leaving the guard puts the factory back there too, or every
    later test that lists nodes would be refused."""
    import types

    import gpufleet.backends as backends

    factory = backends.cluster_backend
    probe = types.ModuleType("gpufleet.read_paths_probe")
    monkeypatch.setitem(sys.modules, probe.__name__, probe)
    with cluster_calls_refused():
        exec("from gpufleet.backends import cluster_backend", probe.__dict__)  # noqa: S102
        assert probe.cluster_backend is not factory  # the refusal
    assert probe.cluster_backend is factory is backends.cluster_backend
