"""The gate refuses nodes that fail GPU health (issue 20, item 5).

A node whose latest GPU health check failed is normally quarantined, so it is not schedulable
and the gate never counted it. When the pool's quarantine cap held, the failed nodes were left
in service: the gate does not count them either, names them with NVIDIA's action, and refuses
the pool when the rest cannot hold the job. A check never run, an old one, or one that could
not finish refuses nothing by itself: health informs when it ran.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from gpufleet.domain.gate import (
    LEFT_IN_SERVICE,
    FactError,
    HealthFact,
    PoolFacts,
    PoolState,
    ValidationFact,
    Verdict,
    decide,
    read_health,
    unhealthy_in_service,
)

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
FRESH = NOW - timedelta(hours=3)
NODES = [f"n{i}" for i in range(6)]


def good(key: str = "c/p", free: list[str] = NODES, health: HealthFact | None = None):
    return PoolFacts(
        key=key,
        known=True,
        expected_transport="gib",
        state=PoolState.VALIDATED,
        fabric=ValidationFact(True, FRESH, "gib", Verdict.PASS),
        has_filesystem=False,
        transition_in_flight=False,
        schedulable_nodes=len(free),
        free_nodes=frozenset(free),
        health=health,
    )


def checked(failed: dict[str, str], verdict=Verdict.FAIL, at=FRESH, left=()) -> HealthFact:
    return HealthFact(at, verdict, failed, frozenset(left))


def test_a_failed_node_still_in_service_is_not_counted_and_is_named():
    pool = good(health=checked({"n3": "reboot"}, left={"n3"}))
    assert unhealthy_in_service(pool) == {"n3": "reboot"}
    decision = decide([pool], 5, NOW)
    assert decision.launch and decision.schedulable_nodes == 5
    assert decision.reasons[0].startswith("c/p: validated gib 3.0 h ago, 5 schedulable nodes")
    assert decision.reasons[1] == (
        "c/p: not counting 1 node(s) that failed their latest GPU health check and are still "
        "in service: n3 (NVIDIA: reboot)"
    )
    refused = decide([pool], 6, NOW)
    assert not refused.launch and refused.schedulable_nodes == 5
    assert refused.reasons == [
        "c/p: the job needs 6 nodes; the pool has 5 schedulable (a job runs within one pool)",
        "c/p: not counting 1 node(s) that failed their latest GPU health check and are still "
        "in service: n3 (NVIDIA: reboot)",
    ]


def test_every_failing_action_leaves_its_node_out_and_healthy_or_unchecked_do_not():
    failed = {"n1": "reset_gpu", "n2": "reboot", "n3": "needs_human", "n4": "repair"}
    pool = good(health=checked(failed))
    assert unhealthy_in_service(pool) == failed
    assert decide([pool], 2, NOW).launch and not decide([pool], 3, NOW).launch
    why = " | ".join(decide([pool], 3, NOW).reasons)
    for node, action in failed.items():
        assert f"{node} (NVIDIA: {action})" in why
    row = {
        "verdict": "pass",
        "passed": True,
        "finished_at": FRESH,
        "details": {"nodes": {"n0": {"action": "healthy"}, "n5": {"action": None}}},
    }
    assert read_health(row, "health").failed == {}  # healthy, and not checked


def test_a_quarantined_node_is_not_left_out_twice():
    """The check failed n3 and n4; n4 was quarantined (not free), n3 left in service."""
    pool = good(
        free=[n for n in NODES if n != "n4"], health=checked({"n3": "reboot", "n4": "repair"})
    )
    assert unhealthy_in_service(pool) == {"n3": "reboot"}
    assert decide([pool], 4, NOW).launch and not decide([pool], 5, NOW).launch


def test_without_names_the_nodes_the_check_left_in_service_are_left_out():
    """A ledger snapshot counts free nodes without names (the pages, /metrics): the nodes the
    row says it left in service are not counted; those it took out of service already aren't."""
    health = checked({"n3": "reboot", "n4": "repair"}, left={"n3"})
    pool = replace(good(free=NODES[:5], health=health), free_nodes=None)
    assert unhealthy_in_service(pool) == {"n3": "reboot"}
    assert decide([pool], 4, NOW).launch and not decide([pool], 5, NOW).launch


@pytest.mark.parametrize(
    "health",
    [
        None,  # never checked
        checked({}, Verdict.PASS, at=NOW - timedelta(days=10)),  # old: no refusal for its age
        checked({}, Verdict.ERROR),  # could not finish: refuses nothing by itself
        checked({}, Verdict.FAIL),  # no node could be checked
    ],
)
def test_a_check_never_run_old_or_unfinished_refuses_nothing_by_itself(health):
    decision = decide([good(health=health)], 6, NOW)
    assert decision.launch and decision.schedulable_nodes == 6
    assert not any("GPU health" in r for r in decision.reasons)


