"""The ledger's Alembic revisions, on SQLite and PostgreSQL: a ledger of every earlier schema
version (built by upgrading an empty database to that revision through Alembic, as the old
code left it: with its ``gf_schema_version`` table, or stamped by Alembic) upgrades to head
with its rows and today's constraints; a new ledger is created at head; a newer one is refused."""

from __future__ import annotations

import multiprocessing
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import Column, Integer, MetaData, Table, inspect, text
from sqlalchemy.exc import DBAPIError, IntegrityError

from gpufleet.domain.signals import Response, Signal, Source
from gpufleet.errors import LedgerError
from gpufleet.store import Ledger, migrations
from gpufleet.store import schema as s
from gpufleet.store.database import engine_for
from tests.store.test_ledger import (
    LAUNCH,
    ledger_url,  # noqa: F401  (fixture: SQLite and PostgreSQL)
)
from tests.support.ledger_helpers import hold_region_lock, start_transition

NOW = datetime(2026, 11, 29, 2, 0, tzinfo=UTC)
EARLIER = range(1, s.SCHEMA_VERSION)  # every version a ledger can be upgraded from


def build(url: str, version: int, legacy: bool = True):
    """A ledger at schema ``version``, built through Alembic; ``legacy``: as the code before
    Alembic left it (``gf_schema_version`` holding 1..version, no ``gf_alembic_version``)."""
    engine = engine_for(url)
    with engine.begin() as conn:
        command.upgrade(migrations.alembic_config(conn), migrations.revision_of(version))
        if legacy:
            conn.execute(text(f"DROP TABLE {migrations.VERSION_TABLE}"))
            old = Table(
                migrations.LEGACY_VERSION_TABLE,
                MetaData(),
                Column("version", Integer, primary_key=True),
                s._ts("applied_at", nullable=False),
            )
            old.create(conn)
            conn.execute(
                old.insert(), [{"version": v, "applied_at": NOW} for v in range(1, version + 1)]
            )
    engine.dispose()  # SQLite: connections opened before a CHECK rewrite keep the old schema
    return engine


def _at(url: str):
    return NOW.replace(tzinfo=None) if url.startswith("sqlite") else NOW


def insert(conn, url: str, table: str, **row) -> None:
    row = {k: (_at(url) if v is NOW else v) for k, v in row.items()}
    names = ", ".join(row)
    conn.execute(text(f"INSERT INTO {table} ({names}) VALUES (:{', :'.join(row)})"), row)


def _validation(passed: bool, run: str, **more) -> dict:
    return dict(run_id=run, cluster="c", pool="p", kind="fabric", passed=passed,
                reasons="[]", details="{}", started_at=NOW, finished_at=NOW, **more)  # fmt: skip


def write_typical_rows(conn, url: str, version: int) -> None:
    """Rows a ledger of ``version`` held, in that version's columns."""
    verdict = {"verdict": "pass"} if version >= 3 else {}
    insert(conn, url, "gf_validations", **_validation(True, "v-pass", **verdict))
    insert(
        conn,
        url,
        "gf_validations",
        **_validation(False, "v-fail", **({"verdict": "error"} if version >= 3 else {})),
    )
    launches = [("r1", "a", "submitted"), ("r1", "b", "confirmed"), ("r2", "a", "confirmed")]
    if version == 1:  # what retried submits left before the launch key
        launches += [(None, "a", "stopped"), (None, "a", "confirmed")]
    else:
        launches = launches[1:]
    for run, pool, state in launches:
        insert(conn, url, "gf_launches", **LAUNCH, run_id=run, pool=pool, state=state,
               ranks="{}", reasons="[]", created_at=NOW, updated_at=NOW)  # fmt: skip
    insert(conn, url, "gf_gate_decisions", cluster="c", pools='["p"]', nodes=2, launch=True,
           reasons="[]", decided_at=NOW)  # fmt: skip
    insert(conn, url, "gf_pool_state", cluster="c", pool="p", state="validated", updated_at=NOW)
    insert(conn, url, "gf_transitions", cluster="c", from_pool="a", to_pool="b",
           state="running", run_id="run-1", started_at=NOW)  # fmt: skip
    if version >= 6:
        insert(conn, url, "gf_regions", region="r", state="ready", run_id="r0", updated_at=NOW)
    if version >= 8:
        insert(conn, url, "gf_node_states", cluster="c", node="n1", pool="p", state="quarantined",
               failed_repairs=0, evidence="{}", since=NOW)  # fmt: skip
    if version >= 18:  # a signal the event path recorded and acted on
        insert(conn, url, "gf_node_signals", cluster="c", node="n1", pool="p", source="xid",
               what="79", response="quarantine", reason="Xid 79", observed_at=NOW, version="7",
               count=1, recorded_at=NOW)  # fmt: skip


