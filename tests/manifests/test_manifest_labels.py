"""Names and labels: short deterministic JobSet names, run labels from any run id, and the
platform labels on every object and pod."""

from __future__ import annotations

import pytest

from gpufleet.domain import workloads as w
from gpufleet.domain.fleet import PoolRef
from gpufleet.manifests.labels import MAX_JOBSET_NAME, run_label
from gpufleet.manifests.nccl_validation import render_nccl_validation
from gpufleet.manifests.storage_validation import render_storage_validation
from gpufleet.manifests.training import render_training_job
from tests.manifests.manifest_helpers import (
    DNS1035,
    LABEL_VALUE,
    RUN_ID,
    nodes_of,
    pairs_of,
    training_spec,
)
from tests.support.schemas import validate_manifest


def test_jobset_names_stay_short_for_a_long_pool_name(gke_ref: PoolRef) -> None:
    long_pool = gke_ref.pool.model_copy(update={"name": "p" + "-abcdefgh" * 7})  # 64 -> 57 chars
    long_pool = long_pool.model_copy(update={"name": long_pool.name[:63]})
    ref = PoolRef(region=gke_ref.region, cluster=gke_ref.cluster, pool=long_pool)
    pairs = [(f"n{i}a", f"n{i}b") for i in range(12)]  # up to pair-11
    obj = render_nccl_validation(ref, pairs, RUN_ID)
    name = obj["metadata"]["name"]
    assert len(name) <= MAX_JOBSET_NAME and DNS1035.match(name)
    assert name.startswith("nccl-p-abcdefgh")
    # JobSet pod names: <jobset>-<rjob>-<job index>-<pod index>-<5 random>
    longest_pod = f"{name}-pair-11-0-1-abcde"
    assert len(longest_pod) <= 63
    validate_manifest(obj)  # includes JobSet's generated-name rule
    storage = render_storage_validation(ref, ["n0", "n1"], RUN_ID)
    assert len(storage["metadata"]["name"]) <= MAX_JOBSET_NAME
    validate_manifest(storage)


def test_names_are_deterministic_per_run_and_differ_between_runs(gke_ref: PoolRef) -> None:
    a = render_nccl_validation(gke_ref, [("x", "y")], RUN_ID)
    b = render_nccl_validation(gke_ref, [("x", "y")], RUN_ID)
    c = render_nccl_validation(gke_ref, [("x", "y")], RUN_ID + ".localize")
    assert a == b
    assert a["metadata"]["name"] != c["metadata"]["name"]
    nccl = a["metadata"]["name"]
    fio = render_storage_validation(gke_ref, ["x"], RUN_ID)["metadata"]["name"]
    assert nccl != fio


def test_run_label_turns_any_run_id_into_a_label_value() -> None:
    label = run_label(RUN_ID)
    assert LABEL_VALUE.match(label) and len(label) <= 63
    assert label != run_label("scheduled__2025-06-01T02:00:00+00:01")
    assert run_label("nightly-42") == "nightly-42"  # already valid: unchanged
    assert len(run_label("x" * 200)) <= 63
    with pytest.raises(ValueError):
        run_label("")


def test_every_object_and_pod_carries_the_platform_labels(ref: PoolRef) -> None:
    objs = {
        "validation": [
            render_nccl_validation(ref, pairs_of(ref, 2), RUN_ID),
            render_storage_validation(ref, nodes_of(ref, 3), RUN_ID),
        ],
        "training": [render_training_job(ref, training_spec())],
    }
    for workload, manifests in objs.items():
        for obj in manifests:
            labels = obj["metadata"]["labels"]
            assert labels["app.kubernetes.io/managed-by"] == "gpufleet"
            assert labels["gpufleet.io/workload"] == workload
            run = labels["gpufleet.io/run"]
            assert LABEL_VALUE.match(run)
            for _, _, template in w.workload_pod_templates(obj):
                pod_labels = template["metadata"]["labels"]
                assert pod_labels["app.kubernetes.io/managed-by"] == "gpufleet"
                assert pod_labels["gpufleet.io/workload"] == workload
                assert pod_labels["gpufleet.io/run"] == run
                assert pod_labels["gpufleet.io/pool"] == ref.pool.name
