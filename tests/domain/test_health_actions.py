"""GPU health actions (issue 20): one node's signals, as the health parsers read them, to one
action with a reason naming the signal, the GPU and NVIDIA's recommended action; the most severe
finding wins. Inputs are the parsers' results on real-shaped text (tests/data/parsing/health)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.domain.health import XID_CATALOG, HealthAction, decide_health
from gpufleet.parsing.health import (
    parse_dcgm_diag,
    parse_nvidia_smi_remap_ecc,
    parse_nvlink_errors,
    parse_xid_lines,
)

A = HealthAction
DATA = Path(__file__).resolve().parents[1] / "data" / "parsing" / "health"
SMI = (DATA / "nvidia_smi_a100_remap_pending.txt").read_text()  # GPU 0 pending, GPU 1 clean
PENDING = "Pending                           : Yes"
NOT_PENDING = "Pending                           : No"
NO_FAILURE = "Remapping Failure Occurred        : No"
FAILURE = "Remapping Failure Occurred        : Yes"


def fixture(name: str) -> str:
    return (DATA / name).read_text()


def xid_log(*lines: str):
    """Kernel-log lines as the driver writes them, after the module's load line."""
    loaded = "[ 1520.112233] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.127.08"
    return parse_xid_lines("\n".join([loaded, *lines]) + "\n")


def xid(code: int, bus: str = "0000:10:1d", text: str = "an event") -> str:
    return f"[ 5107.644336] NVRM: Xid (PCI:{bus}): {code}, pid=1896, name=python3, {text}"


def smi(text: str = SMI):
    return parse_nvidia_smi_remap_ecc(text)


def clean_smi() -> str:
    """The fixture with GPU 0's remap no longer pending: both GPUs clean."""
    return SMI.replace(PENDING, NOT_PENDING)


def volatile_uncorrectable(text: str, kind: str, gpu: int = 0) -> str:
    """``text`` with 2 volatile ``kind`` (SRAM or DRAM) uncorrectable errors on GPU ``gpu``."""
    line = f"{kind} Uncorrectable            : 0"
    before, sep, after = text.partition(f"GPU 00000000:10:1{'CD'[gpu]}.0")
    return before + sep + after.replace(line, f"{kind} Uncorrectable            : 2", 1)


# --- NVIDIA's Xid catalog --------------------------------------------------------------------


def test_the_catalog_holds_the_codes_a_fleet_acts_on_with_nvidias_buckets():
    asked = {13, 31, 43, 45, 48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140, 154}
    assert asked <= set(XID_CATALOG)
    buckets = {code: entry.bucket for code, entry in XID_CATALOG.items()}
    # spot checks against https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html
    assert buckets[79] == "RESTART_BM"
    assert buckets[48] == "WORKFLOW_XID_48"
    assert buckets[74] == "WORKFLOW_NVLINK_ERR"
    assert buckets[63] == "IGNORE"
    assert buckets[64] == buckets[95] == buckets[119] == buckets[140] == "RESET_GPU"
    assert buckets[13] == buckets[31] == buckets[94] == "RESTART_APP"
    assert XID_CATALOG[79].meaning == "GPU has fallen off the bus"


