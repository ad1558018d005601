"""Which nodes a health round checks again (issue 31, ``domain.health.retry``): a check DCGM
found in use is retried 10 s after its latest try, within 300 s of its first (NVSentinel's
numbers), then stays could_not_run saying so. Pure: ``now`` is handed in."""

from __future__ import annotations

import pytest

from gpufleet.domain.health.retry import (
    GAVE_UP,
    RETRY_EVERY_S,
    RETRY_FOR_S,
    Rechecks,
    Try,
    plan_rechecks,
    retried,
)

T0 = 1_800_000_000.0


def test_nvsentinels_numbers():
    assert (RETRY_EVERY_S, RETRY_FOR_S) == (10.0, 300.0)
    assert GAVE_UP == "DCGM said the GPUs were in use for 300 s"


def test_only_dcgm_in_use_is_retried_in_the_round():
    assert retried(["DCGM_ST_IN_USE"]) and retried(["DCGM_ST_NVVS_ERROR", "DCGM_ST_IN_USE"])
    assert not retried([]) and not retried(["DCGM_ST_NVVS_ERROR"])


@pytest.mark.parametrize(
    "latest,now,expect",
    [
        (T0, T0 + 9.9, "waiting"),  # not 10 s since its latest try
        (T0, T0 + 10, "due"),
        (T0 + 280, T0 + 295, "due"),  # its next try at 290: within 300 s of the first
        (T0 + 290, T0 + 300, "due"),  # at 300: the last try
        (T0 + 291, T0 + 301, "gave_up"),  # its next try would start 301 s after the first
        (T0 + 400, T0 + 400, "gave_up"),
    ],
)
def test_a_node_is_due_10_s_after_its_latest_try_within_300_s_of_its_first(latest, now, expect):
    plan = plan_rechecks({"n1": Try(T0, latest)}, now)
    got = "due" if plan.due else "waiting" if plan.waiting else "gave_up"
    assert got == expect
    if expect == "waiting":
        assert plan.waiting == {"n1": latest + 10} and plan.next_at == latest + 10
    if expect == "gave_up":
        assert plan.gave_up == {"n1": GAVE_UP}


def test_each_node_keeps_its_own_clock():
    plan = plan_rechecks(
        {"a": Try(T0, T0 + 20), "b": Try(T0 + 25, T0 + 25), "c": Try(T0 - 300, T0)}, T0 + 30
    )
    assert plan == Rechecks(due=("a",), waiting={"b": T0 + 35}, gave_up={"c": GAVE_UP})
    assert plan_rechecks({}, T0) == Rechecks() and Rechecks().next_at is None