SIGNAL = (
    "INSERT INTO gf_node_signals (cluster, node, source, what, response, reason, observed_at, "
    "version, count, recorded_at) VALUES ('c', 'n', 'lifecycle', '{response}', '{response}', "
    "'r', :at, '1', 1, :at)"
)
REFUSED = [  # what today's CHECKs refuse (v4, widened by v9 and v15)
    "INSERT INTO gf_gate_decisions (cluster, pools, nodes, launch, reasons, decided_at) "
    "VALUES ('c', '[]', 1, 2, '[]', :at)",
    "INSERT INTO gf_pool_state (cluster, pool, state, updated_at) VALUES ('c', 'q', 'wobbly', :at)",
    "INSERT INTO gf_pool_events (cluster, pool, state, at) VALUES ('c', 'q', 'Validated', :at)",
    "INSERT INTO gf_transitions (cluster, from_pool, to_pool, state, started_at) "
    "VALUES ('d', 'a', 'b', 'paused', :at)",
    "INSERT INTO gf_validations (run_id, cluster, pool, kind, passed, verdict, reasons, details, "
    "started_at, finished_at) VALUES ('r', 'c', 'p', 'Fabric', true, 'pass', '[]', '{}', :at, :at)",
    "INSERT INTO gf_validations (run_id, cluster, pool, kind, passed, verdict, reasons, details, "
    "started_at, finished_at) VALUES ('r', 'c', 'p', 'gpu', true, 'pass', '[]', '{}', :at, :at)",
    "INSERT INTO gf_validations (run_id, cluster, pool, kind, passed, verdict, reasons, details, "
    "started_at, finished_at) VALUES ('r', 'c', 'p', 'fabric', false, 'pass', '[]', '{}', :at, "
    ":at)",
    "INSERT INTO gf_validations (run_id, cluster, pool, kind, passed, verdict, reasons, details, "
    "started_at, finished_at) VALUES ('r', 'c', 'p', 'fabric', true, 'ok', '[]', '{}', :at, :at)",
    # v12: a snapshot counting more ready nodes than it has
    "INSERT INTO gf_node_snapshots (cluster, pool, taken_at, source, nodes, ready, free, "
    "quarantined, busy, detail) VALUES ('c', 'p', :at, 'fabric', 2, 3, 0, 0, 0, '[]')",
    # v18, widened by v21: a node signal's response
    SIGNAL.format(response="park"),
]


def assert_constraints_hold(ledger: Ledger, url: str) -> None:
    for sql in REFUSED:
        with pytest.raises(DBAPIError), ledger.engine.begin() as conn:
            conn.execute(text(sql), {"at": _at(url)})
    ledger.set_pool_state("c", "p", "drifting", "busbw 4% below its median")  # v9
    assert ledger.pool_state("c", "p")["state"] == "drifting"
    ledger.record_validation(  # v15: a pool's GPU health check
        run_id="r-health", cluster="c", pool="p", kind="health", passed=True, started_at=NOW
    )
    assert ledger.latest_validation("c", "p", "health")["run_id"] == "r-health"
    with ledger.engine.begin() as conn:  # v21: the NotReady hold and its lift
        for response in ("hold", "lift"):
            conn.execute(text(SIGNAL.format(response=response)), {"at": _at(url)})
    found, created = ledger.ensure_launch(**LAUNCH, run_id="r1", pool="c", state="submitting")
    assert not created and found["pool"] == "b"  # v2: the key
    with pytest.raises(IntegrityError):  # v7: one running transition per cluster
        start_transition(ledger, "c", "a", "b", run_id="run-9")


