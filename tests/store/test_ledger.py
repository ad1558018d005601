"""The ledger on SQLite and on a throwaway PostgreSQL database at 127.0.0.1:5432 (skipped when it
does not answer; a failure under CI=true: tests/support/postgres.py)."""

from __future__ import annotations

import multiprocessing
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from gpufleet.domain.nodes import NodeTransitionError
from gpufleet.errors import LedgerError
from gpufleet.store import Ledger, connection_to_url, default_ledger_url, migrations
from gpufleet.store import schema as s
from tests.support.ledger_helpers import quarantine, release, start_transition
from tests.support.postgres import require_postgres


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def ledger_url(request, tmp_path):
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'ledger.db'}"
        return
    require_postgres()  # skips without PostgreSQL; fails under CI=true
    import psycopg2

    name = f"gpufleet_test_{uuid.uuid4().hex[:10]}"
    admin = psycopg2.connect(host="127.0.0.1", user="postgres", dbname="postgres")
    admin.autocommit = True
    admin.cursor().execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql+psycopg2://postgres@127.0.0.1:5432/{name}"
    finally:
        from gpufleet.store import database as module

        engine = module._engines.pop(f"postgresql+psycopg2://postgres@127.0.0.1:5432/{name}", None)
        if engine is not None:
            engine.dispose()
        admin.cursor().execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


NOW = datetime(2026, 11, 29, 2, 0, tzinfo=UTC)


def test_schema_is_created_once_and_versioned(ledger_url):
    ledger = Ledger(ledger_url)
    assert migrations.ensure_schema(ledger.engine) == s.SCHEMA_VERSION  # second call: no-op
    with ledger.engine.connect() as conn:
        versions = conn.execute(text("SELECT version_num FROM gf_alembic_version")).scalars().all()
    assert versions == [migrations.revision_of(s.SCHEMA_VERSION)]  # Alembic's, in its own table


def test_a_newer_schema_is_refused(ledger_url):
    ledger = Ledger(ledger_url)
    with ledger.engine.begin() as conn:  # a revision a newer gpufleet wrote
        newer = migrations.revision_of(s.SCHEMA_VERSION + 1)
        conn.execute(text(f"UPDATE gf_alembic_version SET version_num = '{newer}'"))
    with pytest.raises(LedgerError, match="newer than this gpufleet"):
        migrations.ensure_schema(ledger.engine)


def test_validation_with_pairs_round_trips(ledger_url):
    ledger = Ledger(ledger_url)
    vid = ledger.record_validation(
        run_id="r1",
        cluster="c",
        pool="p",
        kind="fabric",
        passed=False,
        started_at=NOW,
        finished_at=NOW + timedelta(minutes=5),
        expected_transport="gib",
        transport="socket",
        busbw_gbps=21.5,
        baseline_gbps=355,
        reasons=["NCCL used socket"],
        details={"page": True},
        pairs=[
            {
                "pass_no": 1,
                "node_a": "n0",
                "node_b": "n1",
                "passed": False,
                "transport": "socket",
                "gdrdma": False,
                "busbw_gbps": 21.5,
                "small_latency_us": 210.0,
                "wrong": 0,
                "reasons": ["NCCL used socket"],
            }
        ],
    )
    row = ledger.latest_validation("c", "p", "fabric")
    assert row["id"] == vid and row["transport"] == "socket" and row["passed"] is False
    assert row["finished_at"] == NOW + timedelta(minutes=5)
    assert row["finished_at"].tzinfo is not None
    assert row["reasons"] == ["NCCL used socket"] and row["details"] == {"page": True}
    (pair,) = ledger.pairs(vid)
    assert (pair["node_a"], pair["transport"], pair["busbw_gbps"]) == ("n0", "socket", 21.5)
    assert ledger.validations_for_run("r1")[0]["id"] == vid


