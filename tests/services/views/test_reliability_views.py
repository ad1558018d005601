"""Reliability figures (MTTR, MTBI, open incidents) read from the ledger's node moves: the pool
page, ``/metrics``' histograms and gauge, and the nightly report's lines."""

from __future__ import annotations

from datetime import timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpufleet.config.catalog import load_catalog
from gpufleet.domain.nodes import NodeState as N
from gpufleet.store import Ledger
from gpufleet.store.nodes import NodeMove
from tests.support.clock import ManualClock
from tests.support.prometheus import families_written_back

CLUSTER, POOL, OTHER = "a3u-sim", "h200-a", "h200-b"
HOUR = 3600.0


@pytest.fixture
def history(airflow_db, fleet_state):
    """h200-a: node 0 out for 2 h (quarantined, retested, released), back 10 h, out again for
    4 h; node 1 quarantined and still out. h200-b: nothing. Then 1 h on."""
    clock = ManualClock()
    ledger = Ledger(clock=clock)

    def move(node: str, to: N, hours: float = 0, **facts) -> None:
        ledger.move_node(CLUSTER, POOL, node, NodeMove(to, reason="test", **facts))
        clock.advance(hours * HOUR)

    n0, n1 = f"{CLUSTER}-{POOL}-0", f"{CLUSTER}-{POOL}-1"
    move(n0, N.QUARANTINED, 1)
    move(n0, N.RETESTING, 1)
    move(n0, N.RELEASED, 10, retest_passed=True)
    move(n0, N.SUSPECT, 2)
    move(n0, N.RETESTING, 2)
    move(n0, N.RELEASED, 0, retest_passed=True)
    move(n1, N.QUARANTINED, 1)
    return ledger, clock, n0, n1


def test_the_pool_page_shows_mttr_mtbi_and_the_open_incidents(history):
    from gpufleet.airflow.ui.pages import pool_page
    from gpufleet.services.views.pool import pool_view

    ledger, clock, n0, n1 = history
    view = pool_view(load_catalog(), ledger, CLUSTER, POOL)
    rel = view["reliability"]
    assert rel["mttr_seconds"] == (2 + 4) * HOUR / 2  # n1's open incident is not in it
    assert rel["mtbi_seconds"] == 10 * HOUR
    assert [o["node"] for o in rel["open"]] == [n1]
    page = pool_page(view)
    assert "MTTR 3.0h over 2 repaired incident(s); MTBI 10.0h; 1 open incident(s)" in page
    assert f"<td>{n1}</td><td>0</td><td>1</td>" in page
    other = pool_view(load_catalog(), ledger, CLUSTER, OTHER)["reliability"]
    assert other["repaired"] == 0 and other["open"] == [] and other["mttr"] == "—"


def test_the_pool_page_escapes_a_node_name(airflow_db, fleet_state):
    from gpufleet.airflow.ui.pages import pool_page
    from gpufleet.services.views.pool import pool_view

    ledger = Ledger(clock=ManualClock())
    ledger.move_node(CLUSTER, POOL, "<b>n</b>", NodeMove(N.QUARANTINED, reason="x"))
    page = pool_page(pool_view(load_catalog(), ledger, CLUSTER, POOL))
    assert "&lt;b&gt;n&lt;/b&gt;" in page and "<b>n</b>" not in page


def test_the_window_reads_incidents_open_since_before_it(airflow_db, fleet_state):
    """A node out of service since before the window is still open in it, and an incident
    before the window is the one the window's first is measured from."""
    from gpufleet.services.views.reliability import reliability_window

    clock = ManualClock()
    ledger = Ledger(clock=clock)
    ledger.move_node(CLUSTER, POOL, "a", NodeMove(N.QUARANTINED))
    ledger.move_node(CLUSTER, POOL, "b", NodeMove(N.QUARANTINED))
    clock.advance(HOUR)
    ledger.move_node(CLUSTER, POOL, "b", NodeMove(N.RELEASED, by="ops"))
    clock.advance(40 * 86400)
    ledger.move_node(CLUSTER, POOL, "b", NodeMove(N.SUSPECT))
    got = reliability_window(ledger, clock.now(), timedelta(days=30))
    pool = got.pools[(CLUSTER, POOL)]
    assert sorted(i.node for i in pool.open) == ["a", "b"]
    assert pool.repair_seconds == []  # b's first repair ended before the window
    assert pool.between_seconds == [40 * 86400]


