"""``/metrics``: the fleet for Prometheus, read from the ledger at scrape time, behind a static
bearer token from the ``gpufleet_metrics`` connection (open only when configured so)."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from gpufleet.airflow.ui.metrics import make_router, router
from gpufleet.config.catalog import load_catalog
from gpufleet.store import Ledger
from tests.support.ledger_builder import LedgerBuilder
from tests.support.ledger_helpers import unreachable_ledger_connection
from tests.support.prometheus import families_written_back

TOKEN = "s3cret-scrape-token"
CONN = "AIRFLOW_CONN_GPUFLEET_METRICS"
FINDING = {
    "metric": "busbw_gbps",
    "latest": 431.0,
    "median": 468.0,
    "noise": 4.1,
    "limit": 451.6,
    "nights": 14,
    "direction": "below",
    "rule": "level",
    "text": "busbw 431.0 GB/s is 7.9% below its 14-night median 468.0 GB/s (noise ±0.9%)",
}


@pytest.fixture
def client(airflow_db, fleet_state):
    app = FastAPI()
    app.include_router(router)
    return TestClient(app)


def configure(monkeypatch, password: str | None = TOKEN, **extra) -> None:
    conn = {"conn_type": "generic", "extra": extra}
    if password is not None:
        conn["password"] = password
    monkeypatch.setenv(CONN, json.dumps(conn))


def samples(text: str) -> dict[tuple[str, tuple], float]:
    """(name, sorted labels) -> value, through prometheus_client's own parser."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def at(pool: str, cluster: str = "a3u-sim", **more) -> tuple:
    return tuple(sorted({"cluster": cluster, "pool": pool, **more}.items()))


def record_night(ledger: Ledger) -> None:
    """Tonight, as the validations record it: h200-a passes, h200-b falls back to sockets
    and has a quarantined node, h100-a drifts while it passes."""
    night = LedgerBuilder(ledger).night(
        "night-1", started_at=datetime.now(UTC) - timedelta(minutes=20)
    )
    night.pool("a3u-sim", "h200-a").fabric(
        True,
        transport="gib",
        expected_transport="gib",
        busbw_gbps=351.5,
        baseline_gbps=355.0,
        nodes_tested=6,
        details={
            "small_latency_us": 31.7,
            "gpu_minutes": 13.5,
            "cost_nodes": 6,
            "gpu_minutes_per_node": 2.25,
        },
    ).storage(
        True,
        read_mb_s=19500.0,
        write_mb_s=17100.0,
        expected_mb_s=18000.0,
        nodes_tested=4,
        details={"gpu_minutes": 3.8, "cost_nodes": 6, "gpu_minutes_per_node": 0.633},
    ).state("validated", "every pair passed")
    night.pool("a3u-sim", "h200-b").fabric(
        False,
        transport="socket",
        expected_transport="gib",
        busbw_gbps=21.9,
        baseline_gbps=355.0,
        reasons=["every pair failed"],
    ).state("degraded", "every pair failed").quarantine("a3u-sim-h200-b-3", "NIC down")
    night.pool("p5-sim", "h100-a").fabric(
        True,
        transport="ofi-efa",
        expected_transport="ofi-efa",
        busbw_gbps=431.0,
        baseline_gbps=480.0,
        details={"drift": [FINDING, "not a finding", {"metric": 3}]},
    ).state("drifting", FINDING["text"])
    night.nodes()  # each validation leaves its pool's nodes


def test_without_the_connection_metrics_are_refused_with_how_to_configure(client, monkeypatch):
    monkeypatch.delenv(CONN, raising=False)
    record_night(Ledger())
    resp = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert resp.status_code == 503
    assert "AIRFLOW_CONN_GPUFLEET_METRICS" in resp.text and "allow_anonymous" in resp.text
    assert "# TYPE" not in resp.text


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong-token"},
        {"Authorization": f"Basic {TOKEN}"},
        {"Authorization": f"Bearer {TOKEN}x"},
        {"Authorization": "Bearer "},
    ],
    ids=["none", "wrong", "not-bearer", "longer", "empty"],
)
def test_a_scrape_without_the_token_gets_401(client, monkeypatch, headers):
    configure(monkeypatch)
    record_night(Ledger())
    resp = client.get("/metrics", headers=headers)
    assert resp.status_code == 401
    assert resp.headers["www-authenticate"] == "Bearer"
    assert "# TYPE" not in resp.text