def test_latest_and_history_order(ledger_url):
    ledger = Ledger(ledger_url)
    for night in range(5):
        ledger.record_validation(
            run_id=f"n{night}",
            cluster="c",
            pool="p",
            kind="fabric",
            passed=night != 3,
            busbw_gbps=350 + night,
            started_at=NOW + timedelta(days=night),
            finished_at=NOW + timedelta(days=night, minutes=3),
        )
    assert ledger.latest_validation("c", "p", "fabric")["run_id"] == "n4"
    assert ledger.latest_validation("c", "p", "storage") is None
    history = ledger.validation_history("c", "p", "fabric", limit=3)
    assert [h["run_id"] for h in history] == ["n2", "n3", "n4"]


def test_latest_validations_of_many_pools_agree_with_one_at_a_time(ledger_url):
    """The batched read (pages over thousands of pools) is the one-pool read, pair by pair:
    the highest id wins even when its clock says earlier, a pool without a row has none, and
    more pairs than one statement takes are read in several."""
    ledger = Ledger(ledger_url)
    pools = [f"p{i}" for i in range(120)]  # 240 (pool, kind) pairs: two statements
    for night in range(2):
        for i, pool in enumerate(pools):
            for kind in ("fabric", "storage") if i % 3 else ("fabric",):
                ledger.record_validation(
                    run_id=f"n{night}",
                    cluster="c",
                    pool=pool,
                    kind=kind,
                    passed=(i + night) % 2 == 0,
                    busbw_gbps=300.0 + i + night,
                    details={"night": night},
                    started_at=NOW - timedelta(days=night),  # the later row has the older clock
                    finished_at=NOW - timedelta(days=night, minutes=-3),
                )
    ledger.record_validation(  # another cluster's row never answers for this one
        run_id="n9",
        cluster="other",
        pool="p1",
        kind="fabric",
        passed=False,
        started_at=NOW,
        finished_at=NOW,
    )
    latest = ledger.latest_validations("c", [*pools, "missing"])
    for pool in [*pools, "missing"]:
        for kind in ("fabric", "storage"):
            assert latest.get((pool, kind)) == ledger.latest_validation("c", pool, kind)
    assert latest[("p1", "fabric")]["run_id"] == "n1" and latest[("p1", "fabric")]["details"] == {
        "night": 1
    }
    assert latest[("p1", "fabric")]["finished_at"].tzinfo is not None
    assert ("p0", "storage") not in latest and ("missing", "fabric") not in latest
    assert ledger.latest_validations("c", []) == {}


