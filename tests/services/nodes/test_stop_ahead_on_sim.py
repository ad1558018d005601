"""A node EC2 will stop (a scheduled ``instance-retirement`` or ``instance-stop``) is not
released by a retest it passes: it is drained and repaired (replaced) ahead of the stop; once
the event is over (completed, canceled) or the node came back from the stop, a pass releases it
(``domain.signals.stop_ahead``, ``NodeLifecycle.record_retest``; docs/events.md)."""

from __future__ import annotations

from datetime import UTC, datetime

from gpufleet.config.catalog import load_catalog
from gpufleet.domain.health.catalog import A
from gpufleet.domain.signals import Response, Signal, Source
from gpufleet.services.nodes.lifecycle import NodeLifecycle
from gpufleet.store import Ledger
from tests.support.fleet import lifecycle_night

CLUSTER, POOL = "a3u-sim", "h200-a"
NODE = f"{CLUSTER}-{POOL}-2"  # healthy: every check it gets passes
AT = datetime(2026, 12, 1, 9, tzinfo=UTC)
RETIREMENT = "EC2 instance-retirement of i-0abc from 2026-12-09T00:00:00+00:00"


def signal(what: str, response: Response, version: str, reason: str = RETIREMENT, source=None):
    return Signal(
        CLUSTER,
        NODE,
        source or Source.EC2,
        what,
        response,
        reason,
        AT,
        POOL,
        action=A.REPAIR if response is Response.QUARANTINE else None,
        version=version,
    )


def retirement_quarantined() -> None:
    Ledger().record_signals([signal("instance-retirement", Response.QUARANTINE, "ec2:e-1")])
    lifecycle = NodeLifecycle(load_catalog().pool(CLUSTER, POOL), Ledger())
    lifecycle.quarantine(NODE, RETIREMENT, {"event": True}, run_id="events")


def state() -> dict:
    return Ledger().node_state(CLUSTER, NODE)


def repairs() -> list[str]:
    history = Ledger().node_history(CLUSTER, NODE)
    return [e["evidence"]["rung"] for e in history if e["to_state"] == "repairing"]


def test_a_node_ec2_will_stop_is_replaced_ahead_of_it_though_its_retest_passed(fleet_state):
    retirement_quarantined()
    lifecycle_night(CLUSTER, POOL, 1)  # the retest passes; the remediation pass drains it
    row = state()
    assert row["state"] in ("draining", "repairing"), row
    moved = [e for e in Ledger().node_history(CLUSTER, NODE) if e["to_state"] == "draining"]
    assert moved and moved[0]["reason"].startswith(RETIREMENT)
    assert "ahead of it" in moved[0]["reason"]
    lifecycle_night(CLUSTER, POOL, 2)
    assert repairs() == ["repair"]  # the provider's repair, not a reboot


def test_once_the_stop_is_over_a_passed_retest_releases_the_node(fleet_state):
    retirement_quarantined()
    done = signal("instance-retirement-done", Response.NOTE, "ec2:e-1:done", "[Canceled]")
    Ledger().record_signals([done])
    lifecycle_night(CLUSTER, POOL, 1)
    assert state()["state"] == "released" and repairs() == []
