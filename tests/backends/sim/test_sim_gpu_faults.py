"""The simulated fleet's GPU faults (issue 20 item 4): the grammar reads them, the sim writes each
node's health tools' output in the real shapes, and that output, through the real parsers,
leads the domain to the action NVIDIA recommends for the fault (a healthy node stays healthy).
``thermal-throttle`` is also a slow node, whose pairs lose bandwidth as a bad node's do; a
repair moves the machine to a healthy host, leaving its GPU faults behind."""

from __future__ import annotations

import re

import pytest

from gpufleet.backends import cloud_backend, cluster_backend
from gpufleet.backends.faults import fault_injection
from gpufleet.backends.sim.faults import PoolFaults
from gpufleet.backends.sim.gpu_health import DOWN_LINK, faulty_gpu, gpu_health_outputs
from gpufleet.backends.sim.state import SimState
from gpufleet.config.catalog import load_catalog
from gpufleet.domain.faults import (
    GPU_FAULT_KINDS,
    PARAM_PATTERN,
    ActiveFault,
    Fault,
    FaultError,
    parse_fault,
)
from gpufleet.domain.health import HealthAction, decide_health
from gpufleet.parsing.health import (
    parse_dcgm_diag,
    parse_nvidia_smi_remap_ecc,
    parse_nvlink_errors,
    parse_xid_lines,
)

A = HealthAction
CLUSTER, POOL = "a3u-sim", "h200-a"
NODE = f"{CLUSTER}-{POOL}-1"
OTHER = f"{CLUSTER}-{POOL}-2"
LEVELS = (1, 2, 3, 4)


# --- the grammar -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,expected",
    [
        ("xid:n1:79", Fault("xid", node="n1", xid=79)),
        ("xid:n1:999", Fault("xid", node="n1", xid=999)),
        ("row-remap-pending:n1", Fault("row-remap-pending", node="n1")),
        ("row-remap-failed:n1", Fault("row-remap-failed", node="n1")),
        ("ecc-dbe:n1", Fault("ecc-dbe", node="n1")),
        ("nvlink-down:n1", Fault("nvlink-down", node="n1")),
        (" thermal-throttle:a3u-sim-h200-a-1 ", Fault("thermal-throttle", node=NODE)),
    ],
)
def test_the_gpu_faults_read_and_write_back(text, expected):
    fault = parse_fault(text)
    assert fault == expected
    assert parse_fault(fault.text) == fault
    assert re.match(PARAM_PATTERN, f"{CLUSTER}/{POOL}={fault.text}")


@pytest.mark.parametrize(
    "text,match",
    [
        ("xid", "xid needs a node name: xid:<node>:<CODE>"),
        ("xid:n1", "xid needs a code from 1 to 999"),
        ("xid:n1:0", "xid needs a code from 1 to 999"),
        ("xid:n1:1000", "xid needs a code from 1 to 999"),
        ("xid:n1:-79", "xid needs a code"),
        ("xid:n1:7.9", "xid needs a code"),
        ("xid:Node_1:79", "xid needs a node name"),
        ("xid::79", "xid needs a node name"),
        ("ecc-dbe", "ecc-dbe needs a node name: ecc-dbe:<node>"),
        ("ecc-dbe:", "empty argument"),
        ("nvlink-down:Node_1", "nvlink-down needs a node name"),
        ("row-remap-pending:n1:x", "row-remap-pending needs a node name"),
        ("thermal-throttle", "thermal-throttle needs a node name"),
    ],
)
def test_bad_gpu_faults_are_refused_in_one_line(text, match):
    with pytest.raises(FaultError, match=re.escape(match)) as err:
        parse_fault(text)
    assert "\n" not in str(err.value) and repr(text.strip()) in str(err.value)


def test_the_param_pattern_refuses_what_the_grammar_cannot_read():
    pattern = re.compile(PARAM_PATTERN)
    for text in ("xid:n1", "xid:n1:1000", "xid:n1:-1", "ecc-dbe", "nvlink-down:N1", "gpu-hot:n1"):
        assert not pattern.match(f"{CLUSTER}/{POOL}={text}"), text


# --- what the tools print, read back ------------------------------------------------------------