def test_the_latest_validations_follow_every_write_to_the_validations(ledger_url, monkeypatch):
    """v16: the table the fleet-wide reads join (``gf_latest_validations``) is kept by the
    database: rows written by hand with ids out of order, deleted, moved to another pool or
    renumbered still leave it naming each (cluster, pool, kind)'s highest id, as
    ``latest_validation`` reads it from the validations themselves; whatever the clusters to
    a statement and however the driver binds parameters."""
    from gpufleet.store import validations

    ledger = Ledger(ledger_url)
    at = NOW.replace(tzinfo=None) if ledger_url.startswith("sqlite") else NOW
    asked = {"c": ["p", "q", "r"], "d": ["p"], "e": []}
    kinds = ("fabric", "storage")

    def run(sql: str, **params) -> None:
        with ledger.engine.begin() as conn:
            conn.execute(text(sql), params)

    def add(vid: int, pool: str, kind: str = "fabric", cluster: str = "c") -> None:
        run(
            "INSERT INTO gf_validations (id, run_id, cluster, pool, kind, passed, verdict, "
            "reasons, details, started_at, finished_at) VALUES (:id, :run, :c, :p, :k, true, "
            "'pass', '[]', '{}', :at, :at)",
            id=vid, run=f"r{vid}", c=cluster, p=pool, k=kind, at=at,
        )  # fmt: skip

    def agree() -> dict:
        got = ledger.latest_validations_by_cluster(asked, kinds)
        assert set(got) == set(asked)
        for cluster, pools in asked.items():
            for pool in pools:
                for kind in kinds:
                    assert got[cluster].get((pool, kind)) == ledger.latest_validation(
                        cluster, pool, kind
                    )
        with ledger.engine.connect() as conn:
            kept = conn.execute(text("SELECT count(*) FROM gf_latest_validations")).scalar()
            distinct = "SELECT DISTINCT cluster, pool, kind FROM gf_validations"
            keys = conn.execute(text(f"SELECT count(*) FROM ({distinct}) k")).scalar()
        assert kept == keys
        return {c: {k: r["id"] for k, r in rows.items()} for c, rows in got.items()}

    add(10, "p"), add(5, "p"), add(12, "p", "storage"), add(7, "q"), add(3, "p", cluster="d")
    add(4, "p", "health")  # a kind not asked for
    assert agree() == {
        "c": {("p", "fabric"): 10, ("p", "storage"): 12, ("q", "fabric"): 7},
        "d": {("p", "fabric"): 3},
        "e": {},
    }
    monkeypatch.setattr(validations, "_CLUSTERS", 1)  # a statement per cluster
    assert agree()["c"] == {("p", "fabric"): 10, ("p", "storage"): 12, ("q", "fabric"): 7}
    monkeypatch.setattr(validations, "_MARKS", {})  # parameters bound by name
    assert agree()["d"] == {("p", "fabric"): 3}
    run("DELETE FROM gf_validations WHERE id = 10")
    assert agree()["c"][("p", "fabric")] == 5
    run("UPDATE gf_validations SET pool = 'r' WHERE id = 5")
    assert agree()["c"] == {("p", "storage"): 12, ("q", "fabric"): 7, ("r", "fabric"): 5}
    run("UPDATE gf_validations SET id = 20 WHERE id = 7")
    run("UPDATE gf_validations SET details = '{\"x\": 1}' WHERE id = 20")  # not the key
    assert agree()["c"][("q", "fabric")] == 20
    vid = ledger.record_validation(
        run_id="n", cluster="c", pool="q", kind="fabric", passed=False, started_at=NOW
    )
    # the highest id: PostgreSQL's sequence never saw the ids written by hand
    assert agree()["c"][("q", "fabric")] == max(vid, 20)
    run("DELETE FROM gf_validations")
    assert agree() == {"c": {}, "d": {}, "e": {}}


def test_naive_datetimes_are_refused(ledger_url):
    ledger = Ledger(ledger_url)
    with pytest.raises(Exception, match="aware datetimes"):
        ledger.record_validation(
            run_id="r",
            cluster="c",
            pool="p",
            kind="fabric",
            passed=True,
            started_at=datetime(2026, 1, 1),
        )


def test_pool_state_upserts_and_keeps_events(ledger_url):
    ledger = Ledger(ledger_url)
    assert ledger.pool_state("c", "p") is None
    ledger.set_pool_state("c", "p", "validated", "ok", "r1")
    ledger.set_pool_state("c", "p", "degraded", "fabric down", "r2")
    assert ledger.pool_state("c", "p")["state"] == "degraded"
    assert list(ledger.pool_states()) == [("c", "p")]
    assert ledger.count("gf_pool_events") == 2


def test_quarantine_is_idempotent_and_releasable(ledger_url):
    ledger = Ledger(ledger_url)
    assert quarantine(ledger, "c", "p", "n3", "low busbw", "r1") is True
    assert quarantine(ledger, "c", "p", "n3", "low busbw", "r2") is False
    assert [q["node"] for q in ledger.quarantined("c")] == ["n3"]
    with pytest.raises(NodeTransitionError, match="only a person may"):
        release(ledger, "c", "n3")  # no passing retest: the state machine refuses
    assert release(ledger, "c", "n3", by="alice") is True and ledger.quarantined("c") == []
    assert release(ledger, "c", "n3", by="alice") is False


