"""The interval readings' rules (gpufleet.domain.signals): a dcgm-exporter reading (decided by
the nightly's passive rule where it was read) and an EC2 instance status, turned into signals
whose versions name the values they came from (the same values read again record nothing)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpufleet.domain.events import InstanceStatus, ScheduledEvent
from gpufleet.domain.health.catalog import A
from gpufleet.domain.signals import (
    EC2_STOPS,
    Response,
    Source,
    exporter_signal,
    instance_signals,
)

T0 = datetime(2026, 12, 7, 10, 0, tzinfo=UTC)
LATER = datetime(2026, 12, 9, 3, 0, tzinfo=UTC)


def test_a_bad_exporter_reading_quarantines_with_nvidias_action():
    reading = {"action": "repair", "reason": "GPU 3: row remapping failure", "key": "k1"}
    sig = exporter_signal("c", "n", reading, T0, "p")
    assert sig is not None
    assert (sig.source, sig.what, sig.response, sig.action) == (
        Source.EXPORTER,
        "gpu-health",
        Response.QUARANTINE,
        A.REPAIR,
    )
    assert sig.version == "exporter:k1" and sig.reason == reading["reason"]


def test_a_healthy_reading_says_nothing_and_an_unknown_one_is_a_note():
    assert exporter_signal("c", "n", {"action": "healthy", "reason": "", "key": "k"}, T0) is None
    for reading in (
        {"unknown": "no dcgm-exporter pod runs on the node", "key": "unknown:no-pod"},
        {"action": "could_not_run", "reason": "DCGM could not read", "key": "k"},
    ):
        sig = exporter_signal("c", "n", reading, T0)
        assert sig is not None
        assert (sig.what, sig.response) == ("unknown", Response.NOTE)
    sig = exporter_signal("c", "n", {"unknown": "down", "key": "unknown:no-pod"}, T0)
    assert sig is not None and "not healthy" in sig.reason


def test_a_reading_of_no_action_we_know_is_an_unknown_note_never_healthy():
    for action in ("explode", None, 7):
        sig = exporter_signal("c", "n", {"action": action, "reason": "?", "key": "k"}, T0)
        assert sig is not None
        assert (sig.what, sig.response, sig.action) == ("unknown", Response.NOTE, None)
        assert "no action gpufleet knows" in sig.reason and "not healthy" in sig.reason


def test_a_failed_check_quarantines_and_its_version_is_when_it_began():
    since = datetime(2026, 12, 7, 9, 55, tzinfo=UTC)
    status = InstanceStatus("i-1", system_status="impaired", system_impaired_since=since)
    (sig,) = instance_signals("c", "n", status, T0)
    assert (sig.source, sig.what, sig.response, sig.action) == (
        Source.EC2,
        "system-impaired",
        Response.QUARANTINE,
        A.REPAIR,
    )
    assert sig.version == f"ec2:system:{since.isoformat()}"
    (guest,) = instance_signals("c", "n", InstanceStatus("i-1", instance_status="impaired"), T0)
    assert (guest.what, guest.action) == ("instance-impaired", A.REBOOT)


@pytest.mark.parametrize("code", EC2_STOPS)
def test_an_event_that_stops_the_instance_quarantines_ahead_of_it(code):
    event = ScheduledEvent(code, "The instance is running on degraded hardware", "ev-1", LATER)
    (sig,) = instance_signals("c", "n", InstanceStatus("i-1", events=(event,)), T0)
    assert (sig.source, sig.what, sig.response) == (Source.EC2, code, Response.QUARANTINE)
    assert sig.version == "ec2:ev-1" and "ahead of it" in sig.reason


@pytest.mark.parametrize("code", ["system-reboot", "instance-reboot", "system-maintenance"])
def test_a_reboot_or_maintenance_ahead_is_the_maintenance_note(code):
    event = ScheduledEvent(code, "scheduled reboot", "ev-2", LATER)
    (sig,) = instance_signals("c", "n", InstanceStatus("i-1", events=(event,)), T0)
    assert (sig.source, sig.what, sig.response) == (
        Source.MAINTENANCE,
        "scheduled",
        Response.NOTE,
    )
    assert sig.version == "ec2:ev-2"


def test_ok_insufficient_data_and_events_that_are_over_ask_for_nothing():
    """Nothing bad: a reboot that is over says nothing; a stop that is over is only the note
    that it is behind the node (``stop_ahead``: tests/domain/test_stop_ahead.py)."""
    done = ScheduledEvent("instance-retirement", "[Completed] degraded hardware", "ev-3", T0)
    canceled = ScheduledEvent("system-reboot", "[Canceled] scheduled reboot", "ev-4", T0)
    status = InstanceStatus(
        "i-1", instance_status="insufficient-data", system_status="initializing",
        events=(done, canceled),
    )  # fmt: skip
    (over,) = instance_signals("c", "n", status, T0)
    assert (over.what, over.response) == ("instance-retirement-done", Response.NOTE)
