"""The approvals' pure rules (``domain.remediation``, docs/remediation.md#approvals): what an
answer makes of a request, and when a repair would take a pool below its floor."""

from __future__ import annotations

from gpufleet.domain.remediation import answer_state, below_floor


def test_only_a_persons_approve_approves():
    assert answer_state(["Approve"], "alice") == "approved"
    assert answer_state(["Reject"], "alice") == "rejected"
    assert answer_state(["Reject"], None) == "timed_out"
    assert answer_state(["Approve"], None) == "timed_out"  # a default never approves


def test_a_repair_below_the_floor_needs_a_person():
    assert below_floor(6, 0, 0) is None  # no floor
    assert below_floor(6, 1, 4) is None  # 6 - 1 - 1 = 4 left: at the floor
    why = below_floor(6, 2, 4)
    assert why == (
        "repairing it would leave 3 of 6 nodes in service, below the pool's floor of 4 "
        "(min_serving_nodes)"
    )
    assert "leave 0 of 2" in below_floor(2, 5, 1)