@pytest.mark.parametrize(
    "code,action,says",
    [
        (79, A.REBOOT, "RESTART_BM"),
        (46, A.RESET_GPU, "reset the GPU"),
        (48, A.RESET_GPU, "WORKFLOW_XID_48"),
        (62, A.RESET_GPU, "reset the GPU"),
        (64, A.RESET_GPU, "reset the GPU"),
        (74, A.RESET_GPU, "WORKFLOW_NVLINK_ERR"),
        (95, A.RESET_GPU, "reset the GPU"),
        (119, A.RESET_GPU, "reset the GPU"),
        (120, A.RESET_GPU, "reset the GPU"),
        (140, A.RESET_GPU, "reset the GPU"),
        (61, A.NEEDS_HUMAN, "CONTACT_SUPPORT"),
        (13, A.HEALTHY, "restart the application"),
        (31, A.HEALTHY, "restart the application"),
        (94, A.HEALTHY, "restart the application"),
        (43, A.HEALTHY, "nothing to do"),
        (63, A.HEALTHY, "nothing to do"),
        (92, A.HEALTHY, "nothing to do"),
    ],
)
def test_each_xid_takes_the_action_of_nvidias_bucket(code, action, says):
    decision = decide_health(xid=xid_log(xid(code)), memory=smi(clean_smi()))
    assert decision.action is action
    finding = decision.findings[0]
    meaning = XID_CATALOG[code].meaning
    # the GPU index comes from nvidia-smi's order: 0000:10:1d is its second GPU
    assert f"GPU 1 (PCI 0000:10:1d): Xid {code} ({meaning})" in finding.reason
    assert says in finding.reason
    if action is A.HEALTHY:
        assert decision.notes == (finding.reason,)


def test_an_xid_without_nvidia_smi_names_the_gpu_by_its_bus():
    decision = decide_health(xid=xid_log(xid(79, bus="0000:3b:00")))
    assert decision.reason.startswith("the GPU at PCI 0000:3b:00: Xid 79 (GPU has fallen off")


def test_an_xid_not_in_the_catalog_asks_a_person():
    decision = decide_health(xid=xid_log(xid(200)))
    assert decision.action is A.NEEDS_HUMAN
    assert "Xid 200 is not in gpufleet's Xid catalog" in decision.reason


def test_xid_45_alone_asks_for_fabric_manager_and_beside_another_follows_it():
    alone = decide_health(xid=xid_log(xid(45)))
    assert alone.action is A.NEEDS_HUMAN
    assert "RESTART_FM" in alone.reason
    with_dbe = decide_health(xid=xid_log(xid(48), xid(45)))
    assert with_dbe.action is A.RESET_GPU
    assert [f.reason for f in with_dbe.findings if "Xid 45" in f.reason] == []
    # another GPU's Xid 48 does not make this GPU's Xid 45 any less alone
    apart = decide_health(xid=xid_log(xid(48, bus="0000:10:1c"), xid(45, bus="0000:10:1d")))
    assert apart.action is A.NEEDS_HUMAN


@pytest.mark.parametrize(
    "recovery,action",
    [
        ("0x2 (Node Reboot Required)", A.REBOOT),
        ("0x1 (GPU Reset Required)", A.RESET_GPU),
        ("0x3 (Drain and Reset)", A.RESET_GPU),
        ("0x4 (Drain P2P)", A.NEEDS_HUMAN),
        ("0x0 (None)", A.HEALTHY),
        ("0x7 (Something New)", A.NEEDS_HUMAN),
    ],
)
def test_xid_154_takes_the_recovery_action_it_names(recovery, action):
    text = f"GPU recovery action changed from 0x0 (None) to {recovery}"
    decision = decide_health(xid=xid_log(xid(154, text=text)))
    assert decision.action is action
    assert recovery.split("(")[1].rstrip(")") in decision.findings[0].reason


def test_repeated_events_are_one_finding():
    decision = decide_health(xid=xid_log(xid(79), xid(79), xid(79)))
    assert len(decision.findings) == 1 and "(and" not in decision.reason


# --- row remapping and ECC (nvidia-smi -q -d ROW_REMAPPER,ECC) --------------------------------


def test_a_pending_row_remap_asks_for_a_gpu_reset():
    decision = decide_health(memory=smi())
    assert decision.action is A.RESET_GPU
    assert decision.reason.startswith("GPU 0 (PCI 00000000:10:1C.0): row remapping pending")
    assert "reset the GPU" in decision.reason


def test_a_row_remap_failure_asks_for_repair():
    decision = decide_health(memory=smi(SMI.replace(NO_FAILURE, FAILURE, 1)))
    assert decision.action is A.REPAIR
    assert "GPU 0" in decision.reason and "row remapping failure" in decision.reason
    assert "RMA" in decision.reason