def test_transitions_gate_decisions_and_launches(ledger_url):
    ledger = Ledger(ledger_url)
    tid = start_transition(ledger, "c", "old", "new", "r1")
    assert [t["to_pool"] for t in ledger.transitions_in_flight("c")] == ["new"]
    ledger.finish_transition(tid, "done")
    assert ledger.transitions_in_flight("c") == []
    gid = ledger.record_gate_decision(
        cluster="c", pools=["p"], nodes=2, launch=True, reasons=["fresh"], job="j", run_id="r1"
    )
    row, created = ledger.ensure_launch(
        cluster="c",
        namespace="ns",
        job="j",
        run_id="r1",
        pool="p",
        gate_decision_id=gid,
        state="submitted",
        expected_transport="gib",
    )
    assert created and row["gate_decision_id"] == gid
    ledger.update_launch(
        row["id"], state="confirmed", confirmed_transport="gib", ranks={"0": "gib", "1": "gib"}
    )
    launch = ledger.launch(row["id"])
    assert launch["state"] == "confirmed" and launch["ranks"] == {"0": "gib", "1": "gib"}
    assert ledger.gate_decisions()[0]["reasons"] == ["fresh"]
    assert ledger.gate_decision(gid)["run_id"] == "r1" and ledger.gate_decision(gid + 1) is None


LAUNCH = {"cluster": "c", "namespace": "ns", "job": "j"}


def test_a_launch_is_recorded_once_per_run(ledger_url):
    ledger = Ledger(ledger_url)
    first, created = ledger.ensure_launch(**LAUNCH, run_id="r1", pool="a", state="submitting")
    assert created
    again, created = ledger.ensure_launch(**LAUNCH, run_id="r1", pool="b", state="submitted")
    assert not created and again == first  # the recorded row, whatever the retry passed
    assert ledger.find_launch(**LAUNCH, run_id="r1") == first
    other, created = ledger.ensure_launch(**LAUNCH, run_id="r2", pool="b", state="submitting")
    assert created and other["id"] != first["id"] and ledger.count("gf_launches") == 2
    with pytest.raises(LedgerError, match="run_id is required"):
        ledger.ensure_launch(**LAUNCH, run_id="", pool="a", state="submitting")


def test_the_launch_key_holds_below_the_api(ledger_url):
    """The database itself refuses a second row for a launch (the unique index)."""
    ledger = Ledger(ledger_url)
    ledger.ensure_launch(**LAUNCH, run_id="r1", pool="a", state="submitting")
    now = datetime.now(UTC)
    row = {**LAUNCH, "run_id": "r1", "pool": "a", "state": "x", "created_at": now}
    with pytest.raises(IntegrityError), ledger.engine.begin() as conn:
        conn.execute(s.launches.insert().values(**row, updated_at=now))


def _ensure(url: str, barrier, worker: int) -> None:
    barrier.wait(30)
    Ledger(url).ensure_launch(**LAUNCH, run_id="r1", pool=f"p{worker}", state="submitting")