def test_a_connection_without_a_password_is_not_an_open_door(client, monkeypatch):
    configure(monkeypatch, password=None)
    assert client.get("/metrics").status_code == 503
    configure(monkeypatch, password=None, allow_anonymous="true")  # a string is not explicit
    assert client.get("/metrics").status_code == 503


def test_anonymous_scrapes_only_when_configured_explicitly(client, monkeypatch):
    configure(monkeypatch, allow_anonymous=True)
    resp = client.get("/metrics")
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/plain")


def test_the_metrics_say_what_the_ledger_says(client, monkeypatch):
    configure(monkeypatch)
    record_night(Ledger())
    resp = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert resp.status_code == 200, resp.text
    got = samples(resp.text)
    region = {r.key: r.region.name for r in load_catalog().pools()}
    # readiness: the gate's own rules (h200-a validated tonight; h200-b fell back to sockets)
    assert got[("gpufleet_pool_ready", at("h200-a", region=region["a3u-sim/h200-a"]))] == 1
    assert got[("gpufleet_pool_ready", at("h200-b", region=region["a3u-sim/h200-b"]))] == 0
    assert got[("gpufleet_validation_passed", at("h200-a", kind="fabric"))] == 1
    assert got[("gpufleet_validation_passed", at("h200-a", kind="storage"))] == 1
    assert got[("gpufleet_validation_passed", at("h200-b", kind="fabric"))] == 0
    assert got[("gpufleet_validation_error", at("h200-b", kind="fabric"))] == 0
    assert 0 <= got[("gpufleet_validation_age_seconds", at("h200-a", kind="fabric"))] < 600
    assert got[("gpufleet_fabric_busbw_gbps", at("h200-a"))] == 351.5
    assert got[("gpufleet_fabric_baseline_gbps", at("h200-a"))] == 355.0
    assert got[("gpufleet_fabric_small_latency_us", at("h200-a"))] == 31.7
    assert got[("gpufleet_fabric_transport_ok", at("h200-a"))] == 1
    assert got[("gpufleet_fabric_transport_ok", at("h200-b"))] == 0
    assert got[("gpufleet_lustre_read_mb_s", at("h200-a"))] == 19500.0
    assert got[("gpufleet_lustre_write_mb_s", at("h200-a"))] == 17100.0
    assert got[("gpufleet_lustre_expected_mb_s", at("h200-a"))] == 18000.0
    assert got[("gpufleet_quarantined_nodes", at("h200-b"))] == 1
    assert got[("gpufleet_quarantined_nodes", at("h200-a"))] == 0
    assert got[("gpufleet_validation_gpu_minutes", at("h200-a", kind="fabric"))] == 13.5
    assert got[("gpufleet_validation_gpu_minutes_per_node", at("h200-a", kind="storage"))] == (
        0.633
    )
    # drift: the state, and the figures of each finding (malformed entries are skipped)
    assert got[("gpufleet_pool_drifting", at("h100-a", cluster="p5-sim"))] == 1
    assert got[("gpufleet_pool_drifting", at("h200-a"))] == 0
    drift = {k: v for k, v in got.items() if k[0].startswith("gpufleet_drift_")}
    assert drift == {
        (f"gpufleet_drift_{f}", at("h100-a", cluster="p5-sim", metric="busbw_gbps")): FINDING[f]
        for f in ("latest", "median", "noise", "limit")
    }


