"""The nightly GPU health check's JobSet: one pod per node, pinned, holding its GPUs, running
NVIDIA's tools at the node's own dcgmi diag level under the markers the parser reads."""

from __future__ import annotations

import pytest

from gpufleet.domain import workloads as w
from gpufleet.domain.fleet import PoolRef
from gpufleet.manifests.gpu_health import DEADLINE_SECONDS, render_gpu_health
from gpufleet.parsing.health.report import MARKER, SECTIONS
from tests.manifests.manifest_helpers import RUN_ID, native_pool_label, nodes_of
from tests.support.schemas import validate_manifest


def test_each_node_runs_the_tools_at_its_own_level_pinned_and_holding_its_gpus(ref: PoolRef):
    nodes = nodes_of(ref, 3)
    levels = dict(zip(nodes, (1, 2, 3), strict=True))
    obj = render_gpu_health(ref, levels, RUN_ID)
    validate_manifest(obj)
    assert (obj["apiVersion"], obj["kind"]) == ("jobset.x-k8s.io/v1alpha2", "JobSet")
    templates = w.workload_pod_templates(obj)
    assert [(group, count) for group, count, _ in templates] == [
        ("node-0", 1),
        ("node-1", 1),
        ("node-2", 1),
    ]
    for (_, _, template), (node, level), rjob in zip(
        templates, levels.items(), obj["spec"]["replicatedJobs"], strict=True
    ):
        assert w.pinned_nodes(template) == [node]
        pod = template["spec"]
        assert pod["nodeSelector"] == {native_pool_label(ref): ref.pool.name}
        (container,) = pod["containers"]
        limits = container["resources"]["limits"]
        assert limits["nvidia.com/gpu"] == str(ref.pool.gpu.count)  # the whole node
        script = container["command"][-1]
        assert f"dcgmi diag -r {level} -j" in script
        assert MARKER.format("$1") in script  # section() prints the parser's marker
        for section in SECTIONS:
            assert f"\nsection {section}\n" in script
        assert rjob["template"]["spec"]["activeDeadlineSeconds"] == DEADLINE_SECONDS[level]
        quarantine = [t for t in pod["tolerations"] if t["key"] == "gpufleet.io/quarantine"]
        assert quarantine, "a quarantined node is retested: the check must reach it"


@pytest.mark.parametrize(
    "levels,match",
    [
        ({}, "levels is empty"),
        ({"node-a": 5}, "level 1, 2, 3 or 4"),
        ({"node-a": True}, "level 1, 2, 3 or 4"),
        ({"Bad_Node": 1}, "not a valid node name"),
    ],
)
def test_bad_input_is_refused(ref: PoolRef, levels, match):
    with pytest.raises(ValueError, match=match):
        render_gpu_health(ref, levels, RUN_ID)