def test_the_next_pool_takes_the_job_when_the_first_is_too_small_once_health_counts():
    first = good("c/a", health=checked({"n0": "repair", "n1": "reboot"}))
    decision = decide([first, good("c/b")], 5, NOW)
    assert decision.launch and decision.pool == "b"
    assert "c/a: the job needs 5 nodes; the pool has 4 schedulable" in decision.reasons[1]
    assert "n0 (NVIDIA: repair), n1 (NVIDIA: reboot)" in decision.reasons[2]


def test_a_health_row_is_read_strictly():
    base = {
        "verdict": "fail",
        "passed": False,
        "finished_at": FRESH,
        "reasons": [f"n3: reboot: Xid 79 {LEFT_IN_SERVICE}", "n4: repair: a row remap failure"],
        "details": {"nodes": {"n3": {"action": "reboot"}, "n4": {"action": "repair"}}},
    }
    fact = read_health(base, "health")
    assert fact.failed == {"n3": "reboot", "n4": "repair"} and fact.left_in_service == {"n3"}
    assert read_health(None, "health") is None
    error = read_health({**base, "verdict": "error", "details": {}}, "health")
    assert error.verdict is Verdict.ERROR and error.failed == {}
    for details, words in (
        ({"nodes": {"n3": {"action": "Reboot"}}}, "action of n3 'Reboot' is not one"),
        ({"nodes": {"n3": "reboot"}}, "is not a node's check"),
        ({"nodes": ["n3"]}, "hold no mapping of nodes"),
        ("nodes", "hold no mapping of nodes"),
    ):
        with pytest.raises(FactError, match=words):
            read_health({**base, "details": details}, "health")
    with pytest.raises(FactError, match="verdict 'maybe'"):
        read_health({**base, "verdict": "maybe"}, "health")


# --- the service: the ledger's health row, the simulated cluster's nodes ----------------------

CLUSTER, POOL = "a3u-sim", "h200-a"
SIM = [f"{CLUSTER}-{POOL}-{i}" for i in range(6)]


def test_the_gate_reads_the_latest_health_row_and_leaves_failed_nodes_in_service_out(
    fleet_state,
):
    from gpufleet.backends import cluster_backend
    from gpufleet.backends.base import Taint
    from gpufleet.config.catalog import load_catalog
    from gpufleet.domain.workloads import QUARANTINE_KEY
    from gpufleet.services.validation.health import NodeHealth, health_row
    from gpufleet.store import Ledger
    from tests.services.launch.test_gate_hostile import gate, sound

    ledger = Ledger()
    sound(ledger, POOL)
    assert gate([POOL], 6).launch  # 6 free nodes, no health check yet

    def record(run_id: str, checks: dict[str, NodeHealth], left=()) -> None:
        at = datetime.now(UTC)
        row = health_row({n: checks.get(n, NodeHealth(1, "healthy", "")) for n in SIM}, left)
        ledger.record_validation(run_id=run_id, cluster=CLUSTER, pool=POOL, started_at=at, **row)

    # the cap held: SIM[3] left in service; SIM[4] was quarantined; SIM[5] not checked
    backend = cluster_backend(load_catalog().cluster(CLUSTER))
    backend.add_taint(SIM[4], Taint(QUARANTINE_KEY, "health", "NoSchedule"))
    record(
        "night-1",
        {
            SIM[3]: NodeHealth(1, "reboot", "Xid 79: GPU has fallen off the bus"),
            SIM[4]: NodeHealth(1, "repair", "a row-remapping failure"),
            SIM[5]: NodeHealth(1, None, "not checked: its pod was never placed"),
        },
        left=[SIM[3]],
    )
    refused = gate([POOL], 5)
    assert not refused.launch
    assert refused.reasons == [
        f"{CLUSTER}/{POOL}: the job needs 5 nodes; the pool has 4 schedulable (a job runs "
        "within one pool)",
        f"{CLUSTER}/{POOL}: not counting 1 node(s) that failed their latest GPU health check "
        f"and are still in service: {SIM[3]} (NVIDIA: reboot)",
    ]
    assert ledger.gate_decision(refused.decision_id)["reasons"] == refused.reasons
    launched = gate([POOL], 4)
    assert launched.launch and f"{SIM[3]} (NVIDIA: reboot)" in launched.reasons[1]

    # SIM[4] back in service with no check since (released by hand): not counted until one
    backend.remove_taint(SIM[4], QUARANTINE_KEY)
    released = gate([POOL], 5)
    assert not released.launch
    assert released.reasons[1].endswith(f"{SIM[3]} (NVIDIA: reboot), {SIM[4]} (NVIDIA: repair)")

    record("night-2", {SIM[4]: NodeHealth(2, "repair", "a row-remapping failure")})
    assert gate([POOL], 5).launch  # the latest check passed SIM[3]

    ledger.record_validation_error("night-3", CLUSTER, POOL, "health", "the pods were evicted")
    assert gate([POOL], 5).launch  # a check that could not finish refuses nothing by itself

    record("night-4", {SIM[0]: NodeHealth(1, "needs_human", "Xid 61")}, left=[SIM[0]])
    row = ledger.latest_validation(CLUSTER, POOL, "health")
    details = {**row["details"], "nodes": {SIM[0]: {"action": "reboot-please"}}}
    with ledger.engine.begin() as conn:  # a hand edit: an action this gpufleet does not know
        conn.execute(
            text("UPDATE gf_validations SET details = :d WHERE id = :i"),
            {"d": json.dumps(details), "i": row["id"]},
        )
    unknown = gate([POOL], 1)
    assert not unknown.launch
    assert "'reboot-please' is not one this gpufleet knows" in unknown.reasons[0]


