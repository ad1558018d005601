"""The simulated fleet speaks DCGM's failure dialects (issue 31 item 3): each ``dcgm-*`` fault
makes the node's ``dcgmi diag`` answer as DCGM does when a check could not run (an internal
error under passing GPUs, every test skipped, ``Fail - All`` in DCGM 3.x's table, "resource in
use", a cut-off document, a level that hangs past its timeout), every tool's output is followed
by its exit status as the health manifest prints it, and a healthy node still prints healthy
output. Through the real report parser and decision, the nightly reads each as the check that
could not run it is (``Fail - All``: the whole node fails)."""

from __future__ import annotations

import json
import re

import pytest

from gpufleet.backends.faults import fault_injection
from gpufleet.backends.sim.faults import PoolFaults
from gpufleet.backends.sim.gpu_health import (
    IN_USE_TEXT,
    dcgm_diag_dialect,
    gpu_health_outputs,
    health_check_output,
)
from gpufleet.backends.sim.programs import program_of
from gpufleet.backends.sim.state import SimState
from gpufleet.config.catalog import load_catalog
from gpufleet.domain.faults import (
    DCGM_FAULT_KINDS,
    GPU_FAULT_KINDS,
    IN_USE_HOLD_S,
    PARAM_PATTERN,
    ActiveFault,
    Fault,
    FaultError,
    parse_fault,
)
from gpufleet.domain.health import decide_health
from gpufleet.manifests.gpu_health import render_gpu_health
from gpufleet.parsing.health import parse_dcgm_diag, parse_nvidia_smi_remap_ecc
from gpufleet.parsing.health.report import parse_node_health, section_line

CLUSTER, POOL = "a3u-sim", "h200-a"
NODE = f"{CLUSTER}-{POOL}-1"
OTHER = f"{CLUSTER}-{POOL}-2"
EXIT = re.compile(r"^gpufleet-health-exit=(\d+)$", re.M)


def outputs(kind: str | None, level: int = 2, diag_format: str = "json", gpus: int = 8):
    faults = [parse_fault(f"{kind}:{NODE}")] if kind else []
    return gpu_health_outputs(
        NODE, faults, gpu_model="H200", gpus=gpus, diag_level=level, diag_format=diag_format
    )


def check(kind: str | None, level: int = 2, **kwargs) -> str:
    faults = [parse_fault(f"{kind}:{NODE}")] if kind else []
    return health_check_output(NODE, faults, gpu_model="H200", gpus=8, diag_level=level, **kwargs)


def section(text: str, name: str) -> str:
    after = text.split(section_line(name) + "\n", 1)[1]
    return after.split("\n==> gpufleet-health:", 1)[0]


# --- the grammar -------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", DCGM_FAULT_KINDS)
def test_the_dcgm_faults_read_write_back_and_pass_the_param_pattern(kind):
    fault = parse_fault(f"{kind}:{NODE}")
    assert fault == Fault(kind, node=NODE)
    assert parse_fault(fault.text) == fault
    assert re.match(PARAM_PATTERN, f"{CLUSTER}/{POOL}={kind}:{NODE}")
    assert kind not in GPU_FAULT_KINDS  # not hardware: no other tool shows them
    with pytest.raises(FaultError, match="needs a node name"):
        parse_fault(f"{kind}:Not_A_Node")
    assert not re.match(PARAM_PATTERN, f"{CLUSTER}/{POOL}={kind}")


# --- each dialect ------------------------------------------------------------------------------


@pytest.mark.parametrize("level", [1, 2, 3, 4])
def test_a_healthy_node_prints_healthy_json_and_every_tool_exits_0(level):
    text = check(None, level)
    assert EXIT.findall(text) == ["0"] * 5
    assert f"node={NODE} level={level} timeout=" in text
    diag = parse_dcgm_diag(section(text, "dcgmi-diag").split("\ngpufleet-health-exit=")[0])
    assert diag.tests and {t.status for t in diag.tests} == {"pass"}
    assert decide_health(**parse_node_health(text).signals()).verdict == "pass"


def test_the_node_line_says_the_level_and_its_timeout():
    assert check(None, 2).startswith(section_line("node") + f"\nnode={NODE} level=2 timeout=900\n")
    assert f"node={NODE} level=3 timeout=77\n" in check(None, 3, diag_timeout_s=77)


def test_the_exit_line_stands_on_its_own_line_after_each_tool():
    """As the manifest's ``printf '\\ngpufleet-health-exit=%s\\n' "$?"`` prints it: a blank
    line, then the status, even after an output cut off mid-line."""
    cut = section(check("dcgm-truncated"), "dcgmi-diag")
    body, _, status = cut.rpartition("\n")[0].rpartition("\n")
    assert status == "gpufleet-health-exit=0" and not body.endswith("\n")  # cut mid-line
    assert section(check(None), "dcgmi-diag").endswith("}\n\ngpufleet-health-exit=0\n")


