"""Which pools the nightly maps a remediation task for (``fanout.pools_to_remediate``): only
those with a node the remediation step acts on, so a healthy night maps none."""

from __future__ import annotations

from gpufleet.domain.nodes import NodeState
from gpufleet.services.validation.fanout import REMEDIATED_STATES, pools_to_remediate

TARGETS = [
    {"cluster": "c1", "node_pool": "a"},
    {"cluster": "c1", "node_pool": "b"},
    {"cluster": "c2", "node_pool": "a"},
]


def row(cluster: str, pool: str, state: str, **evidence: str) -> dict:
    return {
        "cluster": cluster,
        "pool": pool,
        "node": f"{pool}-1",
        "state": state,
        "evidence": evidence,
    }


def test_a_healthy_night_remediates_no_pool():
    assert pools_to_remediate(TARGETS, []) == []
    # nodes quarantined, suspect, retesting or back in service are the validation's, not its
    quiet = [row("c1", "a", s) for s in ("quarantined", "suspect", "retesting", "released")]
    assert pools_to_remediate(TARGETS, quiet) == []


def test_each_state_the_remediation_step_acts_on_brings_its_pool_in_order():
    for state in ("draining", "drained", "repairing"):
        rows = [row("c2", "a", state), row("c1", "b", state)]
        assert pools_to_remediate(TARGETS, rows) == TARGETS[1:], state


def test_a_node_needing_a_person_counts_until_it_was_paged_for():
    assert pools_to_remediate(TARGETS, [row("c1", "a", "needs_human")]) == TARGETS[:1]
    paged = row("c1", "a", "needs_human", paged="run-1")
    assert pools_to_remediate(TARGETS, [paged]) == []


def test_a_pool_of_another_cluster_with_the_same_name_is_not_taken():
    assert pools_to_remediate(TARGETS[:2], [row("c2", "a", "draining")]) == []


def test_the_states_are_the_ledgers_node_states():
    assert set(REMEDIATED_STATES) <= {s.value for s in NodeState}