def test_metrics_histograms_and_open_gauge_in_the_exposition_format(history):
    from gpufleet.airflow.ui.metrics import exposition
    from gpufleet.airflow.ui.reliability_series import BETWEEN, BUCKETS, OPEN, REPAIR

    ledger, clock, _, _ = history
    text = exposition(load_catalog(), ledger, clock.now())
    families = {f.name: f for f in text_string_to_metric_families(text.decode())}
    assert families[REPAIR].type == "histogram" and families[BETWEEN].type == "histogram"
    where = {"cluster": CLUSTER, "pool": POOL}
    got = {
        (s.name, s.labels.get("le")): s.value
        for name in (REPAIR, BETWEEN)
        for s in families[name].samples
        if s.labels["pool"] == POOL and s.labels["cluster"] == CLUSTER
    }
    assert got[(f"{REPAIR}_count", None)] == 2 and got[(f"{REPAIR}_sum", None)] == 6 * HOUR
    assert got[(f"{REPAIR}_bucket", "3600.0")] == 0
    assert got[(f"{REPAIR}_bucket", "14400.0")] == 2  # 2 h and 4 h
    assert got[(f"{REPAIR}_bucket", "+Inf")] == 2
    assert got[(f"{BETWEEN}_count", None)] == 1 and got[(f"{BETWEEN}_sum", None)] == 10 * HOUR
    buckets = [s for s in families[REPAIR].samples if s.name.endswith("_bucket")]
    assert len(buckets) == len(BUCKETS) + 1
    assert [s.value for s in buckets] == sorted(s.value for s in buckets)  # cumulative
    opened = {(s.labels["cluster"], s.labels["pool"]): s.value for s in families[OPEN].samples}
    assert opened[(CLUSTER, POOL)] == 1 and opened[(CLUSTER, OTHER)] == 0
    assert all(set(s.labels) == set(where) for s in families[OPEN].samples)
    # written as prometheus_client writes it: parsed and written again, byte for byte
    families_written_back(text)


def test_the_nightly_report_has_a_line_per_pool_with_incidents(history):
    from gpufleet.services.views.reliability import report_lines

    ledger, clock, _, _ = history
    lines = report_lines(ledger, clock.now())
    assert len(lines) == 1 and lines[0].startswith(f"{CLUSTER}/{POOL}: 3 incident(s)")
    assert "2 repaired (MTTR 3.0h)" in lines[0] and "1 open" in lines[0]
    assert report_lines(ledger, clock.now() + timedelta(days=60)) == [
        f"{CLUSTER}/{POOL}: 1 incident(s) in 30 days, 0 repaired (MTTR —), 1 open, MTBI —"
    ]


def test_the_nightly_report_carries_the_reliability_section(history):
    from gpufleet.domain.verdicts import latest_per_check
    from gpufleet.services.views.nightly_report import render_report
    from tests.support.ledger_builder import LedgerBuilder

    ledger, clock, _, n1 = history
    night = LedgerBuilder(ledger).night("r1", started_at=clock.now(), finished_at=clock.now())
    night.pool(CLUSTER, POOL).fabric(True, transport="gib", expected_transport="gib")
    rows = latest_per_check(ledger.validations_for_run("r1"))
    md_text, html_text = render_report(ledger, load_catalog(), "r1", rows)
    assert "## Reliability (node incidents, last 30 days)" in md_text
    assert f"- {CLUSTER}/{POOL}: 3 incident(s)" in md_text
    assert '<section id="reliability">' in html_text and f"{CLUSTER}/{POOL}: 3" in html_text