def test_internal_error_fails_the_test_while_every_gpu_passes_in_json():
    out = outputs("dcgm-internal-error")
    document = json.loads(out.dcgm_diag)
    tests = {
        t["name"]: t for c in document["DCGM Diagnostic"]["test_categories"] for t in c["tests"]
    }
    pcie = tests["pcie"]
    assert pcie["test_summary"]["status"] == "Fail"
    (warning,) = pcie["test_summary"]["warnings"]
    assert warning["error_id"] == 44  # DCGM_FR_INTERNAL
    assert warning["warning"].startswith("There was an internal error during the test: '")
    assert {r["status"] for r in pcie["results"]} == {"Pass"}  # no GPU named
    assert out.dcgm_exit == 226
    assert "pcie" not in json.dumps(outputs("dcgm-internal-error", level=1).dcgm_diag)


def test_internal_error_in_dcgm_4_text_is_pcie_fail_over_gpu_pass_rows():
    diag = outputs("dcgm-internal-error", diag_format="text").dcgm_diag
    lines = diag.splitlines()
    at = lines.index(
        "| pcie                      | Fail                                           |"
    )
    assert lines[at + 1].startswith("| Warning                   | There was an internal error")
    rows = [line for line in lines[at + 1 :] if "GPU" in line and ": " in line]
    assert rows == [f"|                           | GPU{i}: Pass{' ' * 36} |" for i in range(8)]
    assert all(len(line) == 78 for line in lines[1:])  # the table's width


def test_skip_all_skips_every_test_and_every_gpu():
    document = json.loads(outputs("dcgm-skip-all", level=3).dcgm_diag)
    tests = [t for c in document["DCGM Diagnostic"]["test_categories"] for t in c["tests"]]
    assert len(tests) == 7
    assert {t["test_summary"]["status"] for t in tests} == {"Skip"}
    assert {r["status"] for t in tests for r in t["results"]} == {"Skip"}
    diag = parse_dcgm_diag(outputs("dcgm-skip-all", level=3).dcgm_diag)
    assert {t.status for t in diag.tests} == {"skip"}


@pytest.mark.parametrize(("level", "test"), [(1, "CUDA Main Library"), (2, "PCIe"), (4, "PCIe")])
def test_fail_all_prints_dcgm_3s_table_with_a_test_failing_on_all(level, test):
    out = outputs("dcgm-fail-all", level=level)
    assert out.dcgm_diag.startswith("Successfully ran diagnostic for group.\n")
    assert "| DCGM Version              | 3.3.0 " in out.dcgm_diag
    assert f"| {test:<25} | Fail - All{' ' * 36} |" in out.dcgm_diag
    assert "| Warning                   | GPU 0 Error using CUDA API cudaDeviceGetByPCI  |" in (
        out.dcgm_diag
    )
    assert out.dcgm_diag.count("Fail - All") == 1
    assert out.dcgm_exit == 226
    diag = parse_dcgm_diag(out.dcgm_diag)
    assert any(t.status == "fail" for t in diag.tests)


def test_in_use_prints_dcgms_runtime_error_and_no_result():
    out = outputs("dcgm-in-use")
    document = json.loads(out.dcgm_diag)
    assert set(document) == {"DCGM Diagnostic"}
    error = document["DCGM Diagnostic"]["runtime_error"]
    assert error.startswith("Error: Unable to complete diagnostic for entities *,cpu:*. ")
    assert f"Return: (-34) : {IN_USE_TEXT}" in error
    assert "test_categories" not in document["DCGM Diagnostic"]
    assert out.dcgm_exit == 222  # DCGM_ST_IN_USE (-34)


def test_truncated_cuts_the_json_and_nvidia_smi_mid_document():
    out, whole = outputs("dcgm-truncated"), outputs(None)
    assert whole.dcgm_diag.startswith(out.dcgm_diag) and len(out.dcgm_diag) < len(whole.dcgm_diag)
    with pytest.raises(json.JSONDecodeError):
        json.loads(out.dcgm_diag)
    assert whole.nvidia_smi.startswith(out.nvidia_smi)
    assert out.nvidia_smi.count("Remapped Rows") == 7  # the last GPU's is cut off
    assert out.nvidia_smi.count("Retired Pages") == 8
    memory = parse_nvidia_smi_remap_ecc(whole.nvidia_smi)
    assert len(memory.gpus) == 8


