"""The fleet-wide reads behind the fleet page and ``/metrics`` (issue 18: 2,000 pools within
their targets, ``bench/fleet_page.py``) answer what the narrower reads answer: the readiness
table's ledger rows are the gate's own, rows read past SQLAlchemy's row objects are typed as
SQLAlchemy types them, the catalog's resolved pools are its lookups', and the cycle collector
paused while a fleet-wide read holds its rows is resumed, whatever happens."""

from __future__ import annotations

import gc
import threading
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select, text

from gpufleet.airflow.ui.heap import cycle_collector_paused
from gpufleet.config.catalog import load_catalog
from gpufleet.store import Ledger
from gpufleet.store import schema as s
from gpufleet.store.rows import select_dicts
from tests.store.test_ledger import ledger_url  # noqa: F401 - fixture: SQLite and PostgreSQL
from tests.support.ledger_helpers import quarantine, start_transition
from tests.test_ui import auth, auth_manager, token  # noqa: F401 - fixtures

NOW = datetime(2026, 11, 29, 2, 0, tzinfo=UTC)


@pytest.fixture
def night(airflow_db, fleet_state) -> Ledger:
    """Fabric, Lustre and GPU health rows over several clusters, pool states and a transition
    in flight (the other tests' nights)."""
    from tests.services.views.test_health_views import record_night as health_night
    from tests.services.views.test_metrics import record_night as metrics_night

    ledger = Ledger()
    metrics_night(ledger)
    health_night(ledger, datetime.now(UTC) - timedelta(hours=2))
    start_transition(ledger, "p5-sim", "h100-a", "h100-b", run_id="t-1")
    return ledger


def test_the_readiness_tables_rows_are_the_gates_own(night):
    """The fleet-wide reads (every cluster at once, or a few clusters one by one, as the
    api-server's cache re-reads them) hold the rows the gate reads for one cluster when it
    decides a launch (``gather_facts`` without ``reads``)."""
    from gpufleet.domain.validation_kinds import ValidationKind
    from gpufleet.services.launch.gate import GATE_KINDS, LedgerReads
    from gpufleet.services.views.fleet_cache import pools_by_cluster, read_inputs

    by_cluster = pools_by_cluster(load_catalog().pools())
    ours = read_inputs(load_catalog(), night).reads
    assert ours.transitions and ours.states
    for cluster, pools in by_cluster.items():
        assert ours.transitions.get(cluster, []) == night.transitions_in_flight(cluster)
        assert {k: v for k, v in ours.states.items() if k[0] == cluster} == night.pool_states(
            cluster
        )
        assert ours.latest[cluster] == night.latest_validations(cluster, pools, GATE_KINDS)
    assert set(ours.latest) == set(by_cluster)
    assert LedgerReads.read(night, by_cluster, named=True) == ours
    health = {
        (cluster, pool): row
        for cluster, rows in night.latest_validations_by_cluster(
            by_cluster, (ValidationKind.HEALTH,)
        ).items()
        for (pool, _), row in rows.items()
    }
    assert health and {
        (c, pool): row for c, rows in ours.latest.items() for (pool, k), row in rows.items()
        if k == ValidationKind.HEALTH
    } == health  # fmt: skip


def test_rows_read_past_sqlalchemy_are_typed_as_sqlalchemy_types_them(ledger_url):  # noqa: F811
    """``store.rows.select_dicts`` (the fleet-wide reads' fast path) against SQLAlchemy's own
    rows: timestamps aware, JSON decoded, booleans strict, and on SQLite a hand-written value
    that is not a timestamp or a boolean comes back as stored, for the reader to refuse."""
    ledger = Ledger(ledger_url)
    ledger.record_validation(
        run_id="r", cluster="c", pool="p", kind="fabric", passed=True, started_at=NOW,
        finished_at=NOW, reasons=["a <b>"], details={"drift": [{"metric": "x"}], "n": 1.5},
    )  # fmt: skip
    ledger.set_pool_state("c", "p", "validated", "every pair passed")
    ledger.record_node_snapshot(
        "c", "p", {"nodes": 2, "ready": 2, "free": 1, "quarantined": 0, "busy": 1},
        [{"name": "n1"}], source="fabric", at=NOW,
    )  # fmt: skip
    if ledger_url.startswith("sqlite"):
        with ledger.engine.begin() as conn:
            conn.exec_driver_sql("PRAGMA ignore_check_constraints=ON")
            conn.execute(
                text(
                    "INSERT INTO gf_validations (run_id, cluster, pool, kind, passed, verdict, "
                    "reasons, details, started_at, finished_at) VALUES ('h', 'c', 'q', 'fabric',"
                    " 2, 'pass', '[]', '{}', 'yesterday', '2026-13-40 99:00:00')"
                )
            )
    snapshots = s.node_snapshots
    queries = [
        select(s.validations),
        select(s.pool_state),
        select(snapshots),
        select(*[c for c in snapshots.c if c.name != "detail"]),
        select(s.validations).where(s.validations.c.pool == "p"),  # bound: SQLAlchemy's path
    ]
    with ledger.engine.connect() as conn:
        for query in queries:
            expected = [dict(r._mapping) for r in conn.execute(query)]
            got = select_dicts(conn, query)
            assert got == expected and got
            assert [[type(v) for v in r.values()] for r in got] == [
                [type(v) for v in r.values()] for r in expected
            ]
    assert ledger.pool_states()[("c", "p")]["updated_at"].tzinfo is not None


