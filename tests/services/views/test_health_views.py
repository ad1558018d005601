"""GPU health where it shows (issue 20, item 5): the nightly's ``health`` rows in the readiness
table (``gpufleet status``), the fleet and pool pages, ``/metrics`` and the nightly report, read
from the ledger; a pool never checked shows "not checked"; the validation cost adds the health
check's GPU-minutes to fabric and storage."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpufleet.config.catalog import load_catalog
from gpufleet.store import Ledger
from tests.services.views.test_metrics import at, samples
from tests.support.ledger_builder import LedgerBuilder
from tests.test_ui import auth, auth_manager, rows, token  # noqa: F401 - fixtures

CLUSTER, SICK, UNCHECKED = "a3u-sim", "h200-a", "h200-b"
ONLY_HEALTH = ("p5-sim", "h100-a")  # a pool whose only row is a passing health check
RUN = "scheduled__night-7"
SICK_NODES = {
    "a3u-sim-h200-a-1": {
        "level": 2,
        "action": "reboot",
        "reasons": ["Xid 79 on GPU 3 (GPU has fallen off the bus): NVIDIA: RESTART_BM"],
        "notes": [],
    },
    "a3u-sim-h200-a-4": {
        "level": 1,
        "action": "repair",
        "reasons": ["row remapping failed on GPU 0: an RMA condition"],
        "notes": ["nvlink: 2 replay errors on link 5"],
    },
}


def health_details(nodes: dict, levels: dict, minutes: float, count: int) -> dict:
    every = {f"a3u-sim-h200-a-{i}": {"level": 1, "action": "healthy", "reasons": [], "notes": []}
             for i in range(count)}  # fmt: skip
    return {
        "levels": levels,
        "nodes": {**every, **nodes},
        "gpu_minutes": minutes,
        "cost_nodes": count,
        "gpu_minutes_per_node": round(minutes / count, 3),
    }


def record_night(ledger: Ledger, now: datetime) -> None:
    """Tonight: h200-a's fabric and Lustre pass (12 + 3 GPU-minutes per node) and its health
    check finds two nodes unhealthy (1.5 per node); h200-b is validated but its GPUs were never
    checked; h100-a has only a passing health check."""
    night = LedgerBuilder(ledger).night(
        RUN, started_at=now - timedelta(minutes=40), finished_at=now
    )
    night.pool(CLUSTER, SICK).fabric(
        True,
        transport="gib",
        expected_transport="gib",
        busbw_gbps=351.0,
        baseline_gbps=355.0,
        nodes_tested=6,
        details={"gpu_minutes": 72.0, "cost_nodes": 6, "gpu_minutes_per_node": 12.0},
    ).storage(
        True,
        read_mb_s=19000.0,
        write_mb_s=17000.0,
        expected_mb_s=18000.0,
        details={"gpu_minutes": 18.0, "cost_nodes": 6, "gpu_minutes_per_node": 3.0},
    ).health(
        False,
        nodes_tested=6,
        reasons=[f"{node}: {entry['reasons'][0]}" for node, entry in SICK_NODES.items()],
        details=health_details(SICK_NODES, {"1": 6, "2": 1}, 9.0, 6),
    )
    cost = {"gpu_minutes": 8.0, "cost_nodes": 4, "gpu_minutes_per_node": 2.0}
    night.pool(CLUSTER, UNCHECKED).fabric(
        True,
        transport="gib",
        expected_transport="gib",
        busbw_gbps=352.0,
        details=cost,
    ).storage(True, read_mb_s=19000.0, details=cost)
    night.pool(*ONLY_HEALTH).health(
        True, nodes_tested=5, details=health_details({}, {"1": 4, "3": 1}, 5.0, 5)
    )
    night.nodes()


@pytest.fixture
def night(airflow_db, fleet_state) -> Ledger:
    ledger = Ledger()
    record_night(ledger, datetime.now(UTC) - timedelta(hours=3))
    return ledger


@pytest.fixture
def client(night):
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from gpufleet.airflow.ui.app import create_app

    root = FastAPI()  # mounted as the api-server mounts plugin apps
    root.mount("/gpufleet", create_app())
    return TestClient(root)


def test_the_readiness_table_shows_health_beside_fabric_and_lustre(night):
    from gpufleet.cli.status_cmd import readiness_rows
    from gpufleet.services.views.fleet import fleet_cost, pool_readiness

    now = datetime.now(UTC)
    table = {r["POOL"]: r for r in readiness_rows(load_catalog(), night, now)}
    cols = list(table[f"{CLUSTER}/{SICK}"])
    assert cols.index("HEALTH") == cols.index("LUSTRE") + 1
    assert table[f"{CLUSTER}/{SICK}"]["HEALTH"] == (
        "FAIL L1+L2 2/6 unhealthy (1 repair, 1 reboot) 3h ago"
    )
    assert table[f"{CLUSTER}/{UNCHECKED}"]["HEALTH"] == "not checked"
    assert table["p5-sim/h100-a"]["HEALTH"] == "pass L1+L3 5 nodes 3h ago"
    assert table["a3u-euw4-sim/h200-eu"]["HEALTH"] == "not checked"  # never onboarded
    pools = {p["key"]: p for p in pool_readiness(load_catalog(), night, now)}
    sick = pools[f"{CLUSTER}/{SICK}"]["health"]
    assert (sick["verdict"], sick["levels"], sick["nodes_checked"], sick["unhealthy"]) == (
        "FAIL", {1: 6, 2: 1}, 6, 2)  # fmt: skip
    assert sick["actions"] == {"repair": 1, "reboot": 1}  # most severe first
    assert [n["node"] for n in sick["nodes"]] == ["a3u-sim-h200-a-4", "a3u-sim-h200-a-1"]
    assert pools[f"{CLUSTER}/{UNCHECKED}"]["health"] is None
    # the health check informs; the gate's rules decide whether the pool is ready
    assert pools[f"{CLUSTER}/{UNCHECKED}"]["why"] == pools[f"{CLUSTER}/{SICK}"]["why"]
    # the cost: fabric 12 + Lustre 3 + health 1.5 GPU-minutes per node
    assert pools[f"{CLUSTER}/{SICK}"]["gpu_minutes_per_node"] == pytest.approx(16.5)
    assert pools[f"{CLUSTER}/{UNCHECKED}"]["gpu_minutes_per_node"] == pytest.approx(4.0)
    assert pools["p5-sim/h100-a"]["gpu_minutes_per_node"] == pytest.approx(1.0)
    cost = fleet_cost(pools.values())
    assert cost["pools_reporting"] == 3 and cost["nodes"] == 6 + 4 + 5
    assert cost["gpu_minutes_total"] == pytest.approx(72 + 18 + 9 + 16 + 5)


def test_the_fleet_page_has_a_health_column_and_counts_its_cost(client, token):  # noqa: F811
    r = client.get("/gpufleet/fleet", headers=auth(token))
    assert r.status_code == 200
    assert "<th>GPU health</th>" in r.text
    table = {row["attrs"]["data-pool"]: row["cells"] for row in rows(r.text, "fleet", "data-pool")}
    sick = table[f"{CLUSTER}/{SICK}"]
    assert sick["health bad"].startswith("FAIL L1+L2 2/6 unhealthy (1 repair, 1 reboot)")
    assert sick["cost"] == "16.5"
    assert table[f"{CLUSTER}/{UNCHECKED}"]["health"] == "not checked"
    assert table["p5-sim/h100-a"]["health"].startswith("pass L1+L3 5 nodes")
    data = client.get("/gpufleet/api/fleet", headers=auth(token)).json()
    pools = {p["key"]: p for p in data["pools"]}
    assert pools[f"{CLUSTER}/{SICK}"]["health"]["actions"] == {"repair": 1, "reboot": 1}
    assert pools[f"{CLUSTER}/{UNCHECKED}"]["health"] is None
    assert data["cost"]["gpu_minutes_total"] == pytest.approx(120.0)


def test_the_pool_page_lists_each_unhealthy_node_with_its_action_and_reason(client, token):  # noqa: F811
    r = client.get(f"/gpufleet/pools/{CLUSTER}/{SICK}", headers=auth(token))
    assert r.status_code == 200
    assert '<p id="health" data-verdict="FAIL">' in r.text
    assert "level 1 on 6, level 2 on 1" in r.text and "2 unhealthy: 1 repair, 1 reboot" in r.text
    sick = rows(r.text, "unhealthy-nodes", "data-node")
    assert [(n["attrs"]["data-node"], n["attrs"]["data-action"]) for n in sick] == [
        ("a3u-sim-h200-a-4", "repair"),
        ("a3u-sim-h200-a-1", "reboot"),
    ]
    assert "row remapping failed on GPU 0" in r.text and "Xid 79 on GPU 3" in r.text
    assert "nvlink: 2 replay errors on link 5" in r.text  # a note of an unhealthy node
    assert "a3u-sim-h200-a-0" not in r.text.split('id="unhealthy-nodes"')[1].split("</table>")[0]
    assert f"/dags/nightly_fabric_validation/runs/{RUN}" in r.text
    api = client.get(f"/gpufleet/api/pools/{CLUSTER}/{SICK}", headers=auth(token)).json()
    (tonight,) = api["nights"]
    assert tonight["health_verdict"] == "FAIL" and tonight["passed"] is False
    assert tonight["gpu_minutes_per_node"] == pytest.approx(16.5)
    assert any(reason.startswith("a3u-sim-h200-a-1: Xid 79") for reason in tonight["reasons"])
    # a pool never checked: said so, not an error
    r = client.get(f"/gpufleet/pools/{CLUSTER}/{UNCHECKED}", headers=auth(token))
    assert r.status_code == 200
    assert '<p id="health" data-verdict="not checked"' in r.text
    assert 'id="unhealthy-nodes"' not in r.text
    # a night with nothing but a health check is a night
    r = client.get("/gpufleet/api/pools/p5-sim/h100-a", headers=auth(token))
    assert r.status_code == 200
    (only,) = r.json()["nights"]
    assert (only["health_verdict"], only["verdict"], only["passed"]) == ("pass", None, True)


def test_metrics_count_unhealthy_nodes_by_action(night):
    from gpufleet.airflow.ui.metrics import exposition

    got = samples(exposition(load_catalog(), night).decode())
    assert got[("gpufleet_validation_passed", at(SICK, kind="health"))] == 0
    assert got[("gpufleet_validation_passed", at("h100-a", cluster="p5-sim", kind="health"))] == 1
    assert got[("gpufleet_validation_error", at(SICK, kind="health"))] == 0
    assert 10700 < got[("gpufleet_validation_age_seconds", at(SICK, kind="health"))] < 11000
    assert got[("gpufleet_validation_gpu_minutes", at(SICK, kind="health"))] == 9.0
    assert got[("gpufleet_validation_gpu_minutes_per_node", at(SICK, kind="health"))] == 1.5
    assert got[("gpufleet_health_nodes_checked", at(SICK))] == 6
    assert got[("gpufleet_health_level_nodes", at(SICK, level="1"))] == 6
    assert got[("gpufleet_health_level_nodes", at(SICK, level="2"))] == 1
    unhealthy = {
        dict(labels)["action"]: value
        for (name, labels), value in got.items()
        if name == "gpufleet_health_unhealthy_nodes" and dict(labels)["pool"] == SICK
    }
    # issue 31: a check that could not run is counted beside the actions (none here)
    assert unhealthy == {
        "could_not_run": 0,
        "reset_gpu": 0,
        "reboot": 1,
        "needs_human": 0,
        "repair": 1,
    }
    # not checked: no health series at all (absent, not a failure)
    assert not [
        key for key in got if dict(key[1]).get("pool") == UNCHECKED and "health" in str(key)
    ]
    # a health row is not a Lustre row
    assert ("gpufleet_lustre_read_mb_s", at("h100-a", cluster="p5-sim")) not in got


def test_the_nightly_report_has_a_health_section_and_counts_its_cost(night):
    from gpufleet.services.views.pool import run_report

    report = run_report(night, load_catalog(), RUN)
    md = report["markdown"]
    assert "## GPU health (dcgmi diag and each node's signals)" in md
    assert (
        "| a3u-sim/h200-a | FAIL | L1+L2 | 6 | 2 | 1 repair, 1 reboot | a3u-sim-h200-a-1: Xid 79"
    ) in md
    assert "| p5-sim/h100-a | PASS | L1+L3 | 5 | 0 | - |  |" in md
    assert "**5 of 6 checks passed.**" in md
    # fabric 12 + Lustre 3 + health 1.5 per node
    assert "| a3u-sim/h200-a | 99.0 | 16.50 |" in md
    assert "| p5-sim/h100-a | 5.0 | 1.00 |" in md
    assert "(120.0 GPU-minutes over 15 nodes)" in md
    html = report["html"]
    assert '<table id="health">' in html and "1 repair, 1 reboot" in html


def test_a_health_check_that_could_not_finish_and_malformed_details(night):
    from gpufleet.airflow.ui.metrics import exposition
    from gpufleet.cli.status_cmd import readiness_rows
    from gpufleet.services.views.pool import pool_view

    night.record_validation_error(RUN, CLUSTER, UNCHECKED, "health", "dcgmi: not found")
    night.record_validation(
        run_id=RUN,
        cluster=ONLY_HEALTH[0],
        pool=ONLY_HEALTH[1],
        kind="health",
        passed=False,
        started_at=datetime.now(UTC),
        nodes_tested=-3,
        details={"levels": ["1"], "nodes": {"x": "reboot", "y": {"action": "needs_human"}}},
    )
    now = datetime.now(UTC)
    table = {r["POOL"]: r for r in readiness_rows(load_catalog(), night, now)}
    assert table[f"{CLUSTER}/{UNCHECKED}"]["HEALTH"] == "ERROR 0m ago"
    assert table["p5-sim/h100-a"]["HEALTH"] == "FAIL - 1/? unhealthy (1 needs_human) 0m ago"
    view = pool_view(load_catalog(), night, CLUSTER, UNCHECKED)
    assert view["health"]["verdict"] == "ERROR" and view["health"]["reasons"] == [
        "dcgmi: not found"
    ]
    got = samples(exposition(load_catalog(), night).decode())
    assert got[("gpufleet_validation_error", at(UNCHECKED, kind="health"))] == 1
    assert not [k for k in got if k[0].startswith("gpufleet_health_") and "h200-b" in str(k)]
    assert got[("gpufleet_health_unhealthy_nodes", at("h100-a", "p5-sim", action="needs_human"))]
    assert ("gpufleet_health_nodes_checked", at("h100-a", cluster="p5-sim")) not in got
