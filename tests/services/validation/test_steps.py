"""The steps of a pair's pods (``services.validation.steps``), rule by rule: a pair runs the
higher level its nodes owe; a node checked twice in a night (its partner owed a check) keeps a
failure whichever read found it, and its steps' costs add up."""

from __future__ import annotations

from gpufleet.services.common.collect import Workload
from gpufleet.services.validation.health import NodeHealth, could_not_run
from gpufleet.services.validation.steps import merge_check, pair_levels, pair_steps


def check(action: str, level: int = 1, seconds: float = 33.0, **kw) -> NodeHealth:
    return NodeHealth(
        level,
        action,
        "why",
        gpu_seconds=seconds * 8,
        stages={f"diag_r{level}": seconds} if level else {},
        **kw,
    )


def test_a_pair_runs_the_higher_level_its_nodes_owe():
    pairs = [("a", "b"), ("c", "d"), ("e", "f")]
    assert pair_levels(pairs, {"a": 1, "b": 3, "c": 1}) == [3, 1, 0]
    wl = Workload("JobSet", "x", "ns", pairs=[list(p) for p in pairs], levels=[3, 1, 0])
    wl.pool_check = 2
    assert pair_steps(wl, 0) == {"gpu-health": "diag_r3"}
    assert pair_steps(wl, 2) == {"fio": "io"}
    assert pair_steps(Workload("JobSet", "x", "ns", pairs=[["a", "b"]]), 0) == {}


def test_a_failure_is_kept_whichever_read_found_it_and_the_costs_add_up():
    healthy, bad = check("healthy"), check("reboot")
    kept = merge_check(healthy.to_dict(), bad)
    assert kept.action == "reboot" and kept.gpu_seconds == 2 * 33 * 8
    assert kept.stages == {"diag_r1": 66.0}
    kept = merge_check(check("reboot").to_dict(), check("healthy"))
    assert kept.action == "reboot"  # a second, healthy read never clears a fault seen


def test_a_first_active_check_stands_and_a_passive_or_failed_to_run_one_gives_way():
    first = check("healthy", notes=["first"])
    assert merge_check(first.to_dict(), check("healthy")).notes == ["first"]
    rested = check("healthy", level=0, seconds=0.0, rested=True)
    assert merge_check(rested.to_dict(), check("healthy")).level == 1
    unrun = could_not_run(1, "its pod was never placed")
    assert merge_check(unrun.to_dict(), check("healthy")).action == "healthy"
    assert merge_check(None, check("healthy")).action == "healthy"
