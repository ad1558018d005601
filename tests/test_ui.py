"""The UI plugin's app (no browser): auth on every route, the fleet, pool and report pages over
a real SQLite ledger and the sim catalog, and the plugin as Airflow's plugins manager loads it.

Tokens are real Airflow JWTs, minted by the configured auth manager the way the api-server's
``/auth/token`` does (``generate_jwt`` with the configured secret)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser

import pytest

from tests.support.ledger_helpers import unreachable_ledger_connection

CLUSTER, POOL, OTHER = "a3u-sim", "h200-a", "h200-b"
PAGES = [
    "/gpufleet/fleet",
    f"/gpufleet/pools/{CLUSTER}/{POOL}",
    "/gpufleet/runs/scheduled__n0/report",
    "/gpufleet/api/fleet",
    f"/gpufleet/api/pools/{CLUSTER}/{POOL}",
]


@pytest.fixture(scope="module")
def auth_manager():
    from airflow.api_fastapi.app import init_auth_manager

    return init_auth_manager()


@pytest.fixture
def token(airflow_db, auth_manager) -> str:
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    return auth_manager.generate_jwt(SimpleAuthManagerUser(username="ci", role="viewer"))


@pytest.fixture
def ledger(airflow_db, fleet_state):
    """Five nights of h200-a (the fourth fails: fabric down, TCP), tonight's h200-b."""
    from tests.support.ledger_builder import LedgerBuilder

    build = LedgerBuilder()
    now = datetime.now(UTC)
    for i in range(5):
        at = now - timedelta(days=4 - i, minutes=30)
        failed = i == 3
        night = build.night(
            f"scheduled__n{i}", started_at=at - timedelta(minutes=20), finished_at=at
        )
        pair = {
            "pass_no": 1,
            "node_a": "n1",
            "node_b": "n2",
            "passed": not failed,
            "transport": "gib",
            "busbw_gbps": 350.0,
            "small_latency_us": 20.0 + i,
        }
        pool = night.pool(CLUSTER, POOL).fabric(
            not failed,
            expected_transport="gib",
            transport="socket" if failed else "gib",
            busbw_gbps=21.0 if failed else 350.0 + i,
            baseline_gbps=355.0,
            nodes_tested=4,
            reasons=["NCCL used socket, expected gib"] if failed else [],
            details={"tolerance": 0.9, "gpu_minutes": 48.0, "gpu_minutes_per_node": 12.0},
            pairs=[pair],
        )
        pool.storage(
            True,
            read_mb_s=19000.0,
            write_mb_s=17000.0,
            expected_mb_s=18000.0,
            details={"gpu_minutes": 12.0, "gpu_minutes_per_node": 3.0},
            started_at=at - timedelta(minutes=5),
        )
        assert all(pool.validation_ids)
    pool.state("degraded", "fabric down")  # tonight's (scheduled__n4)
    pool.quarantine("a3u-sim-h200-a-0", "pair below threshold", run_id="scheduled__n3")
    build.gate_decision(
        cluster=CLUSTER,
        pools=[POOL],
        nodes=2,
        launch=False,
        reasons=[f"{CLUSTER}/{POOL}: pool is degraded"],
        job="team/llm",
        run_id="manual__gate",
    )
    tonight = night.pool(CLUSTER, OTHER)
    tonight.fabric(
        True,
        expected_transport="gib",
        transport="gib",
        busbw_gbps=352.0,
        baseline_gbps=355.0,
        started_at=now - timedelta(minutes=50),
        finished_at=now - timedelta(minutes=30),
    ).storage(
        True,
        read_mb_s=19000.0,
        write_mb_s=17000.0,
        expected_mb_s=18000.0,
        started_at=now - timedelta(minutes=40),
        finished_at=now - timedelta(minutes=30),
    ).state("validated", "ok")
    night.nodes()  # each validation leaves its pool's node snapshot
    return build.ledger


@pytest.fixture
def client(ledger):
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from gpufleet.airflow.ui.app import create_app

    root = FastAPI()  # mounted as the api-server mounts plugin apps
    root.mount("/gpufleet", create_app())
    return TestClient(root)