def test_each_scrape_reads_afresh_and_nothing_leaks_into_the_global_registry(
    client, monkeypatch, tmp_path
):
    from prometheus_client import REGISTRY

    configure(monkeypatch)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    before = samples(client.get("/metrics", headers=auth).text)
    assert not any(name == "gpufleet_fabric_busbw_gbps" for name, _ in before)
    record_night(Ledger())
    after = samples(client.get("/metrics", headers=auth).text)
    assert after[("gpufleet_fabric_busbw_gbps", at("h200-a"))] == 351.5
    assert REGISTRY.get_sample_value("gpufleet_fabric_busbw_gbps", dict(at("h200-a"))) is None
    # another ledger, another answer: the router reads the ledger it is given per scrape
    other = Ledger(f"sqlite:///{tmp_path / 'other.db'}")
    app = FastAPI()
    app.include_router(make_router(ledger_factory=lambda: other))
    fresh = samples(TestClient(app).get("/metrics", headers=auth).text)
    assert ("gpufleet_fabric_busbw_gbps", at("h200-a")) not in fresh


def test_the_exposition_is_prometheus_clients_own_byte_for_byte(airflow_db, fleet_state):
    """``/metrics`` writes the text format itself (2,000 pools make 30,000 samples): what it
    writes, parsed by prometheus_client and written again by ``generate_latest``, comes back
    byte for byte, hostile label values (a drift metric's name is ledger text) and figures of
    every size included."""
    from gpufleet.airflow.ui.metrics import exposition

    ledger = Ledger()
    record_night(ledger)
    now = datetime.now(UTC)
    names = ['a"b', "back\\slash", "new\nline", "ünï", "", 'x=1,y="2"}']
    figures = [1e-7, 123456789.0, -0.0, 1e22, 0.1, 7, 1.5e-300, 12345678.9, -3]
    latest = [
        (pool, kind) for pool in ("h200-a", "h200-b") for kind in ("fabric", "storage", "health")
    ]
    for i, ((pool, kind), name) in enumerate(zip(latest, names, strict=True)):
        ledger.record_validation(
            run_id=f"w{i}", cluster="a3u-sim", pool=pool, kind=kind, passed=True,
            started_at=now, finished_at=now - timedelta(seconds=i * 1e7),
            busbw_gbps=figures[i], read_mb_s=figures[i + 1], expected_mb_s=figures[-1],
            details={"drift": [{"metric": name, **dict(zip(("latest", "median", "noise",
                     "limit"), figures[i : i + 4], strict=True))}], "gpu_minutes": 10**8,
                     "nodes": {}, "levels": {"1": 3}},
        )  # fmt: skip
    text = exposition(load_catalog(), ledger, now)
    families = families_written_back(text)
    drift = {
        (s.name, s.labels["metric"]): s.value
        for f in families
        for s in f.samples
        if f.name.startswith("gpufleet_drift_")
    }
    assert {metric for _, metric in drift} == {*names, "busbw_gbps"}
    for i, name in enumerate(names):  # each figure as the ledger holds it, -0.0 included
        four = zip(("latest", "median", "noise", "limit"), figures[i : i + 4], strict=True)
        for figure, value in four:
            got = drift[(f"gpufleet_drift_{figure}", name)]
            assert (got, math.copysign(1, got)) == (value, math.copysign(1, value))