@pytest.mark.parametrize("version", EARLIER)
def test_a_ledger_of_every_earlier_version_upgrades_with_its_rows(ledger_url, version):  # noqa: F811
    # a version the code before Alembic could write is built as that code left it
    engine = build(ledger_url, version, legacy=version <= migrations.LAST_LEGACY_VERSION)
    with engine.begin() as conn:
        write_typical_rows(conn, ledger_url, version)
    if 4 <= version < 9:  # its CHECKs are version 4's: no drifting yet
        with pytest.raises(DBAPIError), engine.begin() as conn:
            insert(
                conn, ledger_url, "gf_pool_events", cluster="c", pool="p", state="drifting", at=NOW
            )
    if 4 <= version < 15:  # its kind CHECK is version 4's: no health rows yet
        with pytest.raises(DBAPIError), engine.begin() as conn:
            row = {**_validation(True, "v-h", verdict="pass"), "kind": "health"}
            insert(conn, ledger_url, "gf_validations", **row)

    assert migrations.ensure_schema(engine) == s.SCHEMA_VERSION
    assert migrations.ensure_schema(engine) == s.SCHEMA_VERSION  # at head: nothing to do
    engine.dispose()
    tables = set(inspect(engine).get_table_names())
    assert migrations.VERSION_TABLE in tables and migrations.LEGACY_VERSION_TABLE not in tables
    with engine.connect() as conn:
        assert migrations.current_revision(conn) == migrations.head() == "0022"
    ledger = Ledger(ledger_url)

    by_run = {r["run_id"]: r for r in ledger.validations_for_run("v-pass")}
    by_run |= {r["run_id"]: r for r in ledger.validations_for_run("v-fail")}
    assert (by_run["v-pass"]["verdict"], by_run["v-pass"]["passed"]) == ("pass", True)  # v3
    assert by_run["v-fail"]["verdict"] == ("fail" if version < 3 else "error")
    kept = sorted(ledger.launches(), key=lambda r: r["id"])
    expected = [("r1", "b", "confirmed"), ("r2", "a", "confirmed")]
    if version == 1:  # v2: the newest row of each launch kept, rows without a run named
        expected += [(f"legacy-{kept[2]['id']}", "a", "stopped")]
        expected += [(f"legacy-{kept[3]['id']}", "a", "confirmed")]
    assert [(r["run_id"], r["pool"], r["state"]) for r in kept] == expected
    with engine.connect() as conn:
        assert conn.execute(text("SELECT pool FROM gf_gate_decisions")).scalars().all() == [None]
    row = ledger.running_transition("c")  # v10: the lease columns, NULL on old rows
    assert (row["run_id"], row["dag_id"], row["heartbeat_at"], row["step"]) == (
        "run-1", None, None, None)  # fmt: skip
    if version >= 6:
        assert ledger.region_state("r")["state"] == "ready"
    assert hold_region_lock(ledger, "r", "region_onboarding", "r1", NOW)["run_id"] == "r1"
    latest = ledger.latest_validations("c", ["p"], ("fabric",))  # v16: filled from the rows
    assert latest[("p", "fabric")] == ledger.latest_validation("c", "p", "fabric")
    assert latest[("p", "fabric")]["run_id"] == "v-fail"
    assert ledger.node_snapshots() == {}  # v12: no snapshot until a task lists the pool
    assert ledger.approvals() == []  # v20: no request until a destructive step asks
    if version >= 18:  # v22: a signal recorded before was acted on then: a replay is nothing
        xid = Signal("c", "n1", Source.XID, "79", Response.QUARANTINE, "Xid 79", NOW, "p")
        assert ledger.record_signals([replace(xid, version="7")]) == []
    versions = ledger.cluster_versions()  # v17: empty until a write; then the writes move it
    ledger.set_pool_state("c", "p", "validated")
    assert ledger.cluster_versions()["c"] > versions.get("c", 0)
    assert ledger.validation_lock("c", "p", "fabric").hold("d", "r1", NOW)["run_id"] == "r1"  # v13
    lock = ledger.validation_lock("c", "fs", "filesystem")  # v14: a holder inside the run
    assert lock.hold("d", "r1", NOW, holder="c/p")["holder"] == "c/p"
    assert_constraints_hold(ledger, ledger_url)


@pytest.mark.parametrize("version", [1, 8])
def test_a_ledger_alembic_stamped_at_an_earlier_revision_upgrades(ledger_url, version):  # noqa: F811
    engine = build(ledger_url, version, legacy=False)
    with engine.begin() as conn:
        write_typical_rows(conn, ledger_url, version)
    assert migrations.ensure_schema(engine) == s.SCHEMA_VERSION
    assert_constraints_hold(Ledger(ledger_url), ledger_url)


def test_a_v9_ledger_gives_the_running_transition_a_lease(ledger_url):  # noqa: F811
    """A transition running before v10 keeps its holder, its lease counting from when it
    started, and is taken over by compare-and-set once that lease expired."""
    from gpufleet.domain.leases import LEASE_TTL, holder_dead

    engine = build(ledger_url, 9)
    with engine.begin() as conn:
        write_typical_rows(conn, ledger_url, 9)
    ledger = Ledger(ledger_url)
    row = ledger.running_transition("c")
    unknown = lambda dag_id, run_id: None  # noqa: E731
    lapsed = NOW + LEASE_TTL + timedelta(minutes=1)
    assert not holder_dead(row, unknown, NOW + LEASE_TTL - timedelta(minutes=5), dag_id="d")
    assert holder_dead(row, unknown, lapsed, dag_id="d")
    assert ledger.take_over_transition(row["id"], row, "run-2", "d", lapsed)
    assert not ledger.take_over_transition(row["id"], row, "run-3", "d", lapsed)  # one winner
    assert ledger.running_transition("c")["run_id"] == "run-2"


