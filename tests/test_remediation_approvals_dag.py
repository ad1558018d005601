"""remediation_approvals and breaker_reset end to end with dag.test() on the simulated fleet
(docs/remediation.md#approvals): each open request is asked once by an approval task waiting in
``awaiting_input`` (answered here as the REST API answers, ``tests.support.hitl``), the approved
ones are done once, the rejected and unanswered ones closed with nothing done, and a second run
asks and does nothing again."""

from __future__ import annotations

import pytest

from gpufleet.backends.sim.cloud import SimCloudBackend
from gpufleet.config.catalog import load_catalog
from gpufleet.store import Ledger
from tests.support.fleet import run_dag, task_states
from tests.support.hitl import Answer, TimeOut

pytestmark = [pytest.mark.slow]

CLUSTER, POOL = "a3u-sim", "h200-a"


@pytest.fixture
def fleet(airflow_db, fleet_state):
    return fleet_state


def subblock_request(rack: str) -> dict:
    """What the fabric verdict records for a bad sub-block (``topology.request_report``)."""
    key = f"block-1/{rack}"
    row, _ = Ledger().request_approval(
        "report_subblock",
        f"{CLUSTER}/{POOL}/{key}",
        f"Report sub-block {key} of {CLUSTER}/{POOL} faulty to the provider? uplink down",
        requested_by="night-1",
        detail={
            "cluster": CLUSTER,
            "pool": POOL,
            "subblock": key,
            "why": "uplink down",
            "nodes": [],
        },
    )
    return row


def reports() -> list[str]:
    return [
        r["key"] for r in SimCloudBackend(load_catalog().cluster(CLUSTER)).subblock_reports(POOL)
    ]


def test_each_request_is_asked_once_and_only_the_approved_one_is_done(fleet):
    first, second = subblock_request("block-1-sb1"), subblock_request("block-1-sb2")
    answer = Answer("Approve", "alice", by_index={1: "Reject"})
    dr = run_dag("remediation_approvals", {}, on_idle=answer)
    states = task_states(dr)
    assert str(dr.state) == "success", states
    assert sorted(answer.answered) == [("approve", 0), ("approve", 1)]
    done, rejected = Ledger().approval(first["id"]), Ledger().approval(second["id"])
    assert (done["state"], done["answered_by"], done["outcome"]) == (
        "done",
        "alice",
        "reported to the provider (created)",
    )
    assert (rejected["state"], rejected["answered_by"]) == ("rejected", "alice")
    assert rejected["outcome"] == "not reported to the provider; its nodes stay out of service"
    assert reports() == ["block-1/block-1-sb1"]

    again = Answer("Approve", "bob")
    dr = run_dag("remediation_approvals", {}, on_idle=again)
    assert str(dr.state) == "success" and again.answered == []  # nothing asked twice
    assert reports() == ["block-1/block-1-sb1"]  # nor done twice


def test_an_unanswered_request_times_out_to_doing_nothing(fleet):
    request = subblock_request("block-1-sb2")
    timeout = TimeOut()
    dr = run_dag("remediation_approvals", {"approval_timeout_hours": 1}, on_idle=timeout)
    assert str(dr.state) == "success", task_states(dr)
    assert timeout.swept == 1
    row = Ledger().approval(request["id"])
    assert (row["state"], row["answer"], row["answered_by"]) == ("timed_out", "Reject", "timeout")
    assert row["outcome"].startswith("not reported")
    assert reports() == []


def test_a_breaker_reset_waits_for_an_approval_and_records_the_approver(fleet):
    Ledger().trip_breaker(
        "pool", f"{CLUSTER}/{POOL}", reason="3 > max(2, 20%)", affected=3, limit=2
    )
    conf = {"scope": "pool", "key": f"{CLUSTER}/{POOL}", "reason": "driver rolled back"}
    rejected = run_dag("breaker_reset", conf, on_idle=Answer("Reject", "dave"))
    assert str(rejected.state) == "success", task_states(rejected)
    assert [t["key"] for t in Ledger().tripped_breakers()] == [f"{CLUSTER}/{POOL}"]  # still

    dr = run_dag("breaker_reset", conf, on_idle=Answer("Approve", "carol"))
    assert str(dr.state) == "success", task_states(dr)
    assert Ledger().tripped_breakers() == []
    (trip,) = Ledger().breaker_history("pool", f"{CLUSTER}/{POOL}")
    assert trip["reset_by"] == "carol" and "driver rolled back" in trip["reset_reason"]
    first, second = Ledger().approvals(kind="breaker_reset")[::-1]
    assert (first["state"], second["state"], second["answered_by"]) == ("rejected", "done", "carol")


def test_a_breaker_that_is_not_tripped_is_refused_before_anyone_is_asked(fleet):
    conf = {"scope": "cluster", "key": CLUSTER, "reason": "why not"}
    ask = Answer("Approve", "carol")
    dr = run_dag("breaker_reset", conf, on_idle=ask)
    assert str(dr.state) == "failed" and task_states(dr)["request"] == "failed"
    assert ask.answered == [] and Ledger().approvals() == []
