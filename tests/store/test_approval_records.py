"""The ledger's approval requests (``gf_approvals``, docs/remediation.md#approvals), on SQLite
and PostgreSQL: asked once, answered once (who, when, what; the timeout's default recorded as
``timed_out``), done once, closed once; not asked again after a no within the recheck window."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy.exc import IntegrityError

from gpufleet.errors import LedgerError
from gpufleet.store import Ledger
from gpufleet.store import schema as s
from tests.store.test_ledger import ledger_url  # noqa: F401  (fixture: SQLite and PostgreSQL)
from tests.support.clock import ManualClock

KEY = "a3u-sim/h200-a/a3u-sim-h200-a-3"


def ask(ledger: Ledger, **kw):
    return ledger.request_approval(
        "repair_below_floor", KEY, "Repair it?", requested_by="night-1", **kw
    )


def test_a_request_is_asked_once_and_answered_once(ledger_url):  # noqa: F811
    clock = ManualClock()
    ledger = Ledger(ledger_url, clock=clock)
    first, created = ask(ledger, detail={"node": "n3"})
    assert created and first["state"] == "pending" and first["requested_at"] == clock.now()
    again, created = ask(ledger)
    assert not created and again["id"] == first["id"]  # pending: not asked twice
    ledger.approval_asked_by(first["id"], "remediation_approvals", "r1", "approve", 0)
    assert (
        ledger.approval_asked_at("remediation_approvals", "r1", "approve", 0)["id"] == first["id"]
    )

    clock.advance(60)
    answered = ledger.answer_approval(first["id"], ["Approve"], "alice")
    assert (answered["state"], answered["answer"], answered["answered_by"]) == (
        "approved",
        "Approve",
        "alice",
    )
    assert answered["answered_at"] == clock.now()
    assert ask(ledger)[0]["id"] == first["id"]  # approved, not done: still not asked again
    # a second answer (another run's task, a late timeout) does not overwrite the first
    assert ledger.answer_approval(first["id"], ["Reject"], None)["answered_by"] == "alice"

    done = ledger.approval_done(first["id"], "sent to repair")
    assert (done["state"], done["outcome"], done["acted_at"]) == (
        "done",
        "sent to repair",
        clock.now(),
    )
    assert ledger.approval_done(first["id"], "again")["outcome"] == "sent to repair"  # once
    assert ask(ledger)[1]  # done: a new incident is a new request


def test_nobody_answering_is_recorded_as_the_timeouts_default(ledger_url):  # noqa: F811
    ledger = Ledger(ledger_url, clock=ManualClock())
    row, _ = ask(ledger)
    timed_out = ledger.answer_approval(row["id"], ["Reject"], None)
    assert (timed_out["state"], timed_out["answer"], timed_out["answered_by"]) == (
        "timed_out",
        "Reject",
        "timeout",
    )
    closed = ledger.approval_closed(row["id"], "not repaired")
    assert closed["outcome"] == "not repaired" and closed["acted_at"] is None
    assert ledger.approval_closed(row["id"], "again")["outcome"] == "not repaired"


def test_a_no_is_not_asked_again_within_the_recheck_window(ledger_url):  # noqa: F811
    clock = ManualClock()
    ledger = Ledger(ledger_url, clock=clock)
    row, _ = ask(ledger)
    ledger.answer_approval(row["id"], ["Reject"], "bob")
    clock.advance(3600)
    window = timedelta(days=7)
    same, created = ask(ledger, recheck_since=clock.now() - window)
    assert not created and same["id"] == row["id"] and same["state"] == "rejected"
    clock.advance(window.total_seconds())
    later, created = ask(ledger, recheck_since=clock.now() - window)
    assert created and later["id"] != row["id"]
    assert [r["id"] for r in ledger.approvals(kind="repair_below_floor")] == [
        later["id"],
        row["id"],
    ]


def test_an_unknown_kind_or_state_is_refused(ledger_url):  # noqa: F811
    ledger = Ledger(ledger_url, clock=ManualClock())
    with pytest.raises(LedgerError, match="approval kind 'delete_everything'"):
        ledger.request_approval("delete_everything", "k", "?", requested_by="r")
    row, _ = ask(ledger)
    with pytest.raises(IntegrityError), ledger.engine.begin() as conn:  # the CHECK holds
        conn.execute(
            s.approvals.update().where(s.approvals.c.id == row["id"]).values(state="maybe")
        )