def test_a_v10_ledger_carries_its_quarantines_into_the_node_lifecycle(ledger_url):  # noqa: F811
    """v11: gf_quarantined_nodes goes; its open rows become node states ``quarantined`` (the
    reason and run id as evidence) with an event, a released row stays released, a node the
    lifecycle already holds keeps its state, and the readers read the node states."""
    engine = build(ledger_url, 10)
    later = NOW + timedelta(hours=1)
    with engine.begin() as conn:
        for node, reason, run, released in [
            ("n1", "pair below threshold", "night-1", None),  # open, no lifecycle row
            ("n2", "NIC down", "night-1", later),  # released
            ("n3", "sockets", "night-2", None),  # open, the lifecycle holds it (v8 code)
            ("n4", "old fault", "night-0", later),  # released, then quarantined again
            ("n4", "new fault", "night-3", None),
        ]:
            insert(conn, ledger_url, "gf_quarantined_nodes", cluster="c", pool="p", node=node,
                   reason=reason, run_id=run, quarantined_at=NOW,
                   released_at=released and (_at(ledger_url) + timedelta(hours=1)))  # fmt: skip
        insert(conn, ledger_url, "gf_node_states", cluster="c", node="n3", pool="p",
               state="retesting", failed_repairs=0, evidence="{}", since=NOW)  # fmt: skip
        insert(conn, ledger_url, "gf_node_events", cluster="c", node="n3", pool="p",
               to_state="quarantined", reason="sockets", evidence="{}", run_id="night-2",
               at=NOW)  # fmt: skip
        insert(conn, ledger_url, "gf_node_events", cluster="c", node="n3", pool="p",
               from_state="quarantined", to_state="retesting", evidence="{}", at=NOW)  # fmt: skip

    assert migrations.ensure_schema(engine) == s.SCHEMA_VERSION == 22
    engine.dispose()
    assert "gf_quarantined_nodes" not in inspect(engine).get_table_names()
    ledger = Ledger(ledger_url)
    n1 = ledger.node_state("c", "n1")
    assert (n1["state"], n1["reason"], n1["pool"]) == ("quarantined", "pair below threshold", "p")
    assert n1["evidence"]["run_id"] == "night-1" and n1["evidence"]["reason"] == n1["reason"]
    history = ledger.node_history("c", "n1")
    assert [(e["from_state"], e["to_state"], e["run_id"]) for e in history] == [
        (None, "quarantined", "night-1")
    ]
    assert ledger.node_state("c", "n2") is None  # released: in service, its history kept
    assert [e["to_state"] for e in ledger.node_history("c", "n2")] == ["quarantined", "released"]
    assert ledger.node_state("c", "n3")["state"] == "retesting"  # the lifecycle's own
    assert len(ledger.node_history("c", "n3")) == 2
    assert [e["to_state"] for e in ledger.node_history("c", "n4")] == [
        "quarantined", "released", "quarantined"]  # fmt: skip
    quarantined = {q["node"]: q for q in ledger.quarantined("c")}
    assert sorted(quarantined) == ["n1", "n3", "n4"]
    assert (quarantined["n4"]["reason"], quarantined["n4"]["run_id"]) == ("new fault", "night-3")
    assert quarantined["n1"]["quarantined_at"] is not None
    assert [q["node"] for q in ledger.quarantined("c", "p")] == ["n1", "n3", "n4"]
    assert ledger.quarantined("other") == []


def test_a_new_ledger_is_created_at_head_and_matches_one_upgraded_from_the_start(ledger_url):  # noqa: F811
    """``metadata.create_all`` + stamp (a new ledger) and revision 0001..head give the same
    tables, columns, indexes and triggers: schema.py and the revisions agree."""
    ledger = Ledger(ledger_url)
    with ledger.engine.connect() as conn:
        assert migrations.current_revision(conn) == migrations.head()
    fresh = _shape(ledger.engine)
    assert {"gf_latest_validations_insert", "gf_latest_validations_keep"} & set(fresh["triggers"])
    assert sum(n.startswith("gf_cluster_versions") for n in fresh["triggers"]) >= 7
    other = ledger_url.replace("ledger.db", "other.db") if "sqlite" in ledger_url else None
    if other is None:  # PostgreSQL: a second schema-less database is the fixture's; reuse it
        with ledger.engine.begin() as conn:
            for table in reversed(s.metadata.sorted_tables):
                conn.execute(text(f"DROP TABLE {table.name} CASCADE"))
            conn.execute(text(f"DROP TABLE {migrations.VERSION_TABLE}"))
        other = ledger_url
    engine = engine_for(other)
    with engine.begin() as conn:
        command.upgrade(migrations.alembic_config(conn), "head")
    assert _shape(engine) == fresh