def decision_for(faults: list[str], level: int, node: str = NODE):
    """The domain's decision on ``node``'s rendered outputs, each read by its real parser."""
    out = gpu_health_outputs(
        node, [parse_fault(f) for f in faults], gpu_model="H200", gpus=8, diag_level=level
    )
    signals = {
        "xid": parse_xid_lines(out.kernel_log),
        "memory": parse_nvidia_smi_remap_ecc(out.nvidia_smi),
        "nvlink": parse_nvlink_errors(out.nvlink),
        "diag": parse_dcgm_diag(out.dcgm_diag),
    }
    for name, parsed in signals.items():
        assert not parsed.problems, (name, parsed.problems)  # every line reads
    assert len(signals["memory"].gpus) == len(signals["nvlink"].gpus) == 8
    assert {t.status for t in signals["diag"].tests} <= {"pass", "warn", "fail"}
    return decide_health(**signals, diag_level=level, throttling=out.throttling)


GPU = f"GPU {faulty_gpu(NODE, 8)}"

# fault -> (the action NVIDIA's guidance gives, what its reason says)
EXPECTED = {
    f"xid:{NODE}:79": (A.REBOOT, "Xid 79 (GPU has fallen off the bus): NVIDIA says reboot"),
    f"xid:{NODE}:95": (A.RESET_GPU, "Xid 95 (Uncontained memory error): NVIDIA says reset"),
    f"xid:{NODE}:119": (A.RESET_GPU, "Xid 119 (GSP RPC Timeout)"),
    f"xid:{NODE}:154": (A.REBOOT, "Xid 154 (GPU Recovery Action Changed)"),
    f"xid:{NODE}:61": (A.NEEDS_HUMAN, "Xid 61"),
    f"xid:{NODE}:45": (A.NEEDS_HUMAN, "RESTART_FM"),
    f"xid:{NODE}:500": (A.NEEDS_HUMAN, "Xid 500 is not in gpufleet's Xid catalog"),
    f"row-remap-pending:{NODE}": (A.RESET_GPU, "row remapping pending after uncorrectable ECC"),
    f"row-remap-failed:{NODE}": (A.REPAIR, "row remapping failure occurred"),
    f"ecc-dbe:{NODE}": (A.REPAIR, "uncorrectable ECC errors (sram_uncorrectable 1)"),
    f"nvlink-down:{NODE}": (A.REPAIR, f"NVLink {DOWN_LINK} is down"),
    f"thermal-throttle:{NODE}": (A.REPAIR, "throttle for heat"),
}


def test_every_gpu_fault_kind_is_exercised():
    assert {parse_fault(f).kind for f in EXPECTED} == set(GPU_FAULT_KINDS)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("fault", sorted(EXPECTED))
def test_each_faults_output_parses_back_to_nvidias_action(fault, level):
    action, says = EXPECTED[fault]
    decision = decision_for([fault], level)
    assert decision.action is action, decision.reason
    assert says in decision.reason
    if not fault.startswith("thermal-throttle"):  # the node's GPUs, not one of them
        assert decision.reason.startswith(f"{GPU}:") or decision.reason.startswith(f"{GPU} (")


@pytest.mark.parametrize("code,action", [(13, A.HEALTHY), (31, A.HEALTHY), (63, A.HEALTHY)])
def test_an_application_xid_leaves_the_node_healthy_with_a_note(code, action):
    decision = decision_for([f"xid:{NODE}:{code}"], 1)
    assert decision.action is action
    assert len(decision.notes) == 1 and f"Xid {code}" in decision.notes[0]


@pytest.mark.parametrize("level", LEVELS)
def test_a_healthy_node_prints_healthy_outputs(level):
    decision = decision_for([], level)
    assert (decision.action, decision.findings) == (A.HEALTHY, ())
    # another node's fault is not this node's
    assert decision_for([f"ecc-dbe:{OTHER}", f"xid:{OTHER}:79"], level).findings == ()


def test_the_diag_runs_the_tests_of_its_level():
    names = {
        level: [
            t.name
            for t in parse_dcgm_diag(
                gpu_health_outputs(NODE, [], gpu_model="H200", gpus=2, diag_level=level).dcgm_diag
            ).tests
        ]
        for level in LEVELS
    }
    assert names[1] == ["software"]
    assert set(names[1]) < set(names[2]) < set(names[3]) < set(names[4])
    with pytest.raises(ValueError, match="level 1, 2, 3 or 4"):
        gpu_health_outputs(NODE, [], gpu_model="H200", gpus=2, diag_level=5)


