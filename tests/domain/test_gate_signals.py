"""The gate leaves out a node whose newest bad signal is newer than its pool's validation,
naming it (domain.gate with PoolFacts.signalled)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from gpufleet.domain.gate import PoolFacts, PoolState, ValidationFact, Verdict, decide
from gpufleet.domain.signals import newer_bad_signals

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
VALIDATED = NOW - timedelta(hours=3)


def pool(free=("n1", "n2", "n3", "n4"), named=True, **kw) -> PoolFacts:
    return PoolFacts(
        key="c/p",
        known=True,
        expected_transport="gib",
        state=PoolState.VALIDATED,
        fabric=ValidationFact(True, VALIDATED, "gib", Verdict.PASS),
        has_filesystem=False,
        transition_in_flight=False,
        schedulable_nodes=len(free),
        free_nodes=frozenset(free) if named else None,
        **kw,
    )


SIGNALLED = newer_bad_signals(
    VALIDATED, {"n2": (NOW - timedelta(minutes=2), "Xid 79"), "n9": (NOW, "Xid 48")}
)


def test_a_node_signalled_after_the_validation_is_not_counted_and_is_named():
    refused = decide([pool(signalled=SIGNALLED)], 4, NOW)
    assert not refused.launch
    assert any("n2: Xid 79" in r for r in refused.reasons)
    launched = decide([pool(signalled=SIGNALLED)], 3, NOW)
    assert launched.launch and launched.schedulable_nodes == 3
    assert any("n2: Xid 79" in r for r in launched.reasons)


def test_a_signal_older_than_the_validation_counts_nothing():
    old = newer_bad_signals(VALIDATED, {"n2": (VALIDATED - timedelta(minutes=1), "Xid 79")})
    assert old == {}
    assert decide([pool(signalled=old)], 4, NOW).launch


def test_a_node_already_out_of_the_free_nodes_is_not_taken_twice():
    f = pool(free=("n1", "n3", "n4", "n5"), signalled=SIGNALLED)  # n2 quarantined: not free
    assert decide([f], 4, NOW).launch


def test_from_a_count_every_signalled_node_is_left_out():
    f = pool(named=False, signalled=SIGNALLED)
    assert decide([f], 3, NOW).launch is False  # 4 - n2 - n9: fail-closed
    assert decide([f], 2, NOW).launch


def test_no_signals_change_nothing():
    assert decide([replace(pool(), signalled={})], 4, NOW).launch
