"""The launch gate is fail-closed: no combination of missing or stale facts launches, and a bad
request is refused with every problem named."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.domain.gate import (
    DEFAULT_MAX_AGE,
    MAX_SKEW,
    HealthFact,
    PoolFacts,
    PoolState,
    ValidationFact,
    Verdict,
    decide,
    pool_problems,
    problems_change_at,
)

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
FRESH = NOW - timedelta(hours=3)
PASS, FAIL, ERROR = Verdict.PASS, Verdict.FAIL, Verdict.ERROR


def good(key="c/p", nodes=4) -> PoolFacts:
    return PoolFacts(
        key=key,
        known=True,
        expected_transport="gib",
        state=PoolState.VALIDATED,
        fabric=ValidationFact(True, FRESH, "gib", PASS),
        has_filesystem=True,
        storage=ValidationFact(True, FRESH, None, PASS),
        transition_in_flight=False,
        schedulable_nodes=nodes,
    )


def test_fresh_passing_pool_launches_with_reasons():
    decision = decide([good()], nodes=2, now=NOW)
    assert decision.launch
    assert decision.reasons[0].startswith("c/p: validated gib 3.0 h ago")


def test_each_missing_or_bad_fact_refuses_with_its_reason():
    cases = {
        "unknown pool": replace(good(), known=False),
        "pool is degraded": replace(good(), state=PoolState.DEGRADED),
        "pool is degraded (transport observed: socket (expected gib))": replace(
            good(),
            state=PoolState.DEGRADED,
            state_reason="transport observed: socket (expected gib)",
        ),
        "pool is suspect": replace(good(), state=PoolState.SUSPECT),
        "pool is transitioning": replace(good(), state=PoolState.TRANSITIONING),
        "pool is retired": replace(good(), state=PoolState.RETIRED),
        "pool state 'Validated' is not one": replace(good(), state="Validated"),
        "pool state 'validated ' is not one": replace(good(), state="validated "),
        "the latest fabric validation could not finish: sim db gone": replace(
            good(), fabric=ValidationFact(False, FRESH, "gib", ERROR, "sim db gone")
        ),
        "the latest Lustre validation could not finish: x": replace(
            good(), storage=ValidationFact(False, FRESH, None, ERROR, "x")
        ),
        "the latest fabric validation failed": replace(
            good(), fabric=ValidationFact(True, FRESH, "gib", None)
        ),
        "Lustre validation is dated in the future": replace(
            good(), storage=ValidationFact(True, NOW + timedelta(days=365), None, PASS)
        ),
        "no lifecycle state": replace(good(), state=None),
        "no fabric validation": replace(good(), fabric=None),
        "latest fabric validation failed": replace(
            good(), fabric=ValidationFact(False, FRESH, "gib", FAIL)
        ),
        "validated transport socket": replace(
            good(), fabric=ValidationFact(True, FRESH, "socket", PASS)
        ),
        "stale (27.0 h old": replace(
            good(), fabric=ValidationFact(True, NOW - timedelta(hours=27), "gib", PASS)
        ),
        "no Lustre validation": replace(good(), storage=None),
        "latest Lustre validation failed": replace(
            good(), storage=ValidationFact(False, FRESH, None, FAIL)
        ),
        "transition is in flight": replace(good(), transition_in_flight=True),
        "unknown whether a transition": replace(good(), transition_in_flight=None),
        "schedulable node count unknown": replace(good(), schedulable_nodes=None),
        "facts unreadable": replace(good(), error="ledger down"),
        "needs 2 nodes; the pool has 1 schedulable": replace(good(), schedulable_nodes=1),
        "dated in the future": replace(
            good(), fabric=ValidationFact(True, NOW + timedelta(minutes=6), "gib", PASS)
        ),
    }
    for expected, facts in cases.items():
        decision = decide([facts], nodes=2, now=NOW)
        assert not decision.launch, expected
        assert any(expected in r for r in decision.reasons), (expected, decision.reasons)


DRIFT = "busbw 331.2 GB/s is 4.3% below its 14-night median 346.0 GB/s (noise ±1.1%)"


def test_a_drifting_pool_launches_and_says_so():
    """``drifting`` is a warning: the launch goes ahead, and its reasons carry the figures."""
    drifting = replace(good(), state=PoolState.DRIFTING, state_reason=DRIFT, block_on_drift=False)
    decision = decide([drifting], nodes=2, now=NOW)
    assert decision.launch and decision.pool == "p"
    assert decision.reasons[0].startswith("c/p: validated gib")
    assert f"c/p: warning: launching on a drifting pool: {DRIFT}" in decision.reasons
    steady = decide([good()], nodes=2, now=NOW)
    assert not any("drift" in r for r in steady.reasons)  # no warning without drift


def test_a_pool_that_blocks_on_drift_is_refused_naming_the_drift():
    drifting = replace(good(), state=PoolState.DRIFTING, state_reason=DRIFT, block_on_drift=True)
    decision = decide([drifting], nodes=2, now=NOW)
    assert not decision.launch
    assert decision.reasons == [f"c/p: pool is drifting (the catalog sets block_on_drift): {DRIFT}"]
    # unknown whether it blocks: fail-closed
    unknown = decide([replace(drifting, block_on_drift=None)], nodes=2, now=NOW)
    assert not unknown.launch and "unknown block_on_drift" in unknown.reasons[0]
    # the next pool takes the job, and the refusal still names the drift
    decision = decide([drifting, good("c/q")], nodes=2, now=NOW)
    assert decision.launch and decision.pool == "q"
    assert any("c/p: pool is drifting" in r and DRIFT in r for r in decision.reasons)


def test_block_on_drift_does_not_touch_a_pool_that_is_not_drifting():
    assert decide([replace(good(), block_on_drift=True)], nodes=2, now=NOW).launch


def test_no_pools_or_no_nodes_refuse():
    assert not decide([], 1, NOW).launch
    assert not decide(None, 1, NOW).launch
    assert not decide([good()], 0, NOW).launch
    assert not decide([good()], 1, NOW.replace(tzinfo=None)).launch


def test_pool_without_filesystem_needs_no_storage_check():
    assert decide([replace(good(), has_filesystem=False, storage=None)], 2, NOW).launch


def test_pools_are_alternatives_never_added_up():
    """A job runs within one pool: two pools of 6 and 4 cannot hold 10 nodes, nor a pool of 6
    named twice 12 (issue 8)."""
    twice = decide([good("c/h200-a", 6), good("c/h200-a", 6)], 12, NOW)
    assert not twice.launch and twice.pool is None
    assert twice.reasons == [
        "c/h200-a: the job needs 12 nodes; the pool has 6 schedulable (a job runs within one pool)"
    ]  # counted once, said once
    assert not decide([good("c/a", 6), good("c/b", 4)], 10, NOW).launch
    assert not decide([good("c/a", 2), good("c/b", 2)], 4, NOW).launch


def test_the_first_sound_pool_with_room_is_chosen_and_the_others_say_why():
    small, bad, big, later = (
        good("c/small", 2),
        replace(good("c/bad", 8), state=PoolState.DEGRADED),
        good("c/big", 8),
        good("c/later", 8),
    )
    decision = decide([small, bad, big, later], 4, NOW)
    assert decision.launch and decision.pool == "big" and decision.schedulable_nodes == 8
    assert decision.reasons[0].startswith("c/big: validated gib")
    why = " | ".join(decision.reasons[1:])
    assert "c/small: the job needs 4 nodes; the pool has 2" in why
    assert "c/bad: pool is degraded" in why
    assert "c/later: not used: c/big comes first" in why
    assert decide([later, big], 4, NOW).pool == "later"  # the order given decides


maybe_time = st.one_of(
    st.none(),
    st.timedeltas(min_value=timedelta(hours=-3), max_value=timedelta(days=30)).map(
        lambda d: NOW - d
    ),
)
validation = st.one_of(
    st.none(),
    st.builds(
        ValidationFact,
        passed=st.one_of(st.none(), st.booleans()),
        finished_at=maybe_time,
        transport=st.sampled_from([None, "gib", "socket", "ib", "unknown"]),
        verdict=st.sampled_from([None, PASS, FAIL, ERROR]),
    ),
)
NAMES = [f"n{i}" for i in range(6)]
health = st.one_of(
    st.none(),
    st.builds(
        HealthFact,
        finished_at=maybe_time.filter(lambda t: t is not None),
        verdict=st.sampled_from([PASS, FAIL, ERROR]),
        failed=st.dictionaries(st.sampled_from(NAMES), st.sampled_from(["reboot", "repair"])),
        left_in_service=st.frozensets(st.sampled_from(NAMES)),
    ),
)
facts = st.builds(
    PoolFacts,
    key=st.sampled_from(["c/a", "c/b", "c/c"]),
    known=st.booleans(),
    expected_transport=st.sampled_from([None, "gib", "socket"]),
    state=st.one_of(
        st.none(), st.sampled_from(list(PoolState)), st.sampled_from(["Validated", "ready "])
    ),
    fabric=validation,
    has_filesystem=st.one_of(st.none(), st.booleans()),
    storage=validation,
    transition_in_flight=st.one_of(st.none(), st.booleans()),
    schedulable_nodes=st.one_of(st.none(), st.integers(0, 16)),
    error=st.one_of(st.none(), st.just("boom")),
    block_on_drift=st.one_of(st.none(), st.booleans()),
    health=health,
    free_nodes=st.one_of(st.none(), st.frozensets(st.sampled_from(NAMES))),
)


def usable(f: PoolFacts) -> int:
    """The free nodes a job may use: not those whose latest GPU health check failed and that
    are counted as free (by name; without names, those the check left in service)."""
    if f.health is None:
        return f.schedulable_nodes
    named = f.free_nodes if f.free_nodes is not None else f.health.left_in_service
    return max(0, f.schedulable_nodes - len(set(f.health.failed) & named))


def fact_is_sound(f: PoolFacts) -> bool:
    """Independent statement of 'proven capacity' for one pool."""

    def fresh_pass(v):
        return (
            v is not None
            and v.passed is True
            and v.verdict == "pass"
            and v.finished_at is not None
            and timedelta(minutes=-5) <= NOW - v.finished_at <= DEFAULT_MAX_AGE
        )

    return (
        f.known
        and f.error is None
        and isinstance(f.state, PoolState)
        and (
            f.state in ("validated", "ready")
            or (f.state == "drifting" and f.block_on_drift is False)
        )
        and fresh_pass(f.fabric)
        and f.expected_transport is not None
        and f.fabric.transport == f.expected_transport
        and f.has_filesystem is not None
        and (not f.has_filesystem or fresh_pass(f.storage))
        and f.transition_in_flight is False
        and f.schedulable_nodes is not None
    )


@settings(max_examples=600, deadline=None)
@given(st.lists(facts, min_size=1, max_size=4), st.integers(min_value=-1, max_value=20))
def test_launch_only_when_every_fact_is_known_fresh_and_passing(pools, nodes):
    decision = decide(pools, nodes, NOW)
    first = {}
    for f in pools:
        first.setdefault(f.key, f)
    able = [f for f in first.values() if fact_is_sound(f) and nodes >= 1 and usable(f) >= nodes]
    assert decision.launch == bool(able)
    assert decision.pool == (able[0].key.split("/")[1] if able else None)
    assert decision.reasons  # every decision says why


@settings(max_examples=300, deadline=None)
@given(st.lists(facts, min_size=1, max_size=4), st.data())
def test_removing_any_fact_never_turns_refuse_into_launch(pools, data):
    before = decide(pools, 1, NOW)
    i = data.draw(st.integers(0, len(pools) - 1))
    field = data.draw(
        st.sampled_from(
            [
                "fabric",
                "storage",
                "state",
                "transition_in_flight",
                "schedulable_nodes",
                "has_filesystem",
                "expected_transport",
                "block_on_drift",
            ]
        )
    )
    damaged = list(pools)
    damaged[i] = replace(pools[i], **{field: None})
    after = decide(damaged, 1, NOW)
    assert not (after.launch and not before.launch)
    if field == "block_on_drift":  # only a drifting pool needs to know; then it refuses
        first = next(f for f in pools if f.key == pools[i].key)
        if first is pools[i] and pools[i].state == "drifting":
            assert after.pool != pools[i].name
    elif field != "storage" or pools[i].has_filesystem is not False:
        assert not after.launch


# --- the launch request: one check, every problem named, refusals recorded ------------------

REQUEST = {
    "cluster": "a3u-sim",
    "pools": ["h200-a"],
    "nodes": 2,
    "gpus_per_node": 8,
    "job_name": "train-a",
    "namespace": "ml-team",
    "image": "example/train:1",
    "command": ["torchrun", "train.py"],
}


def test_a_launch_request_names_every_problem():
    from gpufleet.config.catalog import load_catalog
    from gpufleet.services.launch.request import LaunchRequest, request_problems

    catalog = load_catalog()
    req = LaunchRequest.from_params(REQUEST, catalog)
    assert (req.nodes, req.transport_policy, req.env) == (2, "fail", {})
    cases = {
        "cluster is missing": {k: v for k, v in REQUEST.items() if k != "cluster"},
        "unknown cluster 'nope'": {**REQUEST, "cluster": "nope"},
        "cluster 'a3u-sim' has no node pool 'h100-a'": {**REQUEST, "pools": ["h100-a"]},
        "a3u-sim/h200-a has 6 nodes; the job asks 7": {**REQUEST, "nodes": 7},
        "nodes have 8 GPUs; the job asks 9 per node": {**REQUEST, "gpus_per_node": 9},
        "nodes: '2' is not of type 'integer'": {**REQUEST, "nodes": "2"},
        "nodes: True is not of type 'integer'": {**REQUEST, "nodes": True},
        "job_name 'Train' is not a DNS-1035 label": {**REQUEST, "job_name": "Train"},
        "transport_policy: 'maybe' is not one of": {**REQUEST, "transport_policy": "maybe"},
        "env A: value must be a string (got int)": {**REQUEST, "env": {"A": 1}},
        "is a mapping of fields, not list": [REQUEST],
    }
    for expected, params in cases.items():
        problems = request_problems(params, catalog)
        assert any(expected in p for p in problems), (expected, problems)
    both = request_problems({**REQUEST, "nodes": 0, "image": ""}, catalog)
    assert len(both) == 2  # every problem at once, not the first only


def test_a_malformed_request_is_refused_before_the_gate_and_recorded_nowhere(fleet_state):
    """Bad input changes nothing (issue 31): every problem named, no decision in the ledger."""
    from gpufleet.config.catalog import load_catalog
    from gpufleet.services.launch.request import InvalidLaunchRequest
    from gpufleet.services.launch.submit import TrainingLaunch
    from gpufleet.store import Ledger

    launch = TrainingLaunch(load_catalog(), Ledger)
    with pytest.raises(InvalidLaunchRequest, match="cluster is missing") as err:
        launch.gate({"job_name": "j", "nodes": "many"}, run_id="r1")
    assert "nodes: 'many' is not of type 'integer'" in err.value.problems
    assert Ledger().gate_decisions() == []


near = st.timedeltas(min_value=timedelta(hours=-3), max_value=timedelta(hours=30))
soon = st.timedeltas(min_value=timedelta(0), max_value=timedelta(hours=6))


@settings(max_examples=600, deadline=None)
@given(facts, near, near, st.one_of(soon, st.timedeltas(timedelta(0), timedelta(days=40))))
def test_problems_hold_until_the_moment_the_clock_can_change_them(f, fabric, storage, later):
    """What a reader keeping verdicts between requests relies on (``services.views.fleet``):
    ``pool_problems`` answers the same, text included, at any moment before
    ``problems_change_at``. Validations dated around the moments that matter (just fresh,
    just stale, a little ahead)."""
    f = replace(
        f,
        fabric=f.fabric and replace(f.fabric, finished_at=NOW - fabric),
        storage=f.storage and replace(f.storage, finished_at=NOW - storage),
    )
    until = problems_change_at(f, NOW, DEFAULT_MAX_AGE)
    assert until is None or until >= NOW
    t = NOW + later
    if until is None or t < until:
        assert pool_problems(f, t, DEFAULT_MAX_AGE) == pool_problems(f, NOW, DEFAULT_MAX_AGE)


def test_the_moment_a_pool_turns_stale_or_stops_being_in_the_future_is_the_one_named():
    tick = timedelta(microseconds=1)
    fresh = good()
    turns_stale = FRESH + DEFAULT_MAX_AGE
    assert problems_change_at(fresh, NOW, DEFAULT_MAX_AGE) == turns_stale
    assert pool_problems(fresh, turns_stale, DEFAULT_MAX_AGE) == []
    assert "stale" in pool_problems(fresh, turns_stale + tick, DEFAULT_MAX_AGE)[0]
    ahead = replace(fresh, fabric=ValidationFact(True, NOW + timedelta(hours=1), "gib", PASS))
    arrives = NOW + timedelta(hours=1) - MAX_SKEW
    assert problems_change_at(ahead, NOW, DEFAULT_MAX_AGE) == arrives
    assert "future" in pool_problems(ahead, arrives - tick, DEFAULT_MAX_AGE)[0]
    assert pool_problems(ahead, arrives, DEFAULT_MAX_AGE) == []
    stale = replace(fresh, storage=ValidationFact(True, NOW - timedelta(days=3), None, PASS))
    assert problems_change_at(stale, NOW, DEFAULT_MAX_AGE) == NOW  # "3.0 days old" moves
    unchecked = replace(fresh, fabric=None, has_filesystem=False)
    assert problems_change_at(unchecked, NOW, DEFAULT_MAX_AGE) is None
