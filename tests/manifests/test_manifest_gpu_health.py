"""The nightly GPU health check's JobSet: one pod per node, pinned, holding its GPUs, running
NVIDIA's tools at the node's own dcgmi diag level under the markers the parser reads."""

from __future__ import annotations

import pytest

from gpufleet.domain import workloads as w
from gpufleet.domain.fleet import PoolRef
from gpufleet.domain.health.tiers import (
    DEFAULT_DIAG_TIMEOUT_S,
    KILL_AFTER_S,
    TOOL_TIMEOUT_S,
    DcgmLimits,
    default_limits,
)
from gpufleet.manifests.gpu_health import (
    DEADLINE_SECONDS,
    DEFAULT_DCGM_IMAGE,
    job_deadline,
    render_gpu_health,
)
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


def _script(obj: dict, i: int = 0) -> str:
    job = obj["spec"]["replicatedJobs"][i]["template"]["spec"]
    return job["template"]["spec"]["containers"][0]["command"][-1]


def test_every_tool_runs_under_a_timeout_and_prints_its_exit_status(ref: PoolRef):
    """dcgmi diag under its level's hard timeout, the quick tools under a short fixed one; each
    followed by ``gpufleet-health-exit=<status>`` on a line of its own; the node line says the
    timeout."""
    nodes = nodes_of(ref, 2)
    obj = render_gpu_health(ref, dict(zip(nodes, (1, 3), strict=True)), RUN_ID)
    validate_manifest(obj)
    for i, (level, seconds) in enumerate(((1, 120), (3, 2700))):
        script = _script(obj, i)
        lines = script.splitlines()
        assert f'echo "node=${{GPUFLEET_NODE}} level={level} timeout={seconds}"' in lines
        assert (
            f'timeout --kill-after={KILL_AFTER_S} {seconds} dcgmi diag -r {level} -j; ended "$?"'
            in lines
        )
        assert "ended() { printf '\\ngpufleet-health-exit=%s\\n' \"$1\"; }" in lines
        quick = f"timeout --kill-after={KILL_AFTER_S} {TOOL_TIMEOUT_S} "
        assert f'{quick}nvidia-smi -q -d ROW_REMAPPER,ECC,PAGE_RETIREMENT; ended "$?"' in lines
        assert f'{quick}nvidia-smi nvlink -e; ended "$?"' in lines
        assert f"{quick}dmesg 2> /dev/null | grep 'NVRM'; ended \"${{PIPESTATUS[0]}}\"" in lines
        tools = [line for line in lines if line.startswith("timeout ")]
        assert len(tools) == 5 and all(line.count("; ended ") == 1 for line in tools)
        deadline = obj["spec"]["replicatedJobs"][i]["template"]["spec"]["activeDeadlineSeconds"]
        assert deadline > seconds + KILL_AFTER_S + 4 * (TOOL_TIMEOUT_S + KILL_AFTER_S)


def test_the_models_limits_set_the_timeout_and_refuse_a_level_above_its_highest(ref: PoolRef):
    node = nodes_of(ref, 1)[0]
    slow = DcgmLimits("H200", timeouts_s={**DEFAULT_DIAG_TIMEOUT_S, 2: 4000})
    obj = render_gpu_health(ref, {node: 2}, RUN_ID, limits=slow)
    assert "timeout --kill-after=10 4000 dcgmi diag -r 2 -j;" in _script(obj)
    assert "level=2 timeout=4000" in _script(obj)
    job = obj["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert job["activeDeadlineSeconds"] == job_deadline(2, 4000) > 4000  # the tool ends first
    with pytest.raises(ValueError, match="level 2 is above B200's highest dcgmi diag level 1"):
        render_gpu_health(ref, {node: 2}, RUN_ID, limits=default_limits("B200"))
    assert "dcgmi diag -r 1 -j" in _script(
        render_gpu_health(ref, {node: 1}, RUN_ID, limits=default_limits("B200"))
    )


# The health container's script as it was rendered before the script moved into the shared
# macro (include/manifests/_gpu_health_script.j2), level 2 at its default 900 s: the move, and
# the NCCL pair pods' gpu-health init container that shares it, change nothing here.
LEVEL_2_SCRIPT = """\
set -u
section() { echo "==> gpufleet-health: $1 <=="; }
ended() { printf '\\ngpufleet-health-exit=%s\\n' "$1"; }
section node
echo "node=${GPUFLEET_NODE} level=2 timeout=900"
section dmesg
timeout --kill-after=10 60 dmesg 2> /dev/null | grep 'NVRM'; ended "${PIPESTATUS[0]}"
section nvidia-smi-remap-ecc
timeout --kill-after=10 60 nvidia-smi -q -d ROW_REMAPPER,ECC,PAGE_RETIREMENT; ended "$?"
section nvidia-smi-nvlink
timeout --kill-after=10 60 nvidia-smi nvlink -e; ended "$?"
section thermal
timeout --kill-after=10 60 nvidia-smi --query-gpu=index,clocks_event_reasons.hw_thermal_slowdown,\
clocks_event_reasons.sw_thermal_slowdown --format=csv,noheader; ended "$?"
section dcgmi-diag
timeout --kill-after=10 900 dcgmi diag -r 2 -j; ended "$?"
true"""


def test_the_health_container_is_unchanged_by_the_shared_script(gke_ref: PoolRef):
    obj = render_gpu_health(gke_ref, {"node-a": 2}, RUN_ID)
    job = obj["spec"]["replicatedJobs"][0]["template"]["spec"]
    (container,) = job["template"]["spec"]["containers"]
    assert container["command"] == ["bash", "-c", LEVEL_2_SCRIPT]
    assert container["name"] == "gpu-health" and container["image"] == DEFAULT_DCGM_IMAGE
    assert container["env"] == [
        {"name": "GPUFLEET_NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
    ]
    assert container["securityContext"] == {"capabilities": {"add": ["SYS_ADMIN", "SYSLOG"]}}
    assert container["resources"] == {
        "requests": {"cpu": "2", "memory": "4Gi"},
        "limits": {"memory": "4Gi", "nvidia.com/gpu": str(gke_ref.pool.gpu.count)},
    }
    assert job["activeDeadlineSeconds"] == 1800


def test_the_shared_script_is_not_rendered_on_its_own():
    """``_gpu_health_script.j2`` holds a macro and settings only: rendering it gives nothing."""
    from gpufleet.manifests.templates import _render_text

    assert _render_text("_gpu_health_script.j2").strip() == ""