def test_a_read_of_several_named_clusters_is_the_union_of_their_reads(ledger_url):  # noqa: F811
    """The reads a refresh of a few moved clusters makes (``store.rows.of_clusters``): naming
    several clusters answers their rows together, one name answers that cluster's, no name
    (an empty list) none, and ``None`` every cluster's; SQLite and PostgreSQL."""
    ledger = Ledger(ledger_url)
    counts = {"nodes": 2, "ready": 2, "free": 1, "quarantined": 1, "busy": 0}
    for c in ("a", "b", "c"):
        ledger.set_pool_state(c, "p", "validated", f"{c} passed")
        ledger.record_node_snapshot(c, "p", counts, [], source="fabric", at=NOW)
        quarantine(ledger, c, "p", f"{c}-n1", "bad link", run_id="r")
        start_transition(ledger, c, "p", "q", run_id=f"t-{c}")

    def reads(scope) -> list:
        return [
            sorted(ledger.pool_states(scope)),
            sorted(ledger.node_snapshots(scope, detail=False)),
            sorted((r["cluster"], r["node"]) for r in ledger.node_states(scope)),
            sorted((r["cluster"], r["node"]) for r in ledger.quarantined(scope)),
            sorted((r["cluster"], r["to_pool"]) for r in ledger.transitions_in_flight(scope)),
        ]

    def union(*scopes) -> list:
        return [sorted(sum(parts, [])) for parts in zip(*map(reads, scopes), strict=True)]

    assert reads(["a", "c"]) == union("a", "c")
    assert all(len(table) == 2 for table in reads(["a", "c"]))
    assert reads(["b"]) == reads("b") and all(len(table) == 1 for table in reads("b"))
    assert reads([]) == [[]] * 5
    assert reads(None) == union("a", "b", "c")


def test_the_catalogs_resolved_pools_are_its_lookups():
    catalog = load_catalog()
    refs = list(catalog.pools())
    assert refs == list(catalog.pools())  # resolved once, the same each time
    for ref in refs:
        assert catalog.pool(ref.cluster.name, ref.pool.name) == ref
    region = refs[-1].region.name
    assert list(catalog.pools(regions=[region])) == [r for r in refs if r.region.name == region]


def test_the_cycle_collector_resumes_after_the_last_fleet_wide_read():
    assert gc.isenabled()
    with cycle_collector_paused():
        assert not gc.isenabled()
        with cycle_collector_paused():  # nested
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), cycle_collector_paused():
        raise RuntimeError("a read that fails")
    assert gc.isenabled()
    # two threads: the collector resumes when the second one ends, not the first
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()

    def first() -> None:
        with cycle_collector_paused():
            first_in.set()
            second_in.wait(10)
        first_out.set()

    thread = threading.Thread(target=first)
    thread.start()
    first_in.wait(10)
    with cycle_collector_paused():
        second_in.set()
        first_out.wait(10)
        assert not gc.isenabled()
    thread.join(10)
    assert gc.isenabled()
    gc.disable()  # disabled by someone else: left so
    try:
        with cycle_collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_fleet_page_and_metrics_read_with_the_collector_paused(
    night,
    token,  # noqa: F811
    monkeypatch,
):
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from gpufleet.airflow.ui.app import create_app
    from gpufleet.services.views import fleet
    from tests.services.views.test_metrics import TOKEN, configure

    configure(monkeypatch)
    seen = []
    verdicts = fleet.pool_verdicts

    def watched(*args, **kwargs):
        seen.append(gc.isenabled())
        return verdicts(*args, **kwargs)

    monkeypatch.setattr(fleet, "pool_verdicts", watched)
    root = FastAPI()
    root.mount("/gpufleet", create_app())
    client = TestClient(root)
    for path, headers in (
        ("/gpufleet/fleet", auth(token)),
        ("/gpufleet/api/fleet", auth(token)),
        ("/gpufleet/metrics", {"Authorization": f"Bearer {TOKEN}"}),
    ):
        assert client.get(path, headers=headers).status_code == 200, path
    assert seen == [False, False, False]
    assert gc.isenabled()