def test_racing_submits_record_one_launch(ledger_url):
    Ledger(ledger_url)  # the schema exists; the race is on the row
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(4)
    procs = [ctx.Process(target=_ensure, args=(ledger_url, barrier, w)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * 4
    assert Ledger(ledger_url).count("gf_launches") == 1


def _writer(url: str, worker: int) -> None:
    ledger = Ledger(url)
    for i in range(15):
        ledger.record_validation(
            run_id=f"w{worker}-{i}",
            cluster="c",
            pool=f"p{worker}",
            kind="fabric",
            passed=True,
            started_at=datetime.now(UTC),
        )
        ledger.set_pool_state("c", f"p{worker}", "validated")


def test_concurrent_task_processes(ledger_url):
    """Airflow runs every task in its own process: concurrent writers must all land."""
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(ledger_url, w)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    ledger = Ledger(ledger_url)
    assert ledger.count("gf_validations") == 60
    assert len(ledger.pool_states()) == 4


def test_a_forked_child_opens_its_own_connections_and_leaves_the_parents_alone():
    """A process that used the ledger, then forked (Celery's prefork pool, Airflow's task
    supervisor): the child's ledger works on a connection of its own, and the parent's pooled
    one still answers when the child has exited."""
    require_postgres()
    import os

    from gpufleet.store.database import _engines, engine_for

    url = f"postgresql+psycopg2://postgres@127.0.0.1:5432/postgres?application_name=fork-{uuid.uuid4().hex[:8]}"
    engine = engine_for(url)
    backend = "SELECT pg_backend_pid()"
    try:
        with engine.connect() as conn:
            parent = conn.execute(text(backend)).scalar()
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: answer its backend, then leave as a process does
            code = 1
            try:
                with engine_for(url).connect() as conn:
                    os.write(write, str(conn.execute(text(backend)).scalar()).encode())
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        os.close(write)
        child = os.read(read, 64).decode()
        os.close(read)
        assert os.waitstatus_to_exitcode(status) == 0
        assert child and int(child) != parent
        with engine.connect() as conn:  # the same pooled connection, still in step
            assert conn.execute(text(backend)).scalar() == parent
    finally:
        _engines.pop(url, None)
        engine.dispose()


def _open(url: str, barrier) -> None:
    barrier.wait(30)  # every process opens the fresh ledger at the same moment
    Ledger(url).set_pool_state("c", "p", "validated")


def test_many_processes_create_the_schema_at_once(ledger_url):
    """What Airflow does when a DAG's first tasks start together on a new ledger."""
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(6)
    procs = [ctx.Process(target=_open, args=(ledger_url, barrier)) for _ in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * 6
    ledger = Ledger(ledger_url)
    with ledger.engine.connect() as conn:  # one revision recorded, by one of the six
        assert conn.execute(text("SELECT count(*) FROM gf_alembic_version")).scalar() == 1
    assert ledger.count("gf_pool_events") == 6


def test_connection_urls(monkeypatch, tmp_path):
    class Conn:
        conn_type, host, login, password, schema, port = (
            "postgres",
            "db",
            "u",
            "p@ss",
            "led",
            5433,
        )
        extra_dejson: dict = {}

    assert connection_to_url(Conn) == "postgresql+psycopg2://u:p%40ss@db:5433/led"
    monkeypatch.setenv("AIRFLOW_CONN_GPUFLEET_LEDGER", "postgres://a:b@h:5432/x")
    assert default_ledger_url() == "postgresql+psycopg2://a:b@h:5432/x"
    monkeypatch.setenv(
        "AIRFLOW_CONN_GPUFLEET_LEDGER", '{"conn_type": "sqlite", "host": "/tmp/x.db"}'
    )
    assert default_ledger_url() == "sqlite:////tmp/x.db"
    monkeypatch.delenv("AIRFLOW_CONN_GPUFLEET_LEDGER")
    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(tmp_path))
    assert default_ledger_url() == f"sqlite:///{tmp_path / 'ledger.db'}"
    Conn.conn_type = "mysql"
    with pytest.raises(LedgerError, match="use postgres or sqlite"):
        connection_to_url(Conn)


def test_unreachable_ledger_says_so():
    with pytest.raises(LedgerError, match="cannot"):
        Ledger("postgresql+psycopg2://nobody@127.0.0.1:1/none")


@pytest.mark.parametrize(
    "sql",
    [
        "INSERT INTO gf_pool_state (cluster, pool, state, updated_at) "
        "VALUES ('c', 'p', 'Validated', '2026-11-29 02:00:00')",
        "INSERT INTO gf_pool_events (cluster, pool, state, at) "
        "VALUES ('c', 'p', 'validated ', '2026-11-29 02:00:00')",
        "INSERT INTO gf_transitions (cluster, from_pool, to_pool, state, started_at) "
        "VALUES ('c', 'a', 'b', 'paused', '2026-11-29 02:00:00')",
        "INSERT INTO gf_validations (run_id, cluster, pool, kind, passed, verdict, reasons, "
        "details, started_at, finished_at) VALUES ('r', 'c', 'p', 'fabric', 2, 'pass', '[]', "
        "'{}', '2026-11-29 02:00:00', '2026-11-29 02:00:00')",
        "INSERT INTO gf_validations (run_id, cluster, pool, kind, passed, verdict, reasons, "
        "details, started_at, finished_at) VALUES ('r', 'c', 'p', 'fabric', true, 'ok', '[]', "
        "'{}', '2026-11-29 02:00:00', '2026-11-29 02:00:00')",
        "INSERT INTO gf_validations (run_id, cluster, pool, kind, passed, verdict, reasons, "
        "details, started_at, finished_at) VALUES ('r', 'c', 'p', 'fabric', false, 'pass', "
        "'[]', '{}', '2026-11-29 02:00:00', '2026-11-29 02:00:00')",
        "INSERT INTO gf_validations (run_id, cluster, pool, kind, passed, verdict, reasons, "
        "details, started_at, finished_at) VALUES ('r', 'c', 'p', 'Fabric', true, 'pass', "
        "'[]', '{}', '2026-11-29 02:00:00', '2026-11-29 02:00:00')",
    ],
)
def test_the_check_constraints_refuse_unknown_states_and_flags_at_insert(ledger_url, sql):
    from sqlalchemy.exc import DBAPIError

    ledger = Ledger(ledger_url)
    with pytest.raises(DBAPIError), ledger.engine.begin() as conn:
        conn.execute(text(sql))


def test_record_validation_error_is_the_latest_with_verdict_error(ledger_url):
    ledger = Ledger(ledger_url)
    ledger.record_validation(
        run_id="r1", cluster="c", pool="p", kind="fabric", passed=True, started_at=NOW
    )
    vid = ledger.record_validation_error("r2", "c", "p", "fabric", "busbw=abc")
    row = ledger.latest_validation("c", "p", "fabric")
    assert (row["id"], row["verdict"], row["passed"], row["reasons"]) == (
        vid,
        "error",
        False,
        ["busbw=abc"],
    )


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "postgresql+psycopg2://ci-user:s3cret@db.internal:5432/gpufleet_ledger?sslmode=require",
            "postgresql+psycopg2://db.internal:5432/gpufleet_ledger?sslmode=require",
        ),
        ("postgresql://ci-user@db.internal/ledger", "postgresql://db.internal/ledger"),
        ("sqlite:////var/lib/gpufleet/ledger.db", "sqlite:////var/lib/gpufleet/ledger.db"),
    ],
)
def test_a_ledger_url_is_shown_without_user_info(url, shown):
    from gpufleet.store.database import display_url

    assert display_url(url) == shown


