"""Re-admission sessions (gpufleet.domain.admission)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.domain.admission import Session, SessionState, join, judge

T0 = datetime(2026, 12, 7, 10, 0, tzinfo=UTC)


def test_nodes_within_the_window_share_one_session():
    s = join([], "c", "p", "n1", T0)
    s2 = join([s], "c", "p", "n2", T0 + timedelta(seconds=299))
    assert s2.opened_at == T0 and set(s2.nodes) == {"n1", "n2"}
    assert not s2.due(T0 + timedelta(seconds=299))
    assert s2.due(T0 + timedelta(seconds=300))


def test_after_the_window_a_new_session_opens():
    s = join([], "c", "p", "n1", T0)
    late = join([s], "c", "p", "n2", T0 + timedelta(seconds=300))
    assert late.opened_at == T0 + timedelta(seconds=300) and set(late.nodes) == {"n2"}


def test_other_pools_do_not_share():
    s = join([], "c", "p", "n1", T0)
    other = join([s], "c", "q", "n2", T0)
    assert other.pool == "q" and set(other.nodes) == {"n2"}


def test_joining_twice_is_idempotent():
    s = join([], "c", "p", "n1", T0)
    assert join([s], "c", "p", "n1", T0 + timedelta(seconds=400)) == s


def test_a_validating_session_takes_no_one():
    s = Session("c", "p", T0, nodes={"n1": T0}, state=SessionState.VALIDATING)
    new = join([s], "c", "p", "n2", T0 + timedelta(seconds=1))
    assert new is not s and set(new.nodes) == {"n2"}


@pytest.mark.parametrize("bad", [0, -1, math.inf, math.nan])
def test_bad_window_is_refused(bad):
    with pytest.raises(ValueError, match="window"):
        join([], "c", "p", "n1", T0, window_s=bad)


def test_judge():
    s = Session("c", "p", T0, nodes={"a": T0, "b": T0, "c": T0, "d": T0 + timedelta(seconds=9)})
    bad = {"c": (T0 + timedelta(seconds=5), "Xid 79"), "d": (T0, "old Xid 48")}
    j = judge(s, passed={"a", "c", "d"}, failed={"b": "pair bandwidth low"}, bad_since=bad)
    assert set(j.released) == {"a", "d"}  # d's bad signal is older than its joining
    assert j.quarantined["b"] == "pair bandwidth low"
    assert "Xid 79" in j.quarantined["c"]
    assert j.carried == {}


@given(
    st.dictionaries(st.sampled_from("abcdefgh"), st.integers(0, 600), max_size=8),
    st.sets(st.sampled_from("abcdefgh")),
    st.sets(st.sampled_from("abcdefgh")),
    st.dictionaries(st.sampled_from("abcdefgh"), st.integers(0, 600)),
)
def test_never_released_without_passing_nor_with_a_newer_bad_signal(joined, passed, failed, bad):
    nodes = {n: T0 + timedelta(seconds=t) for n, t in joined.items()}
    s = Session("c", "p", T0, nodes=nodes)
    bad_since = {n: (T0 + timedelta(seconds=t), "x") for n, t in bad.items()}
    j = judge(s, passed, {n: "f" for n in failed}, bad_since)
    assert set(j.released) | set(j.quarantined) | set(j.carried) == set(nodes)
    assert not (set(j.released) & set(j.quarantined))
    for n in j.released:
        assert n in passed and n not in failed
        assert n not in bad_since or bad_since[n][0] < nodes[n]