def test_the_faults_show_in_each_tool_on_the_same_gpu():
    faults = [parse_fault(f"{kind}:{NODE}") for kind in ("row-remap-failed", "nvlink-down")]
    out = gpu_health_outputs(NODE, faults, gpu_model="H200", gpus=8, diag_level=1)
    index = faulty_gpu(NODE, 8)
    smi = parse_nvidia_smi_remap_ecc(out.nvidia_smi).gpus
    assert [g.remap_failure for g in smi] == [i == index for i in range(8)]
    assert smi[index].ecc_volatile["dram_uncorrectable"] == 1
    links = parse_nvlink_errors(out.nvlink).gpus
    assert [[lk.link for lk in g.links if lk.inactive] for g in links] == [
        [DOWN_LINK] if i == index else [] for i in range(8)
    ]
    xids = parse_xid_lines(out.kernel_log).events
    assert sorted(e.code for e in xids) == [48, 64, 74]
    # the kernel's bus is nvidia-smi's: the Xid names the same GPU index
    assert {e.pci_bus for e in xids} == {smi[index].pci_bus.lower()[4:14]}
    diag = parse_dcgm_diag(out.dcgm_diag)
    assert diag.failing_gpus == (index,)
    assert diag.failures[0][1].error_codes == (80,)  # DCGM_FR_ROW_REMAP_FAILURE


def test_every_gpu_has_its_own_bus_beyond_eight():
    out = gpu_health_outputs(NODE, [], gpu_model="B200", gpus=16, diag_level=1)
    buses = [g.pci_bus for g in parse_nvidia_smi_remap_ecc(out.nvidia_smi).gpus]
    assert len(set(buses)) == 16


# --- in the fleet: injection, a slow node, repair ------------------------------------------------


@pytest.fixture
def a3u(fleet_state):
    return load_catalog().cluster(CLUSTER)


def pool_faults() -> PoolFaults:
    return PoolFaults.of(SimState().faults(cluster=CLUSTER), POOL)


def test_an_injected_gpu_fault_reaches_the_nodes_outputs(a3u):
    fault_injection(a3u).inject(POOL, f"xid:{NODE}:79")
    faults = pool_faults()
    assert faults.gpu_faults_of(NODE) == (Fault("xid", node=NODE, xid=79),)
    assert faults.gpu_faults_of(OTHER) == ()
    out = gpu_health_outputs(NODE, faults.gpu_faults_of(NODE), gpu_model="H200", gpus=8)
    assert decide_health(xid=parse_xid_lines(out.kernel_log)).action is A.REBOOT


def test_a_gpu_fault_must_name_a_node_of_the_pool(a3u):
    with pytest.raises(FaultError, match="has no node 'ghost'"):
        fault_injection(a3u).inject(POOL, "ecc-dbe:ghost")


def test_a_thermally_throttled_node_is_slow_as_a_bad_node_is():
    faults = PoolFaults.of(
        [ActiveFault(CLUSTER, POOL, parse_fault(f"thermal-throttle:{NODE}"), "cli")], POOL
    )
    assert faults.degraded_nodes == {NODE}  # its pairs get DEGRADED_BUSBW_FACTOR
    assert faults.nic_down_nodes == frozenset()  # still on RDMA: slow, not fallen back
    others = PoolFaults.of(
        [
            ActiveFault(CLUSTER, POOL, parse_fault(f"{k}:{NODE}"), "cli")
            for k in GPU_FAULT_KINDS[1:-1]
        ],
        POOL,
    )
    assert others.degraded_nodes == frozenset()  # the other GPU faults do not slow the fabric


def test_a_repair_leaves_the_gpu_faults_with_the_old_host(a3u):
    state = SimState()
    state.inject(CLUSTER, POOL, f"ecc-dbe:{NODE}")
    state.inject(CLUSTER, POOL, f"xid:{NODE}:79")
    state.inject(CLUSTER, POOL, f"nvlink-down:{NODE}", scope="sticky")  # not the host's
    state.inject(CLUSTER, POOL, f"thermal-throttle:{OTHER}")
    kube = cluster_backend(a3u)
    node = next(n for n in kube.list_nodes(POOL) if n.name == NODE)
    done = cloud_backend(a3u).repair_node(node)
    assert done.detail == {
        "cleared": [f"ecc-dbe:{NODE}", f"xid:{NODE}:79"],
        "kept": [f"nvlink-down:{NODE}"],
    }
    left = {(f.fault.text, f.scope) for f in state.faults(cluster=CLUSTER)}
    assert left == {(f"nvlink-down:{NODE}", "sticky"), (f"thermal-throttle:{OTHER}", "cli")}