def test_small_latencies_take_the_recorded_figure_else_the_pairs_median(ledger_url):
    ledger = Ledger(ledger_url)

    def pair(latency, passed=True, pass_no=1):
        return {"pass_no": pass_no, "node_a": "a", "node_b": "b", "passed": passed,
                "small_latency_us": latency, "reasons": []}  # fmt: skip

    pairs = [pair(30.0), pair(40.0), pair(50.0), pair(900.0, passed=False), pair(1.0, pass_no=2)]
    ids = [
        ledger.record_validation(
            run_id=f"n{i}",
            cluster="c",
            pool="p",
            kind="fabric",
            passed=True,
            started_at=NOW,
            finished_at=NOW,
            details=details,
            pairs=pairs,
        )  # fmt: skip
        for i, details in enumerate([{"small_latency_us": 33.3}, {}, {}])
    ]
    ledger.record_validation(
        run_id="n3", cluster="c", pool="q", kind="fabric", passed=True,
        started_at=NOW, finished_at=NOW, pairs=[pair(7.0, passed=False)],
    )  # fmt: skip
    rows = [ledger.latest_validation("c", "q", "fabric"), *ledger.validations_for_run("n0")]
    rows += ledger.validations_for_run("n1")
    got = ledger.small_latencies(rows)
    assert got[ids[0]] == 33.3  # recorded tonight: not recomputed
    assert got[ids[1]] == 40.0  # the median of the passing first-pass pairs only
    assert got[rows[0]["id"]] is None and ids[2] not in got  # no passing pair; not asked
