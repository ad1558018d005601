"""The remediation ladder, the breakers and the profiles as pure rules (domain.remediation):
each test fails when its rule is broken."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpufleet.domain.remediation import (
    Breaker,
    RemediationPolicy,
    Rung,
    ScopeCount,
    held_back,
    judge_breakers,
    next_rung,
    start_rung,
)

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def incident(at: datetime, *rungs: Rung, released: bool = True) -> list[dict]:
    """One incident's lifecycle events: out of service at ``at``, the ``rungs`` an hour apart,
    then released (when ``released``)."""
    events = [{"from_state": "released", "to_state": "quarantined", "evidence": {}, "at": at}]
    for i, rung in enumerate(rungs, start=1):
        events.append(
            {
                "from_state": "drained",
                "to_state": "repairing",
                "evidence": {"rung": rung.value},
                "at": at + timedelta(hours=i),
            }
        )
    if released:
        end = at + timedelta(hours=len(rungs) + 1)
        events.append(
            {"from_state": "retesting", "to_state": "released", "evidence": {}, "at": end}
        )
    return events


@pytest.mark.parametrize(
    ("action", "rung"),
    [
        ("reset_gpu", Rung.RESET_GPU),
        ("reboot", Rung.REBOOT),
        ("repair", Rung.REPAIR),
        ("needs_human", Rung.NEEDS_HUMAN),
        (None, Rung.REPAIR),  # a fabric fault: the provider's repair, as before the ladder
    ],
)
def test_a_node_starts_at_the_rung_nvidia_names(action, rung):
    assert start_rung(action) is rung
    assert next_rung([], action, T0).rung is rung


def test_a_node_failing_three_incidents_in_a_week_reaches_a_person_after_at_most_two_reboots():
    """Xid 79 (RESTART_BM) three times in a week: reboot, then the provider's repair, then a
    person, never a reboot loop."""
    events: list[dict] = []
    given = []
    for day in (0, 2, 4):
        at = T0 + timedelta(days=day)
        events += incident(at, released=False)
        step = next_rung(events, "reboot", at + timedelta(minutes=30), nvidia="Xid 79: RESTART_BM")
        given.append(step.rung)
        if step.rung is not Rung.NEEDS_HUMAN:
            events[-1:] = incident(at, step.rung)
    assert given[-1] is Rung.NEEDS_HUMAN
    assert sum(r in (Rung.RESET_GPU, Rung.REBOOT) for r in given) <= 2
    assert "Xid 79: RESTART_BM" in step.reason  # NVIDIA's words reach the person


def test_within_an_incident_each_rung_is_tried_once_and_the_node_climbs():
    events = incident(T0, Rung.RESET_GPU, released=False)
    assert next_rung(events, "reset_gpu", T0 + timedelta(hours=2)).rung is Rung.REBOOT
    events = incident(T0, Rung.RESET_GPU, Rung.REBOOT, released=False)
    assert next_rung(events, "reset_gpu", T0 + timedelta(hours=3)).rung is Rung.REPAIR
    events = incident(T0, Rung.RESET_GPU, Rung.REBOOT, Rung.REPAIR, released=False)
    assert next_rung(events, "reset_gpu", T0 + timedelta(hours=4)).rung is Rung.NEEDS_HUMAN


def test_the_reboot_rungs_are_skipped_past_the_windows_reboots():
    policy = RemediationPolicy(max_reboots=1)
    events = incident(T0, Rung.RESET_GPU) + incident(T0 + timedelta(days=1), released=False)
    # the window's one reboot is spent: a new reset-class fault goes to the provider's repair
    step = next_rung(events, "reset_gpu", T0 + timedelta(days=1, hours=1), policy)
    assert step.rung is Rung.REPAIR and step.reboots_in_window == 1


def test_the_window_forgets_rungs_of_incidents_older_than_it():
    events = incident(T0, Rung.REBOOT) + incident(T0 + timedelta(days=8), released=False)
    step = next_rung(events, "reboot", T0 + timedelta(days=8, hours=1))
    assert step.rung is Rung.REBOOT and step.reboots_in_window == 0


def test_a_breaker_limit_is_the_larger_of_absolute_and_percent():
    assert Breaker(absolute=2, percent=20).limit(10) == 2
    assert Breaker(absolute=2, percent=20).limit(30) == 6
    assert Breaker(absolute=10, percent=5).limit(100) == 10


def test_a_30_percent_fault_trips_the_pool_breaker_and_names_it():
    pool = [ScopeCount("pool", "c/p", 10, 3), ScopeCount("cluster", "c", 40, 3)]
    verdict = judge_breakers(pool)
    assert not verdict.proceed and verdict.trip is not None and verdict.trip.new
    assert verdict.trip.scope == "pool" and "pool breaker c/p" in verdict.reason
    assert "3 of 10" in verdict.reason
    assert judge_breakers([ScopeCount("pool", "c/p", 10, 2)]).proceed  # 20%: still fine


def test_a_tripped_breaker_stays_tripped_whatever_the_counts():
    counts = [ScopeCount("pool", "c/p", 10, 0), ScopeCount("fleet", "fleet", 500, 0)]
    verdict = judge_breakers(counts, tripped={("fleet", "fleet"): "26 of 500 nodes"})
    assert not verdict.proceed and "fleet breaker fleet is tripped" in verdict.reason
    assert verdict.trip is not None and not verdict.trip.new


@pytest.mark.parametrize("action", ["quarantine", "suspect", "drain", "reboot", "repair"])
def test_an_observe_pool_and_the_dry_run_hold_every_action_back(action):
    assert "observe" in held_back(action, "observe", dry_run=False)
    assert "dry run" in held_back(action, "remediate", dry_run=True)
    assert held_back(action, "remediate", dry_run=False) is None


def test_a_quarantine_pool_quarantines_but_never_drains_or_repairs():
    assert held_back("quarantine", "quarantine", dry_run=False) is None
    for action in ("drain", "reset_gpu", "reboot", "repair"):
        assert "quarantine" in held_back(action, "quarantine", dry_run=False)