class Rows(HTMLParser):
    """The ``<tr>`` attributes and the text of each cell with a class, by row."""

    def __init__(self):
        super().__init__()
        self.rows: list[dict] = []
        self._cell: str | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "tr":
            self.rows.append({"attrs": attrs, "cells": {}, "links": []})
        elif tag == "td" and self.rows:
            self._cell = attrs.get("class")
        elif tag == "a" and self.rows:
            self.rows[-1]["links"].append(attrs)

    def handle_endtag(self, tag):
        if tag == "td":
            self._cell = None

    def handle_data(self, data):
        if self._cell and self.rows:
            cells = self.rows[-1]["cells"]
            cells[self._cell] = cells.get(self._cell, "") + data


def rows(html: str, table_id: str, key: str) -> list[dict]:
    """The rows of ``table_id`` that carry the data attribute ``key``."""
    start = html.index(f'<table id="{table_id}">')
    parser = Rows()
    parser.feed(html[start : html.index("</table>", start)])
    return [r for r in parser.rows if key in r["attrs"]]


def auth(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.parametrize("path", PAGES)
def test_every_route_refuses_without_a_valid_token(client, token, path):
    bad = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
    for headers in ({}, auth(bad), auth("not-a-jwt"), {"Authorization": "Basic Y2k6Y2k="}):
        r = client.get(path, headers=headers, follow_redirects=False)
        assert r.status_code == 401, (headers, r.status_code, r.text[:200])
        assert "not authenticated" in r.json()["detail"]
    # a bad cookie is refused like a missing one
    client.cookies.set("_token", bad)
    try:
        assert client.get(path, follow_redirects=False).status_code == 401
    finally:
        client.cookies.clear()
    # a browser asking for a page is sent to the login page, coming back here after
    r = client.get(path, headers={"Accept": "text/html"}, follow_redirects=False)
    if "/api/" in path:
        assert r.status_code == 401
    else:
        assert r.status_code == 303
        assert r.headers["location"].startswith("/auth/login")
        assert "next=" in r.headers["location"]


def test_metrics_keeps_its_own_token_check(client):
    """Prometheus holds no UI session: /metrics is not behind the UI's login."""
    r = client.get("/gpufleet/metrics", headers={"Accept": "text/html"}, follow_redirects=False)
    assert r.status_code != 303 and r.status_code != 404, r.status_code


def test_the_ui_cookie_authenticates_as_the_iframe_sends_it(client, token):
    client.cookies.set("_token", token)
    try:
        r = client.get("/gpufleet/fleet")
    finally:
        client.cookies.clear()
    assert r.status_code == 200 and '<table id="fleet">' in r.text


def test_fleet_page_lists_every_pool_with_why_not(client, token):
    r = client.get("/gpufleet/fleet", headers=auth(token))
    assert r.status_code == 200
    table = {row["attrs"]["data-pool"]: row for row in rows(r.text, "fleet", "data-pool")}
    from gpufleet.config.catalog import load_catalog

    assert set(table) == {ref.key for ref in load_catalog().pools()}
    bad = table[f"{CLUSTER}/{POOL}"]
    assert bad["attrs"]["data-state"] == "degraded"
    assert bad["attrs"]["data-ready"] == "no"
    assert "pool is degraded" in bad["cells"]["why"]
    assert "FAIL" not in bad["cells"]["fabric"]  # the last night passed
    assert bad["cells"]["cost"] == "15.0"  # fabric 12 + Lustre 3 GPU-minutes per node
    assert {"class": "pool-link", "href": f"/gpufleet/pools/{CLUSTER}/{POOL}"} in bad["links"]
    never = [row for key, row in table.items() if key.startswith("p5-sim/")]
    assert never and all(row["attrs"]["data-state"] == "-" for row in never)
    assert "validation cost, fleet total" in r.text
    data = client.get("/gpufleet/api/fleet", headers=auth(token)).json()
    assert {p["key"] for p in data["pools"]} == set(table)
    assert data["cost"]["pools_reporting"] == 1
    assert data["cost"]["gpu_minutes_total"] == 60.0 and data["cost"]["nodes"] == 4


def test_a_drifting_pool_shows_its_figures_even_when_ready(client, token, ledger):
    why = "busbw 331.0 GB/s is 5.8% below its 14-night median 351.4 (noise 0.6%)"
    ledger.set_pool_state(CLUSTER, OTHER, "drifting", why)
    r = client.get("/gpufleet/fleet?state=drifting", headers=auth(token))
    (row,) = rows(r.text, "fleet", "data-pool")
    assert row["attrs"]["data-pool"] == f"{CLUSTER}/{OTHER}"
    assert row["attrs"]["data-state"] == "drifting"
    assert row["cells"]["why"] == why
    from datetime import UTC, datetime

    from gpufleet.cli.status_cmd import readiness_rows
    from gpufleet.config.catalog import load_catalog

    (cli,) = [
        r
        for r in readiness_rows(load_catalog(), ledger, datetime.now(UTC))
        if r["POOL"] == f"{CLUSTER}/{OTHER}"
    ]
    assert (cli["STATE"], cli["WHY"]) == ("drifting", why)  # one implementation, two views
    assert row["attrs"]["data-ready"] == "yes" and cli["READY"] == "yes"  # a warning only


def test_fleet_filters_by_region_and_state(client, token):
    r = client.get("/gpufleet/fleet?region=sim-us-central1&state=degraded", headers=auth(token))
    keys = [row["attrs"]["data-pool"] for row in rows(r.text, "fleet", "data-pool")]
    assert keys == [f"{CLUSTER}/{POOL}"]
    assert re.search(r'<select name="region">', r.text) and 'name="state"' in r.text
    r = client.get("/gpufleet/api/fleet?state=validated", headers=auth(token))
    assert [p["key"] for p in r.json()["pools"]] == [f"{CLUSTER}/{OTHER}"]
    r = client.get("/gpufleet/api/fleet?region=sim-us-east-1", headers=auth(token))
    assert r.json()["pools"] and {p["region"] for p in r.json()["pools"]} == {"sim-us-east-1"}
    r = client.get("/gpufleet/fleet?region=nowhere", headers=auth(token))
    assert r.status_code == 404 and "nowhere" in r.text


def _pool_data(html: str) -> dict:
    m = re.search(r'<script id="pool-data" type="application/json">(.*?)</script>', html, re.S)
    return json.loads(m.group(1))


def test_pool_page_has_the_nights_in_order_with_the_failing_night(client, token):
    r = client.get(f"/gpufleet/pools/{CLUSTER}/{POOL}", headers=auth(token))
    assert r.status_code == 200
    assert re.search(rf"<h1>[^<]*{CLUSTER}/{POOL}", r.text)
    for chart in ("busbw-chart", "latency-chart", "lustre-chart"):
        assert f'<div id="{chart}"' in r.text
    assert "/gpufleet/static/uPlot.iife.min.js" in r.text
    data = _pool_data(r.text)
    nights = data["nights"]
    assert [n["run_id"] for n in nights] == [f"scheduled__n{i}" for i in range(5)]
    assert [n["night"] for n in nights] == sorted(n["night"] for n in nights)
    assert [n["passed"] for n in nights] == [True, True, True, False, True]
    assert nights[3]["busbw_gbps"] < data["tolerance_gbps"] < data["baseline_gbps"]
    assert data["baseline_gbps"] == 355.0 and data["tolerance_gbps"] == pytest.approx(319.5)
    assert data["expected_mb_s"] == 18000.0
    assert nights[3]["transport"] == "socket"
    assert [n["small_latency_us"] for n in nights][:3] == [20.0, 21.0, 22.0]  # pass-1 medians
    assert nights[3]["small_latency_us"] is None  # its only pair failed
    table = rows(r.text, "nights", "data-run-id")
    assert [(t["attrs"]["data-run-id"], t["attrs"]["data-passed"]) for t in table] == [
        (n["run_id"], "true" if n["passed"] else "false") for n in nights
    ]
    assert "/dags/nightly_fabric_validation/runs/scheduled__n3" in r.text
    assert "a3u-sim-h200-a-0" in r.text  # the quarantined node
    assert (
        "pool is degraded" in r.text and "/dags/gated_training_launch/runs/manual__gate" in r.text
    )
    api = client.get(f"/gpufleet/api/pools/{CLUSTER}/{POOL}", headers=auth(token)).json()
    assert api["chart"] == data
    r = client.get(f"/gpufleet/pools/{CLUSTER}/{POOL}?nights=2", headers=auth(token))
    assert [n["run_id"] for n in _pool_data(r.text)["nights"]] == ["scheduled__n3", "scheduled__n4"]


def test_unknown_pool_and_run_are_404(client, token):
    r = client.get(f"/gpufleet/pools/{CLUSTER}/nope", headers=auth(token))
    assert r.status_code == 404 and "nope" in r.text
    r = client.get(f"/gpufleet/api/pools/{CLUSTER}/nope", headers=auth(token))
    assert r.status_code == 404 and "nope" in r.json()["detail"]
    r = client.get(
        "/gpufleet/runs/manual__nothing/report?dag_id=region_onboarding", headers=auth(token)
    )
    assert r.status_code == 404
    assert "recorded no validations" in r.text and "nightly_fabric_validation" in r.text


def test_report_page_of_a_run(client, token):
    r = client.get("/gpufleet/runs/scheduled__n3/report", headers=auth(token))
    assert r.status_code == 200
    assert re.search(r"<h1>Nightly fabric validation: scheduled__n3</h1>", r.text)
    assert "FAIL" in r.text and "NCCL used socket" in r.text
    md = client.get("/gpufleet/runs/scheduled__n3/report?format=md", headers=auth(token))
    assert md.text.startswith("# Nightly fabric validation: scheduled__n3")


def test_page_text_is_escaped(client, token, ledger):
    ledger.set_pool_state(CLUSTER, OTHER, "degraded", "<script>alert(1)</script>")
    ledger.record_gate_decision(
        cluster=CLUSTER, pools=[OTHER], nodes=1, launch=False, reasons=["<b>x</b></script>"]
    )
    r = client.get(f"/gpufleet/pools/{CLUSTER}/{OTHER}", headers=auth(token))
    assert "<script>alert(1)" not in r.text and "&lt;script&gt;alert(1)" in r.text
    assert "<b>x</b>" not in r.text


def test_airflow_loads_the_plugin(airflow_db):
    from airflow import plugins_manager

    assert not plugins_manager.get_import_errors(), plugins_manager.get_import_errors()
    info = {p["name"]: p for p in plugins_manager.get_plugin_info()}
    assert "gpufleet" in info, sorted(info)
    plugin = info["gpufleet"]
    views = {v["name"]: v for v in plugin["external_views"]}
    assert views["GPU fleet"]["destination"] == "nav"
    assert views["GPU fleet"]["href"] == "/gpufleet/fleet"
    assert views["Fleet report"]["destination"] == "dag_run"
    assert "{RUN_ID}" in views["Fleet report"]["href"]
    assert [a["url_prefix"] for a in plugin["fastapi_apps"]] == ["/gpufleet"]


def test_the_plugin_builds_its_app_on_its_first_request_only(ledger, token):
    """Every process that loads plugins imports the plugin file (each task process does, for
    its listeners): it must not import FastAPI or the pages. What it registers is what the
    api-server mounts, and that serves the pages."""
    import subprocess
    import sys
    from pathlib import Path

    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    plugins = Path(__file__).resolve().parents[1] / "plugins"
    probe = (
        f"import sys; sys.path.insert(0, {str(plugins)!r}); import gpufleet_plugin; "
        "print(sorted(m for m in ('fastapi', 'gpufleet.airflow.ui.app') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr

    from gpufleet_plugin import PREFIX, GpufleetPlugin

    root = FastAPI()
    for entry in GpufleetPlugin.fastapi_apps:  # as the api-server's init_plugins mounts them
        root.mount(entry["url_prefix"], entry["app"])
    r = TestClient(root).get(f"{PREFIX}/fleet", headers=auth(token))
    assert r.status_code == 200 and POOL in r.text, r.text[:300]


CSP_DIRECTIVES = ("default-src 'self'", "frame-ancestors 'self'")


def assert_security_headers(r) -> None:
    where = (r.request.url, r.status_code)
    csp = [d.strip() for d in r.headers.get("content-security-policy", "").split(";")]
    assert all(d in csp for d in CSP_DIRECTIVES), (where, csp)
    assert r.headers.get("x-content-type-options") == "nosniff", where


def test_every_response_of_the_plugin_carries_the_security_headers(client, token):
    """Pages, data, static files, refusals, redirects, 404s and /metrics: the UI iframes the
    pages from its own origin, and nothing else may frame them or run script in them."""
    for path in [*PAGES, "/gpufleet/static/uPlot.iife.min.js", "/gpufleet/static/gpufleet.css"]:
        r = client.get(path, headers=auth(token))
        assert r.status_code == 200, (path, r.status_code)
        assert_security_headers(r)
        assert_security_headers(client.get(path, follow_redirects=False))  # 401
    assert_security_headers(
        client.get("/gpufleet/fleet", headers={"Accept": "text/html"}, follow_redirects=False)
    )
    assert_security_headers(client.get(f"/gpufleet/pools/{CLUSTER}/nope", headers=auth(token)))
    assert_security_headers(client.get("/gpufleet/static/nope.js"))
    assert_security_headers(client.get("/gpufleet/metrics"))


@pytest.mark.parametrize("path", ["/docs", "/redoc", "/openapi.json", "/docs/oauth2-redirect"])
def test_the_apps_api_docs_are_not_served(client, token, path):
    """The plugin's FastAPI docs would describe its routes to anyone: they are off."""
    for headers in ({}, auth(token)):
        r = client.get(f"/gpufleet{path}", headers=headers, follow_redirects=False)
        assert r.status_code in (401, 404), (path, r.status_code, r.text[:200])


def test_the_report_tab_shows_hostile_reasons_as_text_within_the_csp(client, token, ledger):
    ledger.record_validation(
        run_id="manual__hostile",
        cluster=CLUSTER,
        pool=POOL,
        kind="fabric",
        passed=False,
        started_at=datetime.now(UTC),
        transport="socket",
        expected_transport="gib",
        reasons=["cloud API: <img src=x onerror=alert(1)>"],
    )
    r = client.get("/gpufleet/runs/manual__hostile/report", headers=auth(token))
    assert r.status_code == 200
    assert "<img" not in r.text and "&lt;img src=x onerror=alert(1)&gt;" in r.text
    # styled by the pages' stylesheet: nothing inline for the CSP to block
    assert '<link rel="stylesheet" href="/gpufleet/static/gpufleet.css">' in r.text
    assert "<style" not in r.text and " style=" not in r.text
    assert_security_headers(r)


# --- a ledger that cannot be read (issue 31): 503 naming it and what to do, never a bare 500 or
# a 404 "Unknown pool"; never its password -----------------------------------------------------

LEDGER_PASSWORD = "ui-ledger-pw-s3cret"
DOWN = unreachable_ledger_connection(LEDGER_PASSWORD)


def _configured_app(monkeypatch, conn: dict):
    """The app as the api-server serves it (the ledger found by ``LedgerHook``), with the
    ``gpufleet_ledger`` connection ``conn`` in the environment."""
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from gpufleet.airflow.ui.app import create_app

    monkeypatch.setenv("AIRFLOW_CONN_GPUFLEET_LEDGER", json.dumps(conn))
    root = FastAPI()
    root.mount("/gpufleet", create_app())
    return TestClient(root)


def _unreachable_answer(r, *must: str) -> str:
    """The 503's text, checked: it names the connection and holds ``must`` (which ledger,
    why, what to do), and shows no credential."""
    assert r.status_code == 503, (r.request.url, r.status_code, r.text[:300])
    assert r.headers.get("retry-after") == "60"
    text = r.json()["detail"] if "/api/" in r.request.url.path else r.text
    assert "gpufleet_ledger" in text, text
    for word in must or ("What to do",):
        assert word in text, (word, text)
    for secret in (LEDGER_PASSWORD, "fleetuser"):
        assert secret not in r.text, r.text
    assert "Unknown pool" not in r.text
    return text


def test_an_unreachable_ledger_answers_503_naming_it_on_every_page(
    airflow_db, fleet_state, token, monkeypatch
):
    client = _configured_app(monkeypatch, DOWN)
    for path in PAGES:
        r = client.get(path, headers=auth(token))
        _unreachable_answer(r, "127.0.0.1:1/ledger", "Connection refused", "What to do")
        assert_security_headers(r)
    r = client.get(f"/gpufleet/pools/{CLUSTER}/{POOL}", headers=auth(token))
    assert "Ledger unreachable" in r.text  # the page, not "Unknown pool"
    assert not (fleet_state / "ledger.db").exists()  # no empty default stands in for it


def test_a_configured_ledger_file_that_does_not_exist_answers_503_and_is_not_made(
    airflow_db, fleet_state, token, monkeypatch, tmp_path
):
    missing = tmp_path / "typo" / "ledger.db"
    missing.parent.mkdir()
    client = _configured_app(monkeypatch, {"conn_type": "sqlite", "host": str(missing)})
    for path in PAGES:
        _unreachable_answer(
            client.get(path, headers=auth(token)), str(missing), "gpufleet ledger init"
        )
    assert not missing.exists()


def test_a_ledger_that_goes_away_after_opening_answers_503_not_500(
    airflow_db, fleet_state, token, tmp_path
):
    """Opened (its schema read), then its database stops answering: the reads fail at the
    driver, and every route says which ledger and what to do."""
    from fastapi import FastAPI
    from fastapi.testclient import TestClient
    from sqlalchemy import create_engine

    from gpufleet.airflow.ui.app import create_app
    from gpufleet.store import open_ledger

    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    led = open_ledger(url, "the Airflow connection gpufleet_ledger", create=True)
    down = f"postgresql+psycopg2://fleetuser:{LEDGER_PASSWORD}@127.0.0.1:1/ledger"
    led.engine = create_engine(down, pool_pre_ping=True)
    root = FastAPI()
    root.mount("/gpufleet", create_app(ledger_factory=lambda: led))
    client = TestClient(root)
    for path in PAGES:
        r = client.get(path, headers=auth(token))
        _unreachable_answer(r, "127.0.0.1:1/ledger", "OperationalError", "What to do")


def test_the_fleet_page_shows_tripped_breakers_and_waiting_approvals(client, token, ledger):
    """What holds remediation back is on the first page (docs/remediation.md): each breaker a
    person has not reset, with how to reset it, and each approval waiting for an answer."""
    page = client.get("/gpufleet/fleet", headers=auth(token)).text
    assert 'id="breakers"' not in page and 'id="approvals"' not in page  # none: no section
    ledger.trip_breaker("pool", f"{CLUSTER}/{POOL}", reason="3 of 6 nodes out", affected=3, limit=2)
    ledger.request_approval(
        "report_subblock", f"{CLUSTER}/{POOL}/sb-1", "report sb-1 <faulty>", requested_by="night"
    )
    page = client.get("/gpufleet/fleet", headers=auth(token)).text
    (breaker,) = rows(page, "breakers", "data-scope")
    assert breaker["attrs"]["data-key"] == f"{CLUSTER}/{POOL}"
    assert "3 of 6 nodes out" in page and f"breaker-reset pool {CLUSTER}/{POOL}" in page
    assert 'data-kind="report_subblock"' in page and "report sb-1 &lt;faulty&gt;" in page
    data = client.get("/gpufleet/api/fleet", headers=auth(token)).json()["safety"]
    assert [b["key"] for b in data["breakers"]] == [f"{CLUSTER}/{POOL}"]
    assert [a["kind"] for a in data["approvals"]] == ["report_subblock"]
    ledger.reset_breaker("pool", f"{CLUSTER}/{POOL}", "alice", "rolled back")
    assert 'id="breakers"' not in client.get("/gpufleet/fleet", headers=auth(token)).text
