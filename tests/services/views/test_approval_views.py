"""The approvals in the nightly report (``services.views.nightly_report``) and in the lines
``gpufleet status`` prints (``services.views.approvals``): waiting ones, and ones answered in
the last day with who, when and what came of it; older answers drop out."""

from __future__ import annotations

from gpufleet.config.catalog import load_catalog
from gpufleet.services.views.approvals import approval_lines
from gpufleet.services.views.nightly_report import render_report
from gpufleet.store import Ledger
from tests.support.clock import ManualClock


def test_the_report_lists_waiting_and_recently_answered_approvals(fleet_state):
    clock = ManualClock()
    ledger = Ledger(clock=clock)
    old, _ = ledger.request_approval("breaker_reset", "pool:a3u-sim/h200-a", "?", requested_by="p")
    ledger.answer_approval(old["id"], ["Approve"], "carol")
    clock.advance(2 * 86400)  # answered two days ago: out of the report
    done, _ = ledger.request_approval("retire_pool", "a3u-sim/h200-b", "?", requested_by="r1")
    ledger.approval_asked_by(done["id"], "reservation_transition", "r1", "approve_retire")
    ledger.answer_approval(done["id"], ["Approve"], "alice")
    ledger.approval_done(done["id"], "a3u-sim/h200-b retired by run r1")
    waiting, _ = ledger.request_approval(
        "repair_below_floor", "a3u-sim/h200-a/n3", "?", requested_by="night-2"
    )
    ledger.approval_asked_by(waiting["id"], "remediation_approvals", "r2", "approve", 0)

    lines = approval_lines(ledger, clock.now())
    at = f"{clock.now():%Y-%m-%d %H:%M} UTC"
    assert lines == [
        f"#{waiting['id']} repair_below_floor a3u-sim/h200-a/n3: waiting for a person "
        "(remediation_approvals r2 approve[0])",
        f"#{done['id']} retire_pool a3u-sim/h200-b: approved by alice at {at}: "
        "a3u-sim/h200-b retired by run r1",
    ]
    md, html = render_report(ledger, load_catalog(), "r1", [])
    assert "## Approvals" in md and f"- {lines[1]}" in md
    assert '<section id="approvals">' in html and "approved by alice" in html
