"""``assess_drift`` on a real SQLite ledger: a pool's passing nights, judged after a run."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpufleet.config.catalog import load_catalog
from gpufleet.errors import LedgerError
from gpufleet.services.validation.drift import assess_drift
from gpufleet.store import Ledger

CLUSTER, POOL = "a3u-sim", "h200-a"
STEADY = [355.2, 354.1, 356.0, 355.5, 353.9, 355.8, 354.6, 355.1, 356.2, 354.4, 355.0, 355.7]
T0 = datetime(2026, 11, 1, 2, 0, tzinfo=UTC)


@pytest.fixture
def ledger(fleet_state):
    return Ledger()


@pytest.fixture
def catalog():
    return load_catalog()


def fabric_night(
    ledger: Ledger,
    run_id: str,
    busbw: float,
    latency: float | None = 31.0,
    passed: bool = True,
    pairs_latency: list[float] | None = None,
    pool: str = POOL,
) -> int:
    details = {} if latency is None else {"small_latency_us": latency}
    pairs = [
        {
            "pass_no": 1,
            "node_a": f"n{2 * i}",
            "node_b": f"n{2 * i + 1}",
            "passed": True,
            "busbw_gbps": busbw,
            "small_latency_us": value,
        }
        for i, value in enumerate(pairs_latency or [])
    ]
    return ledger.record_validation(
        run_id=run_id,
        cluster=CLUSTER,
        pool=pool,
        kind="fabric",
        passed=passed,
        busbw_gbps=busbw,
        started_at=T0,
        details=details,
        pairs=pairs,
    )


def steady_history(ledger: Ledger, pool: str = POOL) -> None:
    for i, busbw in enumerate(STEADY):
        fabric_night(ledger, f"night-{i}", busbw, pool=pool)
    ledger.set_pool_state(CLUSTER, pool, "validated", "passed")


def test_a_pool_below_its_history_becomes_drifting_with_the_figures(ledger, catalog):
    steady_history(ledger)
    vid = fabric_night(ledger, "tonight", 335.0)
    ledger.set_pool_state(CLUSTER, POOL, "validated", "passed", "tonight")
    [found] = assess_drift(ledger, catalog, "tonight")
    assert (found.key, found.kind, found.validation_id) == (f"{CLUSTER}/{POOL}", "fabric", vid)
    assert found.finding.metric == "busbw_gbps" and found.finding.nights == 12
    assert found.text().startswith(f"{CLUSTER}/{POOL}: busbw 335.0 GB/s is 5.7% below its")
    state = ledger.pool_state(CLUSTER, POOL)
    assert state["state"] == "drifting" and state["reason"] == found.finding.text()
    details = ledger.latest_validation(CLUSTER, POOL, "fabric")["details"]
    assert details["small_latency_us"] == 31.0  # what was there stays
    assert [d["metric"] for d in details["drift"]] == ["busbw_gbps"]
    assert details["drift"][0]["text"] == found.finding.text()
    assert found.to_dict()["pool"] == POOL


def test_a_drifting_pool_goes_back_to_validated_on_a_steady_night(ledger, catalog):
    steady_history(ledger)
    fabric_night(ledger, "bad", 335.0)
    assert assess_drift(ledger, catalog, "bad")
    fabric_night(ledger, "good", 355.3)
    assert assess_drift(ledger, catalog, "good") == []
    state = ledger.pool_state(CLUSTER, POOL)
    assert state["state"] == "validated"
    assert ledger.latest_validation(CLUSTER, POOL, "fabric")["details"]["drift"] == []


def test_failed_nights_are_not_history_and_a_failed_night_is_not_judged(ledger, catalog):
    steady_history(ledger)
    for i in range(5):  # failing nights with figures that would make tonight look fine
        fabric_night(ledger, f"fail-{i}", 200.0, passed=False)
    fabric_night(ledger, "tonight", 335.0)
    assert [d.finding.nights for d in assess_drift(ledger, catalog, "tonight")] == [12]
    fabric_night(ledger, "failed-tonight", 100.0, passed=False)
    assert assess_drift(ledger, catalog, "failed-tonight") == []


def test_a_worse_state_is_kept_but_the_finding_is_recorded(ledger, catalog):
    steady_history(ledger)
    fabric_night(ledger, "tonight", 335.0)
    ledger.set_pool_state(CLUSTER, POOL, "degraded", "2 nodes quarantined", "tonight")
    assert assess_drift(ledger, catalog, "tonight")
    assert ledger.pool_state(CLUSTER, POOL)["state"] == "degraded"
    assert ledger.latest_validation(CLUSTER, POOL, "fabric")["details"]["drift"]


def test_a_short_history_is_not_judged_and_the_row_says_so(ledger, catalog):
    for i, busbw in enumerate(STEADY[:4]):
        fabric_night(ledger, f"night-{i}", busbw)
    fabric_night(ledger, "tonight", 200.0)
    assert assess_drift(ledger, catalog, "tonight") == []
    notes = ledger.latest_validation(CLUSTER, POOL, "fabric")["details"]["drift_notes"]
    assert "busbw: not judged for drift: 4 passing night(s) of history, 7 needed" in notes


def test_latency_comes_from_the_pairs_when_the_row_lacks_it(ledger, catalog):
    for i, busbw in enumerate(STEADY):
        fabric_night(ledger, f"night-{i}", busbw, latency=None, pairs_latency=[30.5, 31.0, 31.5])
    fabric_night(ledger, "tonight", 355.0, latency=None, pairs_latency=[40.0, 41.0, 39.0])
    [found] = assess_drift(ledger, catalog, "tonight")
    assert found.finding.metric == "small_latency_us" and found.finding.direction == "above"
    assert found.finding.latest == 40.0 and found.finding.median == 31.0


def test_lustre_throughput_drift(ledger, catalog):
    for i in range(10):
        ledger.record_validation(
            run_id=f"night-{i}",
            cluster=CLUSTER,
            pool=POOL,
            kind="storage",
            passed=True,
            read_mb_s=13000.0 + 20 * (i % 3),
            write_mb_s=12000.0 + 15 * (i % 4),
            started_at=T0,
        )
    ledger.set_pool_state(CLUSTER, POOL, "validated")
    ledger.record_validation(
        run_id="tonight",
        cluster=CLUSTER,
        pool=POOL,
        kind="storage",
        passed=True,
        read_mb_s=13010.0,
        write_mb_s=10500.0,
        started_at=T0,
    )
    [found] = assess_drift(ledger, catalog, "tonight")
    assert (found.kind, found.finding.metric) == ("storage", "write_mb_s")
    assert "Lustre write 10,500.0 MB/s is" in ledger.pool_state(CLUSTER, POOL)["reason"]


def test_an_impossible_figure_in_the_ledger_is_a_note_not_a_crash(ledger, catalog):
    steady_history(ledger)
    fabric_night(ledger, "tonight", -5.0)
    assert assess_drift(ledger, catalog, "tonight") == []
    notes = ledger.latest_validation(CLUSTER, POOL, "fabric")["details"]["drift_notes"]
    assert any("-5.0 is not a finite figure above 0" in n for n in notes)
    assert ledger.pool_state(CLUSTER, POOL)["state"] == "validated"


def test_history_reads_passing_nights_before_a_row_and_details_merge(ledger):
    ids = [fabric_night(ledger, f"n{i}", 350.0 + i, passed=i % 2 == 0) for i in range(6)]
    history = ledger.validation_history(
        CLUSTER, POOL, "fabric", 2, passed_only=True, before_id=ids[4]
    )
    assert [r["id"] for r in history] == [ids[0], ids[2]]
    ledger.merge_validation_details(ids[0], {"drift": []})
    assert ledger.validation_history(CLUSTER, POOL, "fabric", 6)[0]["details"] == {
        "small_latency_us": 31.0,
        "drift": [],
    }
    with pytest.raises(LedgerError, match="no validation 999"):
        ledger.merge_validation_details(999, {"drift": []})
