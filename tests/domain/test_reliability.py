"""Incidents, MTTR and MTBI from a node's moves (``domain.reliability``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpufleet.domain.reliability import Move, incidents, reliability

T0 = datetime(2026, 11, 1, tzinfo=UTC)
H = timedelta(hours=1)


def moves(*steps: tuple[float, str | None, str], node: str = "n1", pool: str = "p") -> list[Move]:
    """Moves of one node: (hours after T0, from, to)."""
    return [Move("c", pool, node, f, t, T0 + h * H) for h, f, t in steps]


def test_a_quarantine_its_retest_and_its_release_are_one_incident():
    got = incidents(
        moves(
            (0, None, "quarantined"), (2, "quarantined", "retesting"), (5, "retesting", "released")
        )
    )
    assert len(got) == 1
    assert got[0].start == T0 and got[0].end == T0 + 5 * H
    assert got[0].repair_seconds == 5 * 3600


def test_a_repair_path_is_one_incident_and_a_new_fault_another():
    got = incidents(
        moves(
            (0, "released", "suspect"),
            (1, "suspect", "retesting"),
            (2, "retesting", "draining"),
            (3, "draining", "drained"),
            (4, "drained", "repairing"),
            (30, "repairing", "retesting"),
            (31, "retesting", "released"),
            (100, "released", "quarantined"),
        )
    )
    assert [(i.start, i.end) for i in got] == [(T0, T0 + 31 * H), (T0 + 100 * H, None)]
    assert got[1].open


def test_an_open_incident_is_counted_apart_never_in_mttr():
    pools, nodes = reliability(
        moves(
            (0, None, "quarantined"), (2, "quarantined", "retesting"), (4, "retesting", "released")
        )
        + moves((1, None, "quarantined"), node="n2"),  # still out: open
        T0,
        T0 + 240 * H,
    )
    pool = pools[("c", "p")]
    assert pool.repair_seconds == [4 * 3600] and pool.mttr_seconds == 4 * 3600
    assert [i.node for i in pool.open] == ["n2"]
    assert pool.incidents == 2
    assert nodes[("c", "p", "n2")].mttr_seconds is None


def test_mtbi_is_per_node_from_the_end_of_one_incident_to_the_start_of_the_next():
    pools, nodes = reliability(
        moves(
            (0, None, "quarantined"),
            (2, "quarantined", "released"),  # up at 2
            (12, "released", "suspect"),  # down again 10 h later
            (13, "suspect", "retesting"),
            (14, "retesting", "released"),  # up at 14
            (44, "released", "quarantined"),  # 30 h later
            (45, "quarantined", "released"),
        )
        # another node's incident in between does not make a gap of n1's
        + moves((5, None, "quarantined"), (6, "quarantined", "released"), node="n2"),
        T0,
        T0 + 100 * H,
    )
    assert nodes[("c", "p", "n1")].between_seconds == [10 * 3600, 30 * 3600]
    assert nodes[("c", "p", "n1")].mtbi_seconds == 20 * 3600
    assert nodes[("c", "p", "n2")].mtbi_seconds is None  # one incident: no time between
    assert pools[("c", "p")].mtbi_seconds == 20 * 3600
    assert pools[("c", "p")].mttr_seconds == (2 + 2 + 1 + 1) * 3600 / 4


def test_the_window_counts_repairs_that_end_in_it_and_gaps_that_start_in_it():
    history = moves(
        (0, None, "quarantined"),
        (10, "quarantined", "released"),  # ended before the window
        (50, "released", "quarantined"),  # starts in it: gap 40 h
        (60, "quarantined", "released"),
        (500, "released", "suspect"),  # after the window: left out
    )
    pools, _ = reliability(history, T0 + 20 * H, T0 + 100 * H)
    pool = pools[("c", "p")]
    assert pool.repair_seconds == [10 * 3600]
    assert pool.between_seconds == [40 * 3600]
    assert pool.open == []


def test_a_release_without_a_departure_seen_opens_nothing():
    got = incidents(moves((0, "retesting", "released"), (1, "released", "quarantined")))
    assert [(i.start, i.end) for i in got] == [(T0 + H, None)]