def test_a_dram_double_bit_error_with_a_pending_remap_is_explained_by_it():
    decision = decide_health(memory=smi(volatile_uncorrectable(SMI, "DRAM")))
    assert decision.action is A.RESET_GPU
    assert "after uncorrectable ECC errors (dram_uncorrectable 2)" in decision.reason


def test_a_double_bit_error_no_pending_remap_explains_asks_for_repair():
    dram = decide_health(memory=smi(volatile_uncorrectable(clean_smi(), "DRAM", gpu=1)))
    assert dram.action is A.REPAIR
    assert dram.reason.startswith("GPU 1 (PCI 00000000:10:1D.0): uncorrectable ECC errors")
    # SRAM is not what the row remapper repairs: a pending remap does not explain it
    sram = decide_health(memory=smi(volatile_uncorrectable(SMI, "SRAM")))
    assert sram.action is A.REPAIR
    assert "sram_uncorrectable 2" in sram.reason


def test_only_this_boots_errors_count_not_the_aggregate():
    aggregate_only = clean_smi().replace(
        "        Aggregate\n            SRAM Correctable              : 0\n"
        "            SRAM Uncorrectable            : 0",
        "        Aggregate\n            SRAM Correctable              : 0\n"
        "            SRAM Uncorrectable            : 5",
        1,
    )
    assert smi(aggregate_only).gpus[0].ecc_aggregate["sram_uncorrectable"] == 5
    assert decide_health(memory=smi(aggregate_only)).action is A.HEALTHY


def test_the_old_double_bit_layout_counts_too():
    v100 = fixture("nvidia_smi_v100_single_double_bit.txt")  # `nvidia-smi -q -d ECC`
    # issue 31: read as the check's three sections, the ones it lacks did not run
    assert decide_health(memory=smi(v100)).action is A.COULD_NOT_RUN

    def ecc(text: str):
        return parse_nvidia_smi_remap_ecc(text, sections=("ECC",))

    assert decide_health(memory=ecc(v100)).action is A.HEALTHY  # aggregate 1, volatile 0
    dbe = v100.replace("Total                     : 0", "Total                     : 1", 1)
    decision = decide_health(memory=ecc(dbe))
    assert decision.action is A.REPAIR and "double_bit_total 1" in decision.reason


# --- NVLink (nvidia-smi nvlink -e) -------------------------------------------------------------


def test_an_nvlink_down_asks_for_repair():
    decision = decide_health(
        nvlink=parse_nvlink_errors(fixture("nvlink_v100_error_counters_old.txt"))
    )
    assert decision.action is A.REPAIR
    assert decision.reason.startswith("GPU 0: NVLink 5 is down")
    # the counters of link 2 are a note, not an action
    assert decision.notes == ("GPU 0: NVLink 2 counted replay 3, crc_flit 9",)


def test_nvlink_error_counters_alone_are_a_note():
    decision = decide_health(nvlink=parse_nvlink_errors(fixture("nvlink_h100_replay_crc.txt")))
    assert decision.action is A.HEALTHY
    assert decision.notes == ("GPU 1: NVLink 5 counted replay 37, recovery 1, crc 12",)


# --- dcgmi diag --------------------------------------------------------------------------------


def test_a_failed_diag_test_asks_for_repair_naming_level_and_test():
    diag = parse_dcgm_diag(fixture("dcgm_diag_v3_pcie_replay_fail.json"))
    decision = decide_health(diag=diag, diag_level=2)
    assert decision.action is A.REPAIR
    assert decision.reason.startswith("GPU 0: dcgmi diag -r 2 test 'PCIe' failed: Detected more")
    assert "field diagnostic" in decision.reason


def test_a_configuration_failure_asks_a_person_not_for_new_hardware():
    # DCGM_FR_PERSISTENCE_MODE (29): DCGM's next step is a command, not a service
    diag = parse_dcgm_diag(fixture("dcgm_diag_v4_entities.json"))
    decision = decide_health(diag=diag, diag_level=3)
    assert decision.action is A.NEEDS_HUMAN
    assert decision.reason.startswith("GPU 1: dcgmi diag -r 3 test 'software' failed: Persistence")


