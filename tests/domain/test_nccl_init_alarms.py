"""Alarms from NCCL communicator init: the kernels and bootstrap phases' limits."""

from __future__ import annotations

import pytest

from gpufleet.domain.nccl_init import (
    BOOTSTRAP_LIMIT_S,
    KERNELS_LIMIT_S,
    init_alarms,
    is_init_alarm,
)

HEALTHY = {  # a healthy 2 x 8 GPU init (NVIDIA/nccl-tests#319)
    "total": (2.01, "rank 11 of 16 on hgx-b"),
    "kernels": (0.34, "rank 11 of 16 on hgx-b"),
    "alloc": (1.33, "rank 11 of 16 on hgx-b"),
    "bootstrap": (0.87, "rank 7 of 16 on hgx-a"),
}


def test_a_healthy_init_raises_no_alarm() -> None:
    assert init_alarms(HEALTHY) == ()
    assert init_alarms({}) == ()


def test_kernels_over_5_s_is_a_build_that_jit_compiles() -> None:
    slowest = {**HEALTHY, "kernels": (52.94, "rank 4 of 8 on b200-01")}
    (alarm,) = init_alarms(slowest, {"kernels": 52.45})
    assert alarm.name == "nccl-init-kernels" and alarm.limit_s == KERNELS_LIMIT_S == 5.0
    assert "52.94 s" in alarm.note and "rank 4 of 8 on b200-01" in alarm.note
    assert "median 52.45 s" in alarm.note and "nccl#1646" in alarm.note
    assert is_init_alarm(alarm.note)


def test_bootstrap_over_30_s_is_the_launcher_or_the_network() -> None:
    slowest = {**HEALTHY, "bootstrap": (31.2, "rank 9 of 16 on hgx-b")}
    (alarm,) = init_alarms(slowest)
    assert alarm.name == "nccl-init-bootstrap" and alarm.limit_s == BOOTSTRAP_LIMIT_S == 30.0
    assert "31.20 s" in alarm.note and "launcher" in alarm.note and "median" not in alarm.note


@pytest.mark.parametrize(
    ("phase", "seconds", "fires"),
    [
        ("kernels", 5.0, False),
        ("kernels", 5.01, True),
        ("bootstrap", 30.0, False),
        ("bootstrap", 30.01, True),
        ("alloc", 120.0, False),  # no alarm on the other phases
        ("total", 180.0, False),
    ],
)
def test_the_limits_are_over_not_at(phase: str, seconds: float, fires: bool) -> None:
    assert bool(init_alarms({phase: (seconds, "rank 0 of 2")})) is fires


def test_both_alarms_at_once() -> None:
    alarms = init_alarms({"kernels": (9.0, "rank 0 of 2"), "bootstrap": (40.0, "rank 1 of 2")})
    assert [a.name for a in alarms] == ["nccl-init-kernels", "nccl-init-bootstrap"]


def test_a_failure_reason_is_not_an_alarm() -> None:
    assert not is_init_alarm("NCCL used socket instead of the expected ib")
