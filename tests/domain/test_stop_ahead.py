"""``stop_ahead``: which EC2 stop is still ahead of a node, from its signals newest first;
and the note an instance status's completed or canceled stop event gives."""

from __future__ import annotations

from datetime import UTC, datetime

from gpufleet.domain.events import InstanceStatus, ScheduledEvent
from gpufleet.domain.signals import Response, instance_signals, stop_ahead

AT = datetime(2026, 12, 1, tzinfo=UTC)


def row(source: str, what: str, reason: str = "r") -> dict:
    return {"source": source, "what": what, "reason": reason}


def test_the_newest_stop_is_ahead_until_the_event_is_over_or_the_node_came_back():
    stop = row("ec2", "instance-retirement", "EC2 instance-retirement of i-1")
    assert stop_ahead([stop]) == "EC2 instance-retirement of i-1"
    assert stop_ahead([row("xid", "79"), stop]) == stop["reason"]  # others say nothing of it
    assert stop_ahead([row("ec2", "instance-retirement-done"), stop]) is None
    for came_back in ("rebooted", "replaced", "appeared"):
        assert stop_ahead([row("lifecycle", came_back), stop]) is None
    assert stop_ahead([row("lifecycle", "uncordoned"), stop]) == stop["reason"]
    assert stop_ahead([stop, row("lifecycle", "rebooted")]) == stop["reason"]  # a newer stop
    assert stop_ahead([row("ec2", "system-reboot"), row("ec2", "system-impaired")]) is None
    assert stop_ahead([]) is None


def test_a_completed_or_canceled_stop_event_is_a_note_recorded_once_per_event():
    def status(description: str) -> InstanceStatus:
        event = ScheduledEvent("instance-stop", description, "instance-event-0a")
        return InstanceStatus("i-1", events=(event,))

    (note,) = instance_signals("c", "n", status("[Canceled] The instance is stopped"), AT)
    assert (note.what, note.response) == ("instance-stop-done", Response.NOTE)
    assert note.version == "ec2:instance-event-0a:done"
    assert instance_signals("c", "n", status("[Completed] reboot"), AT)[0].bad is False
    (ahead,) = instance_signals("c", "n", status("The instance is scheduled for stop"), AT)
    assert (ahead.what, ahead.response) == ("instance-stop", Response.QUARANTINE)