def test_hang_prints_nothing_and_timeout_ends_it_with_124():
    text = check("dcgm-hang", 3)
    assert section(text, "dcgmi-diag") == "\ngpufleet-health-exit=124\n"
    assert EXIT.findall(text) == ["0", "0", "0", "0", "124"]
    assert f"node={NODE} level=3 timeout=2700" in text


@pytest.mark.parametrize("model", ["B200", "GB200"])
def test_a_b200_hangs_from_level_2_as_dcgm_4_2_3_does_unless_capped(model):
    """NVIDIA/DCGM#247: the level the catalog's cap keeps the nightly from asking."""
    for level, status in ((1, 0), (2, 124), (3, 124)):
        out = gpu_health_outputs(NODE, [], gpu_model=model, gpus=8, diag_level=level)
        assert out.dcgm_exit == status
        assert (out.dcgm_diag == "") is (status == 124)
    assert gpu_health_outputs(NODE, [], gpu_model="H100", gpus=8, diag_level=4).dcgm_exit == 0


def test_the_first_dialect_in_force_wins_and_hardware_faults_still_show():
    faults = [parse_fault(f"{k}:{NODE}") for k in ("dcgm-fail-all", "dcgm-hang")]
    assert dcgm_diag_dialect(faults) == "dcgm-hang"
    out = gpu_health_outputs(
        NODE, [*faults, parse_fault(f"xid:{NODE}:79")], gpu_model="H200", gpus=8, diag_level=2
    )
    assert out.dcgm_diag == "" and ": 79, " in out.kernel_log
    other = gpu_health_outputs(OTHER, faults, gpu_model="H200", gpus=8, diag_level=2)
    assert other.dcgm_exit == 0 and json.loads(other.dcgm_diag)  # another node's faults


@pytest.mark.parametrize(
    ("kind", "verdict"),
    [
        ("dcgm-internal-error", "could_not_run"),
        ("dcgm-skip-all", "could_not_run"),
        ("dcgm-in-use", "could_not_run"),
        ("dcgm-truncated", "could_not_run"),
        ("dcgm-hang", "could_not_run"),
        ("dcgm-fail-all", "fail"),
    ],
)
def test_the_nightly_reads_each_dialect_as_what_it_is(kind, verdict):
    """The whole path the nightly takes: the pod's output, the report parser, the decision."""
    for level in (1, 2):
        report = parse_node_health(check(kind, level))
        assert decide_health(**report.signals()).verdict == verdict, (kind, level)


# --- in the fleet: injection, the IN_USE hold, the manifest's timeout ---------------------------


def test_in_use_clears_after_its_hold_on_the_sim_clock_and_a_standing_one_stays():
    injected = ActiveFault(CLUSTER, POOL, parse_fault(f"dcgm-in-use:{NODE}"), "cli", since=1000.0)
    faults = PoolFaults.of([injected], POOL)
    assert faults.gpu_faults_of(NODE, at=1000.0 + IN_USE_HOLD_S - 1) == (injected.fault,)
    assert faults.gpu_faults_of(NODE, at=1000.0 + IN_USE_HOLD_S) == ()
    assert faults.gpu_faults_of(NODE) == (injected.fault,)  # no time given: as injected
    standing = ActiveFault(CLUSTER, POOL, parse_fault(f"dcgm-in-use:{NODE}"), "catalog")
    assert PoolFaults.of([standing], POOL).gpu_faults_of(NODE, at=1e12) == (standing.fault,)
    hang = ActiveFault(CLUSTER, POOL, parse_fault(f"dcgm-hang:{NODE}"), "cli", since=1000.0)
    assert PoolFaults.of([hang], POOL).gpu_faults_of(NODE, at=1e12) == (hang.fault,)


def test_an_injected_dcgm_fault_reaches_the_nodes_check(fleet_state):
    fault_injection(load_catalog().cluster(CLUSTER)).inject(POOL, f"dcgm-hang:{NODE}")
    faults = PoolFaults.of(SimState().faults(cluster=CLUSTER), POOL)
    assert faults.gpu_faults_of(NODE) == (Fault("dcgm-hang", node=NODE),)
    assert faults.gpu_faults_of(OTHER) == ()
    assert faults.degraded_nodes == frozenset()  # not a slow node


def test_the_sim_reads_the_timeout_the_manifest_runs_dcgmi_diag_under():
    ref = load_catalog().pool(CLUSTER, POOL)
    manifest = render_gpu_health(ref, {NODE: 2}, "run-1")
    template = manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert program_of(template) == {"kind": "gpu-health", "level": 2, "timeout_s": 900}
