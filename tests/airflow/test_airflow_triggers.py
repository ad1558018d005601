"""WorkloadTrigger as the triggerer sees it: serializable, rebuilt from its kwargs, read-only.

As the providers test their triggers: ``serialize()`` names an importable class and plain-JSON
kwargs, and the trigger rebuilt from them serializes the same (so a triggerer restart, which
rebuilds every trigger from the database, changes nothing, not even the timeout's clock).
"""

from __future__ import annotations

import importlib
import json

import pytest

from gpufleet.airflow.triggers import WorkloadTrigger
from tests.support.clock import ManualClock

TRIGGERS = [
    WorkloadTrigger(cluster="a3u-sim", kind="JobSet", name="job-a", namespace="ml-team"),
    WorkloadTrigger(
        cluster="p5-sim",
        kind="Job",
        name="fio-h100-a-1a2b3c4d",
        namespace="gpufleet-validation",
        until="running",
        poll_interval=0.5,
        timeout=120.0,
        started=1_800_000_000.25,
        carry={"run_id": "manual__2026", "pass1": [{"node_a": "n0", "passed": True}], "round": 1},
    ),
]


def _rebuilt(trigger):
    classpath, kwargs = trigger.serialize()
    module, _, name = classpath.rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    return cls(**json.loads(json.dumps(kwargs)))


@pytest.mark.parametrize("trigger", TRIGGERS, ids=lambda t: t.name)
def test_serialize_round_trips(trigger):
    classpath, kwargs = trigger.serialize()
    assert json.loads(json.dumps(kwargs)) == kwargs  # plain JSON, nothing lost
    rebuilt = _rebuilt(trigger)
    assert type(rebuilt) is WorkloadTrigger
    assert rebuilt.serialize() == (classpath, kwargs)


def test_the_timeout_clock_survives_a_rebuild():
    trigger = WorkloadTrigger(cluster="c", kind="Job", name="j", namespace="n", timeout=5)
    assert trigger.serialize()[1]["started"] is not None
    assert _rebuilt(trigger).started == trigger.started


def test_an_unknown_cluster_is_an_error_event_carrying_the_state(fleet_state, triggerer):
    carry = {"launch_id": 7}
    event = triggerer.first_event(
        WorkloadTrigger(cluster="nope", kind="JobSet", name="j", namespace="n", carry=carry)
    )
    assert event["status"] == "error" and "unknown cluster 'nope'" in event["message"]
    assert event["carry"] == carry


def test_a_workload_that_is_gone_is_done(fleet_state, triggerer):
    event = triggerer.first_event(
        WorkloadTrigger(cluster="a3u-sim", kind="JobSet", name="gone", namespace="ml-team")
    )
    assert (event["status"], event["phase"]) == ("done", "NotFound")


# -- the one poll loop (PollingTrigger), on a clock the test advances -------------------------


@pytest.fixture
def clock(monkeypatch) -> ManualClock:
    """``PollingTrigger.clock``: a ``ManualClock`` (sleeping advances it at once)."""
    from gpufleet.airflow.triggers import PollingTrigger

    manual = ManualClock(1_800_000_000.0)
    monkeypatch.setattr(PollingTrigger, "clock", manual)
    return manual


def _polls(monkeypatch, cls, *looks):
    """Make ``cls.poll`` return (or raise) ``looks`` in turn, the last one for ever; the times
    (on the injected clock) each poll happened at."""
    from gpufleet.airflow.triggers import PollingTrigger

    at: list[float] = []

    def poll(self):
        at.append(PollingTrigger.clock.time())
        look = looks[min(len(at), len(looks)) - 1]
        if isinstance(look, Exception):
            raise look
        return look

    monkeypatch.setattr(cls, "poll", poll)
    return at


def _pending(phase="Pending"):
    from types import SimpleNamespace

    return SimpleNamespace(phase=phase, done=False, message="")


def test_both_triggers_serialize_exactly_as_before():
    from gpufleet.airflow.triggers import CloudResourcesTrigger

    workload = WorkloadTrigger(
        cluster="c", kind="Job", name="j", namespace="n", started=5.0, carry={"a": 1}
    )
    assert workload.serialize() == (
        "gpufleet.airflow.triggers.WorkloadTrigger",
        {
            "cluster": "c",
            "kind": "Job",
            "name": "j",
            "namespace": "n",
            "until": "done",
            "poll_interval": 30.0,
            "timeout": 3600.0,
            "started": 5.0,
            "carry": {"a": 1},
        },
    )
    cloud = CloudResourcesTrigger(resources=[("c", "node_pool", "p")], timeout=60, started=5.0)
    assert cloud.serialize() == (
        "gpufleet.airflow.triggers.CloudResourcesTrigger",
        {
            "resources": [["c", "node_pool", "p"]],
            "poll_interval": 30.0,
            "timeout": 60,
            "started": 5.0,
            "carry": None,
        },
    )
    assert type(_rebuilt(cloud)) is CloudResourcesTrigger
    assert _rebuilt(cloud).serialize() == cloud.serialize()