def test_the_providers_view_of_each_subblock_beside_our_verdict(airflow_db, fleet_state):
    """The last fabric row's ``provider_subblocks`` (the provider's health of each sub-block)
    beside its ``bad_subblocks`` (ours), paired by key as the pool page pairs them: one
    healthy and one degraded sub-block the provider lists, the degraded one ours too, and one
    only we name. A row whose provider read failed says so alone; a row without a view (a pool
    without topology labels) has no sub-block series."""
    from gpufleet.airflow.ui.metrics import exposition

    ledger = Ledger()
    now = datetime.now(UTC)

    night = LedgerBuilder(ledger).night("night-1", started_at=now - timedelta(minutes=5))

    def fabric(cluster: str, pool: str, **details) -> None:
        night.pool(cluster, pool).fabric(True, details=details)

    sb1, sb2 = "block-1/block-1-sb1", "block-1/block-1-sb2"
    provider = [
        {"key": sb1, "status": "HEALTHY", "healthy_hosts": 4, "degraded_hosts": 0, "hosts": 4},
        {"key": sb2, "status": "DEGRADED", "healthy_hosts": 0, "degraded_hosts": 2, "hosts": 2},
    ]
    bad = {sb2: "every pair crossing its uplink failed", "block-1/block-1-sb3": "likewise"}
    fabric("a3u-sim", "h200-a", scopes={"subblock": {"pairs": 2, "failed": 0}},
           bad_subblocks=bad, provider_subblocks=provider)  # fmt: skip
    fabric("a3u-sim", "h200-b", scopes={}, bad_subblocks={})  # no view: no series
    fabric("p5-sim", "h100-a", bad_subblocks={}, provider_subblocks={"error": "EC2: 503"})
    text = exposition(load_catalog(), ledger, now).decode()

    def where(subblock: str) -> str:
        return f'{{block="block-1",cluster="a3u-sim",pool="h200-a",subblock="{subblock}"}}'

    lines = [line for line in text.splitlines() if line.startswith("gpufleet_subblock_")]
    assert lines == [
        'gpufleet_subblock_provider_read_ok{cluster="a3u-sim",pool="h200-a"} 1.0',
        'gpufleet_subblock_provider_read_ok{cluster="p5-sim",pool="h100-a"} 0.0',
        f"gpufleet_subblock_provider_healthy_hosts{where('block-1-sb1')} 4.0",
        f"gpufleet_subblock_provider_healthy_hosts{where('block-1-sb2')} 0.0",
        f"gpufleet_subblock_provider_degraded_hosts{where('block-1-sb1')} 0.0",
        f"gpufleet_subblock_provider_degraded_hosts{where('block-1-sb2')} 2.0",
        f"gpufleet_subblock_bad{where('block-1-sb1')} 0.0",
        f"gpufleet_subblock_bad{where('block-1-sb2')} 1.0",
        f"gpufleet_subblock_bad{where('block-1-sb3')} 1.0",  # only ours: no provider figures
    ]
    assert "# TYPE gpufleet_subblock_bad gauge" in text


def test_a_scrape_from_what_the_api_server_keeps_is_a_fresh_scrape(airflow_db, fleet_state):
    """The api-server keeps the ledger's rows (``FleetCache``) and each cluster's ledger series
    as text (``SeriesMemo``) between scrapes: every scrape is byte for byte what a scrape read
    afresh writes, at any later time (ready and the ages are the scrape's), and only a cluster
    whose ledger moved is written again."""
    from gpufleet.airflow.ui.metrics import SeriesMemo, exposition
    from gpufleet.services.views.fleet_cache import FleetCache

    ledger, catalog, cache, memo = Ledger(), load_catalog(), FleetCache(), SeriesMemo()
    record_night(ledger)
    now = datetime.now(UTC)

    def scrape(at: datetime) -> bytes:
        kept = exposition(catalog, ledger, at, cache, memo)
        assert kept == exposition(catalog, ledger, at)
        return kept

    first = scrape(now)
    written = memo.written
    assert written >= 2 and scrape(now) == first and memo.written == written
    later = scrape(now + timedelta(hours=30))  # every validation past the gate's age
    assert memo.written == written
    region = {r.key: r.region.name for r in catalog.pools()}["a3u-sim/h200-a"]
    ready = ("gpufleet_pool_ready", at("h200-a", region=region))
    assert samples(first.decode())[ready] == 1 and samples(later.decode())[ready] == 0
    age = ("gpufleet_validation_age_seconds", at("h200-a", kind="fabric"))
    assert samples(later.decode())[age] - samples(first.decode())[age] == 30 * 3600
    night2 = LedgerBuilder(ledger).night("night-2", started_at=now, finished_at=now)
    night2.pool("a3u-sim", "h200-a").fabric(False, transport="socket", expected_transport="gib")
    again = scrape(now)
    assert memo.written == written + 1  # a3u-sim alone
    assert samples(again.decode())[("gpufleet_fabric_transport_ok", at("h200-a"))] == 0


