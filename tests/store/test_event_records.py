"""The event path's ledger records (gpufleet.store.events): signals once per version, nodes as
last seen never moved back, cursors only forward, sessions claimed by one run."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpufleet.domain.admission import Session, SessionState, join
from gpufleet.domain.events import version_after
from gpufleet.domain.signals import Response, Signal, Source
from gpufleet.store import Ledger
from tests.support.clock import ManualClock

T0 = datetime(2026, 12, 7, 10, 0, tzinfo=UTC)


@pytest.fixture
def ledger(tmp_path):
    return Ledger(f"sqlite:///{tmp_path}/ledger.db", clock=ManualClock(T0.timestamp()))


def sig(node="n1", what="79", response=Response.QUARANTINE, at=T0, version="5", reason="Xid 79"):
    return Signal("c", node, Source.XID, what, response, reason, at, pool="p", version=version)


def test_a_replayed_signal_is_recorded_once(ledger):
    first = ledger.record_signals([sig(), sig(node="n2")], run_id="r1")
    assert len(first) == 2
    ledger.mark_acted(first)
    again = ledger.record_signals([sig(), sig(node="n2"), sig(version="6")], run_id="r2")
    assert [s.version for s in again] == ["6"]
    assert len(ledger.node_signals("c", "n1")) == 2


def test_a_signal_recorded_but_never_acted_on_is_handed_back_until_it_is(ledger):
    [first] = ledger.record_signals([sig()], run_id="r1")  # the response died before acting
    assert ledger.record_signals([sig()], run_id="r1-retry") == [first]  # recorded once...
    assert len(ledger.node_signals("c", "n1")) == 1
    ledger.mark_acted([first])
    assert ledger.record_signals([sig()], run_id="r2") == []  # ...and acted on once
    [row] = ledger.node_signals("c", "n1")
    assert row["acted_at"] is not None and row["run_id"] == "r1"


def test_newest_bad_signal_per_node(ledger):
    ledger.record_signals(
        [
            sig(at=T0, version="1", reason="old"),
            sig(at=T0 + timedelta(minutes=5), version="2", reason="newer"),
            sig(at=T0 + timedelta(minutes=9), version="3", response=Response.NOTE, reason="note"),
            sig(node="n2", response=Response.ADMIT, version="4"),
        ]
    )
    bad = ledger.newest_bad_signals("c")
    assert bad == {"n1": (T0 + timedelta(minutes=5), "newer")}
    assert ledger.newest_bad_signals("c", ["n2"]) == {}
    assert ledger.newest_bad_signals("other") == {}


def test_a_node_is_never_moved_back_by_a_replay(ledger):
    ledger.see_nodes("c", {"n1": {"version": "10", "boot_id": "b2", "pool": "p"}})
    assert ledger.see_nodes("c", {"n1": {"version": "9", "boot_id": "b1"}}) == 0
    assert ledger.watched_nodes("c")["n1"]["boot_id"] == "b2"
    assert ledger.see_nodes("c", {"n1": {"version": "11", "boot_id": "b3"}}) == 1
    ledger.see_nodes("c", {"n1": None})
    row = ledger.watched_nodes("c")["n1"]
    assert row["gone"] and row["boot_id"] == "b3"


def test_the_cursor_only_moves_forward(ledger):
    assert ledger.watch_cursor("c", "nodes") is None
    assert ledger.ack_watch("c", "nodes", "100") == "100"
    assert ledger.ack_watch("c", "nodes", "99") == "100"  # a replay's older ack
    assert ledger.ack_watch("c", "nodes", "101") == "101"
    assert ledger.watch_cursor("c", "nodes") == "101"
    assert ledger.watch_cursor("c", "events") is None


def test_versions_compare_as_numbers():
    assert version_after("10", "9")
    assert not version_after("9", "10")
    assert version_after("1", None)


def test_a_session_is_claimed_by_one_run_and_closed_to_joins(ledger):
    s = join([], "c", "p", "n1", T0)
    assert ledger.save_session(s)
    s2 = join(ledger.sessions("c", "p"), "c", "p", "n2", T0 + timedelta(seconds=60))
    assert ledger.save_session(s2)
    [kept] = ledger.sessions("c", "p")
    assert set(kept.nodes) == {"n1", "n2"} and kept.state is SessionState.OPEN
    assert ledger.claim_session(s.id, "run-a")
    assert not ledger.claim_session(s.id, "run-b")  # one run wins
    late = join([s2], "c", "p", "n3", T0 + timedelta(seconds=90))
    assert not ledger.save_session(late)  # claimed meanwhile: the caller opens a new one
    assert not ledger.finish_session(s.id, "run-b", {"released": {}})  # not its session
    assert ledger.claim_session(s.id, "run-b", stale_run="run-a")  # run-a died: taken over
    assert ledger.finish_session(s.id, "run-b", {"released": {"n1": "passed"}})
    assert ledger.sessions("c", "p") == []
    assert ledger.session_row(s.id)["outcome"] == {"released": {"n1": "passed"}}


def test_a_bad_session_window_is_refused_by_the_ledger(ledger):
    from sqlalchemy.exc import IntegrityError

    bad = Session("c", "p", T0, window_s=-1, nodes={"n1": T0})
    with pytest.raises(IntegrityError):
        ledger.save_session(bad)
