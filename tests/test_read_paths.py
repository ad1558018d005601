"""The read paths read the ledger only (issue 18): the fleet and pool pages, their JSON twins,
``/metrics`` and ``gpufleet status`` show each pool's nodes from the node snapshot the last
validation recorded, and never call a cluster, even when every cluster would refuse."""

from __future__ import annotations

import json
import sys

import pytest

from gpufleet.backends.base import ClusterBackend
from gpufleet.store import Ledger
from tests.support.fleet import validate
from tests.test_metrics import samples
from tests.test_ui import auth, auth_manager, rows, token  # noqa: F401 - fixtures

CLUSTER, POOL = "a3u-sim", "h200-a"
METRICS_TOKEN = "scrape-token"


class ClusterCalled(AssertionError):
    pass


def _refuse(*args, **kwargs):
    raise ClusterCalled("a read path called a cluster")


def _every_subclass(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _every_subclass(sub)


@pytest.fixture
def no_cluster(monkeypatch):
    """From here on, building a cluster backend or asking one anything raises (not a
    GpufleetError: nothing may catch it as an unreachable cluster)."""
    import gpufleet.backends as backends

    original = backends.cluster_backend
    for module in [m for name, m in sys.modules.items() if name.startswith("gpufleet")]:
        if getattr(module, "cluster_backend", None) is original:
            monkeypatch.setattr(module, "cluster_backend", _refuse)
    for cls in [ClusterBackend, *_every_subclass(ClusterBackend)]:
        for method in ("list_nodes", "list_pods", "get", "apply"):
            if method in vars(cls):
                monkeypatch.setattr(cls, method, _refuse)


@pytest.fixture
def validated(airflow_db, fleet_state):
    """A real validation of a3u-sim/h200-a: its verdicts and its node snapshot."""
    assert validate(CLUSTER, POOL, run_id="night-1")["passed"]
    return Ledger()


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
    api = client.get("/gpufleet/api/fleet", headers=auth(token)).json()
    (pool,) = [p for p in api["pools"] if p["key"] == f"{CLUSTER}/{POOL}"]
    assert (pool["nodes"], pool["nodes_ready"], pool["free"], pool["quarantined"]) == (6, 6, 6, 0)
    assert pool["nodes_seen_at"]
    assert client.get(f"/gpufleet/pools/{CLUSTER}/{POOL}", headers=auth(token)).status_code == 200

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

    from gpufleet.cli import main

    assert main(["status"]) == 0


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
    pool = client.get(f"/gpufleet/pools/{CLUSTER}/{POOL}", headers=auth(token))
    assert pool.status_code == 200 and f'data-node="{sick}" data-action="reboot"' in pool.text
    monkeypatch.setenv(
        "AIRFLOW_CONN_GPUFLEET_METRICS",
        json.dumps({"conn_type": "generic", "password": METRICS_TOKEN}),
    )
    scrape = client.get("/gpufleet/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    labels = (("action", "reboot"), ("cluster", CLUSTER), ("pool", POOL))
    assert samples(scrape.text)[("gpufleet_health_unhealthy_nodes", labels)] == 1

    from gpufleet.cli import main

    assert main(["status"]) == 0
    assert "HEALTH" in capsys.readouterr().out


def test_the_guard_itself_catches_a_read_that_lists_nodes(validated, no_cluster):
    """The guard is live: what the pages did before (list the cluster's nodes) raises."""
    from gpufleet.backends import cluster_backend
    from gpufleet.config.catalog import load_catalog

    with pytest.raises(ClusterCalled):
        cluster_backend(load_catalog().cluster(CLUSTER)).list_nodes(None)