# --- a ledger that cannot be read (issue 31): 503 in text naming it, never a bare 500 ----------

LEDGER_PASSWORD = "metrics-ledger-pw-s3cret"
DOWN = unreachable_ledger_connection(LEDGER_PASSWORD)


def _scrape_503(resp, *must: str) -> None:
    assert resp.status_code == 503, (resp.status_code, resp.text[:300])
    assert resp.headers["content-type"].startswith("text/plain")
    assert resp.headers.get("retry-after") == "60"
    assert "gpufleet_ledger" in resp.text and "# TYPE" not in resp.text
    for word in must:
        assert word in resp.text, (word, resp.text)
    assert LEDGER_PASSWORD not in resp.text and "fleetuser" not in resp.text


def test_an_unreachable_ledger_is_a_503_in_text_naming_it(client, monkeypatch, fleet_state):
    configure(monkeypatch)
    monkeypatch.setenv("AIRFLOW_CONN_GPUFLEET_LEDGER", json.dumps(DOWN))
    resp = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    _scrape_503(resp, "127.0.0.1:1/ledger", "Connection refused", "What to do")
    assert not (fleet_state / "ledger.db").exists()


def test_a_configured_ledger_file_that_does_not_exist_is_a_503_and_is_not_made(
    client, monkeypatch, tmp_path
):
    configure(monkeypatch)
    missing = tmp_path / "typo" / "ledger.db"
    missing.parent.mkdir()
    conn = {"conn_type": "sqlite", "host": str(missing)}
    monkeypatch.setenv("AIRFLOW_CONN_GPUFLEET_LEDGER", json.dumps(conn))
    resp = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    _scrape_503(resp, str(missing), "does not exist", "gpufleet ledger init")
    assert not missing.exists()


def test_a_ledger_that_stops_answering_after_opening_is_a_503(
    airflow_db, fleet_state, monkeypatch, tmp_path
):
    from sqlalchemy import create_engine

    from gpufleet.store import open_ledger

    configure(monkeypatch)
    led = open_ledger(
        f"sqlite:///{tmp_path / 'fleet.db'}", "the Airflow connection gpufleet_ledger", create=True
    )
    led.engine = create_engine(f"postgresql+psycopg2://fleetuser:{LEDGER_PASSWORD}@127.0.0.1:1/x")
    app = FastAPI()
    app.include_router(make_router(ledger_factory=lambda: led))
    resp = TestClient(app).get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    _scrape_503(resp, "127.0.0.1:1/x", "OperationalError", "What to do")


def test_the_metrics_show_tripped_breakers_and_waiting_approvals(client, monkeypatch):
    configure(monkeypatch)
    ledger = Ledger()
    record_night(ledger)

    def scrape() -> dict:
        resp = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        assert resp.status_code == 200, resp.text
        return samples(resp.text)

    got = scrape()
    for scope in ("pool", "cluster", "fleet"):
        assert got[("gpufleet_breakers_tripped", (("scope", scope),))] == 0
    assert got[("gpufleet_approvals_pending", (("kind", "retire_pool"),))] == 0
    row = ledger.trip_breaker("cluster", "a3u-sim", reason="5 of 12 out", affected=5, limit=4)
    ledger.request_approval("retire_pool", "a3u-sim/h200-b", "retire h200-b", requested_by="t")
    got = scrape()
    assert got[("gpufleet_breakers_tripped", (("scope", "cluster"),))] == 1
    assert got[("gpufleet_breakers_tripped", (("scope", "pool"),))] == 0
    since = ("gpufleet_breaker_tripped_since_seconds", (("key", "a3u-sim"), ("scope", "cluster")))
    assert got[since] == row["tripped_at"].replace(tzinfo=UTC).timestamp()
    assert got[("gpufleet_approvals_pending", (("kind", "retire_pool"),))] == 1
    ledger.reset_breaker("cluster", "a3u-sim", "alice", "checked")
    got = scrape()
    assert got[("gpufleet_breakers_tripped", (("scope", "cluster"),))] == 0
    assert since not in got
