"""Property tests at the ledger reader's boundary (issue 8): whatever rows an older schema or
a hand-edited database could hold (any state string, any boolean-ish value, any timestamp past
or future, in any order of insertion), the real reading code and gate launch only when an
oracle written here, not calling the gate, says every fact is sound; every decision is recorded.

Rows are written with raw SQL under ``PRAGMA ignore_check_constraints=ON``, past the ledger's
CHECKs. The figures (ledgers generated, launches, refusals, crashes) are printed at the end
(``pytest -s``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from gpufleet.config.catalog import load_catalog
from gpufleet.services.launch.gate import check_gate
from gpufleet.store import Ledger

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
CLUSTER, POOL, OTHER = "a3u-sim", "h200-a", "h200-b"
FIGURES = {"ledgers": 0, "launches": 0, "refusals": 0, "crashes": 0}

states = st.sampled_from(
    ["ready", "validated", "degraded", "suspect", "transitioning", "retired"]
    + ["Validated", "ready ", " validated", "VALIDATED", "green", "", "validated\n"]
) | st.text(max_size=12)
flags = st.sampled_from([0, 1, True, False, 1.0, 0.0, 2, -1, "1", "yes", "true", "false", b"\x01"])
verdicts = st.sampled_from(["pass", "fail", "error", "Pass", "pass ", "", "ok"])
offsets = st.one_of(
    st.timedeltas(min_value=timedelta(hours=-30), max_value=timedelta(minutes=10)),
    st.timedeltas(min_value=timedelta(days=-400), max_value=timedelta(days=400)),
)
stamps = offsets.map(lambda d: (NOW + d).strftime("%Y-%m-%d %H:%M:%S.%f")) | st.sampled_from(
    ["yesterday", "", "2026-13-40 99:00:00", "0"]
)
fresh = st.timedeltas(min_value=timedelta(hours=-25), max_value=timedelta(minutes=4)).map(
    lambda d: (NOW + d).strftime("%Y-%m-%d %H:%M:%S.%f")
)
sound_row = st.fixed_dictionaries(  # what a healthy ledger holds: most examples come near it
    {
        "kind": st.sampled_from(["fabric", "storage"]),
        "passed": st.just(1),
        "verdict": st.just("pass"),
        "transport": st.just("gib"),
        "finished_at": fresh,
    }
)
any_row = st.fixed_dictionaries(
    {
        "kind": st.sampled_from(["fabric", "storage"]),
        "passed": flags,
        "verdict": verdicts,
        "transport": st.sampled_from(["gib", "GIB", "socket", None]),
        "finished_at": stamps,
    }
)
validation_row = sound_row | any_row
transition_row = st.fixed_dictionaries(
    {
        "pool": st.sampled_from([POOL, OTHER]),
        "state": st.sampled_from(
            ["running", "done", "rolled_back", "failed", "Running", "done ", "paused"]
        ),
    }
)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GPUFLEET_STATE_DIR", str(tmp_path_factory.mktemp("props") / "gpufleet"))
        ledger = Ledger()
        catalog = load_catalog()
        yield catalog, ledger
    print(f"\nledger properties: {FIGURES}")


def _write(ledger, pool_state, validations, transitions) -> None:
    with ledger.engine.begin() as conn:
        conn.exec_driver_sql("PRAGMA ignore_check_constraints=ON")
        for table in ("gf_validations", "gf_pool_state", "gf_transitions"):
            conn.execute(text(f"DELETE FROM {table}"))
        if pool_state is not None:
            conn.execute(
                text(
                    "INSERT INTO gf_pool_state (cluster, pool, state, updated_at) "
                    "VALUES (:c, :p, :s, '2026-11-29 11:00:00.000000')"
                ),
                {"c": CLUSTER, "p": POOL, "s": pool_state},
            )
        for v in validations:  # in the order generated: that is the insertion order
            conn.execute(
                text(
                    "INSERT INTO gf_validations (run_id, cluster, pool, kind, passed, verdict,"
                    " transport, reasons, details, started_at, finished_at) VALUES ('r', :c,"
                    " :p, :kind, :passed, :verdict, :transport, '[]', '{}', :finished_at,"
                    " :finished_at)"
                ),
                {"c": CLUSTER, "p": POOL, **v},
            )
        for t in transitions:
            conn.execute(
                text(
                    "INSERT INTO gf_transitions (cluster, from_pool, to_pool, state, started_at)"
                    " VALUES (:c, :p, 'elsewhere', :s, '2026-11-29 11:00:00.000000')"
                ),
                {"c": CLUSTER, "p": t["pool"], "s": t["state"]},
            )


def _oracle(pool_state, validations, transitions, nodes: int, expected: str) -> bool:
    """Independent: is every fact about the pool sound (and can it hold the job)?"""

    def sound(kind: str, transport_needed: str | None) -> bool:
        rows = [v for v in validations if v["kind"] == kind]
        if not rows:
            return False
        last = rows[-1]  # the last inserted, whatever its date
        flag = last["passed"]
        if isinstance(flag, str) and flag.strip().isdigit():
            flag = int(flag)  # the column's numeric affinity stores the text "1" as the integer 1
        if isinstance(flag, (str, bytes)) or flag != 1:
            return False
        try:
            at = datetime.strptime(last["finished_at"], "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=UTC)
        except ValueError:
            return False
        fresh = NOW - timedelta(hours=26) <= at <= NOW + timedelta(minutes=5)
        good_transport = transport_needed is None or last["transport"] == transport_needed
        return last["verdict"] == "pass" and fresh and good_transport

    known_transitions = {"running", "done", "rolled_back", "failed"}
    touching = [t["state"] for t in transitions if t["pool"] == POOL]
    return (
        pool_state in ("ready", "validated")
        and sound("fabric", expected)
        and sound("storage", None)  # h200-a mounts a Lustre filesystem
        and all(s in known_transitions for s in touching)
        and "running" not in touching
        and nodes <= 6  # the simulated pool's free nodes
    )


@settings(
    max_examples=1000,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    pool_state=st.sampled_from(["validated", "ready"]) | st.none() | states,
    validations=st.lists(validation_row, max_size=5).map(
        lambda rows: (
            [
                {**r, "kind": k, "passed": 1, "verdict": "pass", "transport": "gib"}
                for r, k in zip(rows[:2], ("fabric", "storage"), strict=False)
            ]
            + rows[2:]
        )
    )
    | st.lists(validation_row, max_size=5),
    # at most one running transition per cluster: the ledger's lock (v7) refuses a second
    transitions=st.lists(transition_row, max_size=2).filter(
        lambda ts: sum(t["state"] == "running" for t in ts) <= 1
    ),
    nodes=st.integers(1, 8),
)
def test_the_gate_launches_only_on_sound_facts(fleet, pool_state, validations, transitions, nodes):
    catalog, ledger = fleet
    _write(ledger, pool_state, validations, transitions)
    before = ledger.count("gf_gate_decisions")
    FIGURES["ledgers"] += 1
    try:
        decision = check_gate(catalog, lambda: ledger, CLUSTER, [POOL], nodes, now=NOW)
    except Exception:
        FIGURES["crashes"] += 1
        raise
    expected = catalog.pool(CLUSTER, POOL).pool.transport
    assert decision.launch == _oracle(pool_state, validations, transitions, nodes, expected), (
        decision.reasons
    )
    assert decision.reasons and decision.decision_id is not None
    assert ledger.count("gf_gate_decisions") == before + 1
    FIGURES["launches" if decision.launch else "refusals"] += 1
