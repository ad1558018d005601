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