def _shape(engine) -> dict:
    engine.dispose()
    insp = inspect(engine)
    shape = {}
    for table in sorted(insp.get_table_names()):
        columns = [(c["name"], c["nullable"], str(c["type"])) for c in insp.get_columns(table)]
        indexes = {(i["name"], tuple(i["column_names"]), bool(i["unique"]))
                   for i in insp.get_indexes(table)}  # fmt: skip
        shape[table] = (sorted(columns), indexes)
    with engine.connect() as conn:  # v16: the triggers keeping gf_latest_validations (not
        # version 4's CHECKs, which an upgraded SQLite ledger holds as triggers)
        if engine.dialect.name == "sqlite":
            sql = "SELECT name FROM sqlite_master WHERE type = 'trigger'"
        else:
            sql = "SELECT trigger_name FROM information_schema.triggers"
        names = set(conn.execute(text(sql)).scalars())
        keeps = ("gf_latest_validations", "gf_cluster_versions")  # v17: the cluster versions
        shape["triggers"] = sorted(n for n in names if n.startswith(keeps))
    return shape


def test_a_legacy_ledger_newer_than_the_code_is_refused(ledger_url):  # noqa: F811
    engine = build(ledger_url, 9)
    with engine.begin() as conn:
        conn.execute(
            text(f"INSERT INTO {migrations.LEGACY_VERSION_TABLE} VALUES (:v, :at)"),
            {"v": s.SCHEMA_VERSION + 1, "at": _at(ledger_url)},
        )
    with pytest.raises(LedgerError, match="newer than this gpufleet"):
        migrations.ensure_schema(engine)


def test_one_revision_per_schema_version_in_one_line():
    scripts = migrations._scripts()
    chain = [r.revision for r in scripts.walk_revisions()][::-1]
    assert chain == [migrations.revision_of(v) for v in range(1, s.SCHEMA_VERSION + 1)]
    assert migrations.head() == migrations.revision_of(s.SCHEMA_VERSION)
    files = sorted(p.name[:4] for p in (migrations.SCRIPTS / "versions").glob("0*.py"))
    assert files == chain


def _open(url: str, barrier) -> None:
    barrier.wait(30)  # every process opens the old ledger at the same moment
    Ledger(url).set_pool_state("c", "p", "drifting")


def test_many_processes_upgrade_an_old_ledger_at_once(ledger_url):  # noqa: F811
    """What Airflow does when the first tasks after an upgrade of gpufleet start together."""
    build(ledger_url, 3)
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(4)
    procs = [ctx.Process(target=_open, args=(ledger_url, barrier)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * 4
    ledger = Ledger(ledger_url)
    with ledger.engine.connect() as conn:
        assert migrations.current_revision(conn) == migrations.head()
    assert ledger.count("gf_pool_events") == 4


def test_a_ledger_at_head_is_opened_with_one_read_and_no_lock(ledger_url):  # noqa: F811
    """Every task process opens the ledger: one at head costs one statement, without the
    schema lock, the table listing or DDL (a new or older ledger takes the locked path: the
    tests above)."""
    from sqlalchemy import event

    Ledger(ledger_url)  # created at head
    engine = engine_for(ledger_url)
    seen: list[str] = []

    def record(_conn, _cursor, statement, *_rest):
        seen.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    try:
        assert migrations.ensure_schema(engine) == s.SCHEMA_VERSION
    finally:
        event.remove(engine, "before_cursor_execute", record)
    assert seen == [f"SELECT version_num FROM {migrations.VERSION_TABLE}"]


def test_the_scripts_ship_with_the_package():
    """Every file Alembic reads at run time is package data (the ledger upgrades from a wheel)."""
    import tomllib
    from fnmatch import fnmatch

    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["gpufleet.store"]
    package = migrations.SCRIPTS.parent
    shipped = [
        p for p in migrations.SCRIPTS.rglob("*") if p.is_file() and "__pycache__" not in p.parts
    ]
    assert len(shipped) == s.SCHEMA_VERSION + 2  # env.py, script.py.mako, one per version
    for path in shipped:
        name = path.relative_to(package).as_posix()
        assert any(fnmatch(name, pattern) for pattern in patterns), name