def test_a_workload_times_out_after_n_polls_with_no_real_waiting(clock, monkeypatch, triggerer):
    """timeout 100 s, a poll every 30 s: polls at 0, 30, 60, 90 and 120 s, then the timeout
    event; the clock is advanced, never waited on."""
    import time

    at = _polls(monkeypatch, WorkloadTrigger, _pending("Pending"), _pending("Running"))
    trigger = WorkloadTrigger(
        cluster="c", kind="Job", name="j", namespace="n", poll_interval=30, timeout=100, carry=[1]
    )
    assert trigger.started == clock.time()  # the default start is the injected clock's now
    began = time.monotonic()
    event = triggerer.first_event(trigger, timeout=10)
    assert time.monotonic() - began < 5  # 120 s on the clock; no real waiting
    assert [t - trigger.started for t in at] == [0, 30, 60, 90, 120]
    assert clock.slept == [30, 30, 30, 30]
    assert event == {
        "cluster": "c",
        "kind": "Job",
        "name": "j",
        "namespace": "n",
        "carry": [1],
        "status": "timeout",
        "phase": "Running",
        "message": "still Running after 100 s",
    }


def test_cloud_resources_time_out_with_their_last_look(clock, monkeypatch, triggerer):
    from gpufleet.airflow.triggers import CloudResourcesTrigger

    look = {"statuses": {"c/cluster/c": "PROVISIONING"}, "notes": ["slow"], "carry": {"s": 1}}
    at = _polls(monkeypatch, CloudResourcesTrigger, look)
    trigger = CloudResourcesTrigger(
        resources=[["c", "cluster", "c"]], poll_interval=10, timeout=25, carry={"s": 1}
    )
    assert triggerer.first_event(trigger, timeout=10) == {
        **look,
        "status": "timeout",
        "message": "not ready after 25 s",
    }
    assert len(at) == 4 and clock.slept == [10, 10, 10]


def test_transient_errors_keep_polling_until_the_deadline(clock, monkeypatch, triggerer):
    from gpufleet.errors import TransientBackendError

    blip = TransientBackendError("503 from the API")
    at = _polls(monkeypatch, WorkloadTrigger, blip)
    trigger = WorkloadTrigger(
        cluster="c", kind="Job", name="j", namespace="n", poll_interval=60, timeout=120
    )
    assert trigger.check_now() is None  # before deferring: a blip means "defer and look again"
    event = triggerer.first_event(trigger, timeout=10)
    assert (event["status"], event["phase"]) == ("timeout", None)
    assert len(at) == 1 + 4  # check_now's look, then 0, 60, 120 and 180 s


def test_an_unexpected_error_ends_the_wait_with_an_error_event(clock, monkeypatch, triggerer):
    from gpufleet.airflow.triggers import CloudResourcesTrigger

    _polls(monkeypatch, CloudResourcesTrigger, ValueError("catalog unreadable"))
    trigger = CloudResourcesTrigger(resources=[["c", "cluster", "c"]], carry={"s": 1})
    assert triggerer.first_event(trigger, timeout=10) == {
        "status": "error",
        "message": "catalog unreadable",
        "carry": {"s": 1},
    }
    assert clock.slept == []


def test_a_settled_look_ends_the_wait_before_the_deadline(clock, monkeypatch, triggerer):
    from types import SimpleNamespace

    done = SimpleNamespace(phase="Succeeded", done=True, message="ok")
    at = _polls(monkeypatch, WorkloadTrigger, _pending(), _pending(), done)
    trigger = WorkloadTrigger(cluster="c", kind="Job", name="j", namespace="n", poll_interval=5)
    assert trigger.check_now() is None
    event = triggerer.first_event(trigger, timeout=10)
    assert (event["status"], event["phase"], event["message"]) == ("done", "Succeeded", "ok")
    assert len(at) == 3 and clock.slept == [5]


# -- WaitTrigger: TimeDeltaTrigger on the one clock ---------------------------------------------


def test_a_wait_fires_once_its_seconds_passed_on_the_clock_and_survives_a_restart(clock, triggerer):
    from gpufleet.airflow.triggers import WaitTrigger

    start = clock.time()
    assert triggerer.first_event(WaitTrigger(300)) == {"status": "done", "waited_s": 300.0}
    assert clock.time() == start + 300  # waited on the clock, not the wall

    # made 200 s ago and rebuilt from its serialized kwargs (a triggerer restart): only the rest
    later = WaitTrigger(300)
    clock.advance(200)
    clock.slept.clear()
    assert triggerer.fire(later)["status"] == "done"
    assert clock.slept == [100]