def test_dcgms_pending_row_remap_failure_is_a_reset():
    text = fixture("dcgm_diag_v4_entities.json").replace('"error_id" : 29', '"error_id" : 85')
    decision = decide_health(diag=parse_dcgm_diag(text), diag_level=1)
    assert decision.action is A.RESET_GPU


def test_a_diag_warning_is_healthy_with_a_note():
    diag = parse_dcgm_diag(fixture("dcgm_diag_v4_text_per_gpu.txt"))
    decision = decide_health(diag=diag)
    assert decision.action is A.HEALTHY
    assert decision.notes == ("GPU 1: dcgmi diag test 'memory' warned",)


# --- thermal throttling ------------------------------------------------------------------------


def test_thermal_throttling_asks_for_repair_of_the_machines_cooling():
    decision = decide_health(memory=smi(clean_smi()), throttling=True)
    assert decision.action is A.REPAIR
    assert "throttle for heat" in decision.reason and "cooling" in decision.reason
    assert decide_health(memory=smi(clean_smi())).action is A.HEALTHY


# --- the most severe action wins ---------------------------------------------------------------


def test_the_order_of_severity():
    assert list(HealthAction) == [
        A.HEALTHY,
        A.COULD_NOT_RUN,  # outranks only healthy: a real failure wins over it
        A.RESET_GPU,
        A.REBOOT,
        A.NEEDS_HUMAN,
        A.REPAIR,
    ]


@pytest.mark.parametrize(
    "signals,action",
    [
        # reset (pending remap) and reboot (Xid 79): the reboot resets every GPU
        ({"memory": "pending", "xid": [79]}, A.REBOOT),
        # reboot and a person (Xid 61): the person first
        ({"xid": [79, 61]}, A.NEEDS_HUMAN),
        # a person and repair (throttling): the machine goes to other hardware
        ({"xid": [61], "throttling": True}, A.REPAIR),
        # a note never outweighs an action
        ({"memory": "pending", "xid": [13]}, A.RESET_GPU),
    ],
)
def test_the_most_severe_finding_wins(signals, action):
    lines = [xid(code, bus=f"0000:10:{0x1C + i:02x}") for i, code in enumerate(signals["xid"])]
    decision = decide_health(
        xid=xid_log(*lines),
        memory=smi() if signals.get("memory") == "pending" else None,
        throttling=signals.get("throttling", False),
    )
    assert decision.action is action
    assert decision.findings[0].action is action
    ranks = [list(HealthAction).index(f.action) for f in decision.findings]
    assert ranks == sorted(ranks, reverse=True)


def test_the_reason_counts_the_other_findings_of_the_same_action():
    decision = decide_health(xid=xid_log(xid(95, bus="0000:10:1c"), xid(119, bus="0000:10:1d")))
    assert decision.action is A.RESET_GPU
    assert decision.reason.endswith("(and 1 more)")


def test_no_signal_is_no_proof_of_health():
    decision = decide_health()  # issue 31: nothing read is a check that could not run
    assert decision.action is A.COULD_NOT_RUN and decision.verdict == "could_not_run"
    assert decision.reason == "no GPU health signal was read for this node"


def test_a_clean_node_is_healthy_without_notes():
    decision = decide_health(
        xid=xid_log(),
        memory=smi(clean_smi()),
        nvlink=parse_nvlink_errors(
            fixture("nvlink_h100_replay_crc.txt")
            .replace("Replay Errors: 37", "Replay Errors: 0")
            .replace("Recovery Errors: 1", "Recovery Errors: 0")
            .replace("CRC Errors: 12", "CRC Errors: 0")
        ),
        diag=parse_dcgm_diag(fixture("dcgm_diag_v4_text_per_gpu.txt").replace("Warn", "Pass")),
    )
    assert (decision.action, decision.findings) == (A.HEALTHY, ())
    assert decision.reason == "no GPU health signal calls for action"
