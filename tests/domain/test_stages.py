"""The stage arithmetic (domain.stages): seconds per stage of a pod's life from what the cluster
reports, GPU time per stage, per node per night."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpufleet.domain.stages import (
    PodFacts,
    Stage,
    diag_stage,
    held_seconds,
    ordered,
    per_node_minutes,
    pod_stages,
    stage_gpu_seconds,
)

T0 = datetime(2026, 12, 7, 2, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def pair_pod(**kw) -> PodFacts:
    facts = {
        "created_at": at(0),
        "scheduled_at": at(2),
        "started_at": at(10),
        "main_finished_at": at(40),
        "finished_at": at(41),
        "pull_s": 7.0,
        "marks": {Stage.GANG: 0.5, Stage.NCCL_INIT: 2.0},
    }
    return PodFacts(**{**facts, **kw})


def test_a_pods_life_in_stages_adds_up_to_what_it_held():
    stages = pod_stages(pair_pod(), Stage.SWEEP)
    assert stages == {
        "scheduled": 2.0,
        "image_pull": 7.0,
        "container_start": 1.0,
        "gang": 0.5,
        "nccl_init": 2.0,
        "sweep": 27.5,
        "teardown": 1.0,
    }
    # bound at 2 s, last container done at 41 s: 39 s held; the scheduling wait held nothing
    assert held_seconds(stages) == 39.0
    assert stage_gpu_seconds([stages, stages], 8)["sweep"] == 2 * 27.5 * 8
    assert "scheduled" not in stage_gpu_seconds([stages], 8)


def test_what_a_fact_does_not_say_is_never_guessed():
    # no pull event read: the whole bound -> started gap is container start
    assert pod_stages(pair_pod(pull_s=None), Stage.SWEEP)["container_start"] == 8.0
    # an event that says more than the gap: capped at the gap
    assert pod_stages(pair_pod(pull_s=60.0), Stage.SWEEP)["image_pull"] == 8.0
    # no binding time: the pod counts from its containers' start; no teardown known
    bare = pod_stages(
        pair_pod(created_at=None, scheduled_at=None, main_finished_at=None, marks={}),
        diag_stage(1),
    )
    assert bare == {"image_pull": 0.0, "container_start": 0.0, "diag_r1": 31.0, "teardown": 0.0}
    # marks longer than the run take what is there, in order
    long = pod_stages(pair_pod(marks={Stage.GANG: 50.0, Stage.NCCL_INIT: 2.0}), Stage.SWEEP)
    assert (long["gang"], long["nccl_init"], long["sweep"]) == (30.0, 0.0, 0.0)
    # a pod that never started or has not finished has no stages yet
    assert pod_stages(pair_pod(finished_at=None), Stage.SWEEP) == {}
    assert pod_stages(pair_pod(started_at=None), Stage.SWEEP) == {}


def test_per_node_per_stage_over_a_nights_rows():
    fabric = ({"sweep": 6.0, "image_pull": 2.0}, 6)  # GPU-minutes per stage, nodes
    health = ({"diag_r1": 20.0, "image_pull": 4.0}, 5)
    assert per_node_minutes([fabric, health, ({"io": 1.0}, 0)]) == pytest.approx(
        {"image_pull": 2 / 6 + 4 / 5, "sweep": 1.0, "diag_r1": 4.0}
    )
    assert list(per_node_minutes([fabric, health])) == ["image_pull", "sweep", "diag_r1"]
    assert ordered(["teardown", "diag_r3", "gang", "diag_r1", "odd"]) == [
        "gang",
        "diag_r1",
        "diag_r3",
        "teardown",
        "odd",
    ]