# --- issue 31: a node whose check could not run is left out until a check runs -----------------

WHY = "DCGM said the GPUs were in use for 300 s"


def unrun(could_not_run: dict[str, str], failed=None, left=()) -> HealthFact:
    return HealthFact(FRESH, Verdict.PASS, failed or {}, frozenset(left), could_not_run)


def test_a_node_whose_check_could_not_run_is_not_counted_and_says_why():
    pool = good(health=unrun({"n2": WHY}))
    assert unhealthy_in_service(pool) == {"n2": "could_not_run"}
    decision = decide([pool], 5, NOW)
    assert decision.launch and decision.schedulable_nodes == 5
    assert decision.reasons[1] == (
        "c/p: not counting 1 node(s) until a GPU health check runs on them: n2 (its latest GPU "
        f"health check could not run: {WHY})"
    )
    refused = decide([pool], 6, NOW)
    assert not refused.launch and refused.schedulable_nodes == 5
    assert refused.reasons[1].endswith(f"n2 (its latest GPU health check could not run: {WHY})")


def test_failed_and_could_not_run_nodes_are_named_apart():
    pool = good(health=unrun({"n2": WHY}, failed={"n3": "reboot"}))
    assert unhealthy_in_service(pool) == {"n2": "could_not_run", "n3": "reboot"}
    reasons = decide([pool], 6, NOW).reasons
    assert reasons[1].endswith("still in service: n3 (NVIDIA: reboot)")
    assert reasons[2].startswith("c/p: not counting 1 node(s) until a GPU health check runs")


def test_from_a_count_every_node_that_could_not_run_is_left_out():
    """A snapshot's count has no names: a could_not_run node is never quarantined by its
    check, so the count holds it (fail-closed: left out even when another verdict took it out)."""
    pool = replace(good(free=NODES, health=unrun({"n1": WHY, "n2": WHY})), free_nodes=None)
    assert unhealthy_in_service(pool) == {"n1": "could_not_run", "n2": "could_not_run"}
    assert decide([pool], 4, NOW).launch and not decide([pool], 5, NOW).launch


def test_a_quarantined_node_that_could_not_run_is_not_left_out_twice():
    pool = good(free=[n for n in NODES if n != "n2"], health=unrun({"n2": WHY}))
    assert unhealthy_in_service(pool) == {}
    assert decide([pool], 5, NOW).launch


def test_read_health_reads_could_not_run_with_its_reason_and_old_rows_as_not_checked():
    row = {
        "verdict": "pass",
        "passed": True,
        "finished_at": FRESH,
        "details": {
            "nodes": {
                "n0": {"action": "healthy", "verdict": "pass", "reasons": ["fine"]},
                "n1": {"action": "could_not_run", "verdict": "could_not_run", "reasons": [WHY]},
                "n2": {"action": "could_not_run", "reasons": []},
                "n5": {"action": None, "reasons": ["not checked: its pod is Failed"]},  # old row
            }
        },
    }
    fact = read_health(row, "health")
    assert fact.failed == {}
    assert fact.could_not_run == {"n1": WHY, "n2": "no reason was recorded"}
    assert unhealthy_in_service(good(health=fact)) == {
        "n1": "could_not_run",
        "n2": "could_not_run",
    }
