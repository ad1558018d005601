"""The state machine is the only writer of node state: every write of ``gf_node_states`` goes
through ``Ledger.move_node``, which judges the move with ``domain.nodes.check_move`` in its
transaction (``NodeLifecycle.move`` is the service's one way to it). One forbidden move per
writer that used to write past the machine (the retest that could not judge a node, the node
the cloud replaced, the page for a node that needs a person), and the ledger's own quarantine
and release."""

from __future__ import annotations

import pytest

from gpufleet.config.catalog import load_catalog
from gpufleet.domain.nodes import NodeState, NodeTransitionError
from gpufleet.services.nodes.lifecycle import NodeLifecycle
from gpufleet.services.nodes.remediation import NodeRemediation
from gpufleet.store import Ledger
from gpufleet.store.nodes import NodeMove
from tests.services.nodes.test_drain import CLUSTER, POOL, Cloud, pool_of, walk
from tests.support.ledger_helpers import quarantine, release


@pytest.fixture
def lifecycle(fleet_state):
    cluster = pool_of(4)
    ledger = Ledger()
    ref = load_catalog().pool(CLUSTER, POOL)
    return NodeLifecycle(ref, ledger, cluster), ledger, cluster


def history(ledger: Ledger, node: str) -> list[str]:
    return [e["to_state"] for e in ledger.node_history(CLUSTER, node)]


def test_a_first_move_starts_in_service(lifecycle):
    nodes, ledger, _ = lifecycle
    with pytest.raises(NodeTransitionError, match="from released to repairing"):
        ledger.move_node(CLUSTER, POOL, "n0", NodeMove("repairing", reason="out of nowhere"))
    assert ledger.node_state(CLUSTER, "n0") is None and history(ledger, "n0") == []


def test_an_unjudged_retest_stays_only_in_retesting(lifecycle):
    nodes, ledger, _ = lifecycle
    walk(ledger, "n1", "quarantined", "retesting")
    assert nodes.record_retest("n1", "unsure", {"pairs": []}, "night-1", 2) == "retesting"
    assert history(ledger, "n1") == ["quarantined", "retesting", "retesting"]
    nodes.release("n1", "reseated the NIC", by="alice")  # a person released it meanwhile
    with pytest.raises(NodeTransitionError, match="released to retesting: staying is not"):
        nodes.record_retest("n1", "unsure", {"pairs": []}, "night-1", 2)
    assert ledger.node_state(CLUSTER, "n1")["state"] == "released"  # used to be overwritten


def test_only_a_repairing_node_is_released_as_replaced(lifecycle, fleet_state):
    nodes, ledger, cluster = lifecycle
    walk(ledger, "n1", "quarantined", "retesting", "draining", "drained", "repairing")
    del cluster.nodes["n1"]  # EKS: the node group replaced the instance
    ref = load_catalog().pool(CLUSTER, POOL)
    result = NodeRemediation(ref, ledger, backend=cluster, cloud=Cloud()).step("night-2")
    assert "n1: replaced by the cloud" in result.notes
    assert ledger.node_state(CLUSTER, "n1")["state"] == "released"
    walk(ledger, "n2", "quarantined", "retesting", "draining")
    with pytest.raises(NodeTransitionError, match="only a repairing node the cloud replaced"):
        nodes.move("n2", NodeMove(NodeState.RELEASED, "gone", replaced=True))
    walk(ledger, "n3", "quarantined", "retesting", "draining", "drained", "repairing")
    with pytest.raises(NodeTransitionError, match="only a person may"):
        # not replaced: the machine's rule holds
        nodes.move("n3", NodeMove(NodeState.RELEASED, "gone"))


def test_a_page_is_recorded_only_on_a_node_that_needs_a_person(lifecycle):
    nodes, ledger, cluster = lifecycle
    walk(ledger, "n1", "quarantined", "retesting", "needs_human")
    ref = load_catalog().pool(CLUSTER, POOL)
    first = NodeRemediation(ref, ledger, backend=cluster, cloud=Cloud()).step("night-3")
    assert len(first.pages) == 1
    assert ledger.node_state(CLUSTER, "n1")["evidence"]["paged"] == "night-3"
    assert history(ledger, "n1")[-2:] == ["needs_human", "needs_human"]
    walk(ledger, "n2", "quarantined", "retesting", "draining", "drained")
    with pytest.raises(NodeTransitionError, match="stays with a new record only in"):
        nodes.move("n2", NodeMove(NodeState.DRAINED, "paged", evidence={"paged": "r"}, stay=True))


def test_the_ledgers_quarantine_and_release_go_through_the_machine(lifecycle):
    nodes, ledger, _ = lifecycle
    nodes.suspect("n1", "ran a job on sockets", {"launch_id": 1}, "r0")
    with pytest.raises(NodeTransitionError, match="from suspect to quarantined"):
        quarantine(ledger, CLUSTER, POOL, "n1", "pair below threshold", "night-1")
    assert quarantine(ledger, CLUSTER, POOL, "n2", "pair below threshold", "night-1") is True
    with pytest.raises(NodeTransitionError, match="only a passing retest releases"):
        walk(ledger, "n2", "retesting")
        release(ledger, CLUSTER, "n2")
    assert release(ledger, CLUSTER, "n2", by="alice") is True
    assert ledger.quarantined(CLUSTER) == []
    quarantine(ledger, CLUSTER, POOL, "n3", "pair below threshold", "night-2")
    walk(ledger, "n3", "retesting", "draining")
    nodes.quarantine("n3", "XID 79 in dmesg", by="alice")  # quarantined again, by hand
    (q,) = ledger.quarantined(CLUSTER, POOL)  # one quarantine, since the first (as the old table)
    assert (q["node"], q["reason"], q["run_id"]) == ("n3", "pair below threshold", "night-2")


def test_a_retest_whose_health_check_could_not_run_says_so(lifecycle):
    """Issue 31: the retest's GPU health check could not run (DCGM hung past its limit): the
    node stays retesting, and the reason names the check, not a missing partner."""
    nodes, ledger, _ = lifecycle
    walk(ledger, "n1", "quarantined", "retesting")
    health = {"action": "could_not_run", "reason": "dcgmi-diag: timed out after 900 s"}
    assert nodes.record_retest("n1", "unsure", {"health": health}, "night-1", 2) == "retesting"
    reason = ledger.node_state(CLUSTER, "n1")["reason"]
    assert "GPU health check could not run (dcgmi-diag: timed out after 900 s)" in reason
    assert "partner" not in reason
