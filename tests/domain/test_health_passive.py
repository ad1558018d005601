"""Passive GPU health (issue 20): what a busy node's dcgm-exporter serves, decided by the nightly
check's rules (the same findings), the reason saying it was read passively. Inputs are the
exporter parser's results on exporter-shaped text."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.domain.health import XID_CATALOG, HealthAction, decide_health, decide_passive
from gpufleet.domain.health.passive import PASSIVE
from gpufleet.parsing.health import parse_dcgm_exporter, parse_xid_lines

A = HealthAction
DATA = Path(__file__).resolve().parents[1] / "data" / "parsing" / "health"
GPU0 = 'gpu="0",UUID="GPU-aaaa-0001",pci_bus_id="00000000:18:00.0",Hostname="n1"'
GPU1 = 'gpu="1",UUID="GPU-aaaa-0002",pci_bus_id="00000000:2A:00.0",Hostname="n1"'
# every health field served, all clean, on two GPUs
CLEAN = {
    "DCGM_FI_DEV_XID_ERRORS": 0,
    "DCGM_FI_DEV_ROW_REMAP_PENDING": 0,
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": 0,
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 0,
    "DCGM_FI_DEV_ECC_DBE_VOL_DEV": 0,
    "DCGM_FI_DEV_ECC_DBE_VOL_SRM": 0,
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": 0,
}


def exporter(gpu0: dict | None = None, *extra: str, drop: tuple[str, ...] = ()):
    """Two GPUs' clean fields, GPU 0's overridden by ``gpu0``, plus ``extra`` lines."""
    lines = []
    for labels, over in ((GPU0, gpu0 or {}), (GPU1, {})):
        for name, value in {**CLEAN, **over}.items():
            if name not in drop:
                lines.append(f"{name}{{{labels}}} {value}")
        for link in range(2):
            if "DCGM_FI_DEV_NVLINK_GET_STATE" not in drop:
                gpu = labels.split(",")[0]
                lines.append(f'DCGM_FI_DEV_NVLINK_GET_STATE{{nvlink="{link}",{gpu}}} 1')
    report = parse_dcgm_exporter("\n".join([*lines, *extra]) + "\n")
    assert report.problems == ()
    return report


def decide(gpu0: dict | None = None, *extra: str, **kw):
    decision = decide_passive(exporter(gpu0, *extra, **kw))
    assert decision is not None
    return decision


def test_a_clean_node_is_healthy_and_says_it_was_read_passively():
    decision = decide()
    assert decision.action is A.HEALTHY and decision.findings == ()
    assert decision.reason == f"{PASSIVE}: no GPU health signal calls for action"


@pytest.mark.parametrize(
    ("code", "action", "says"),
    [
        (79, A.REBOOT, "Xid 79 (GPU has fallen off the bus): NVIDIA says reboot the node"),
        (48, A.RESET_GPU, "Xid 48 (Double Bit ECC Error): NVIDIA says reset the GPU"),
        (61, A.NEEDS_HUMAN, "contact support"),
        (45, A.NEEDS_HUMAN, "restart Fabric Manager"),
        (154, A.NEEDS_HUMAN, "an action it does not name"),  # no driver text to read it from
        (13, A.HEALTHY, None),
        (500, A.NEEDS_HUMAN, "Xid 500 is not in gpufleet's Xid catalog"),
    ],
)
def test_the_last_xid_takes_the_action_of_nvidias_catalog(code, action, says):
    decision = decide({"DCGM_FI_DEV_XID_ERRORS": code})
    assert decision.action is action
    if says:
        assert decision.reason.startswith(f"{PASSIVE}: GPU 0 (PCI 00000000:18:00.0): ")
        assert says in decision.reason
    else:
        assert f"Xid {code}" in decision.notes[0]


def test_every_catalog_xid_decides_as_the_kernel_log_does():
    """One catalog, two readings: the exporter's last Xid and the kernel log's line."""
    for code in XID_CATALOG:
        line = f"[ 5107.644336] NVRM: Xid (PCI:0000:18:00): {code}, pid=1896, name=python3, x"
        kernel = decide_health(xid=parse_xid_lines(line + "\n"))
        passive = decide({"DCGM_FI_DEV_XID_ERRORS": code})
        assert passive.action is kernel.action, code


def test_xids_counted_in_the_window_count_too_and_xid_45_follows_them():
    count = 'DCGM_EXP_XID_ERRORS_COUNT{{{},xid="{}"}} 1'
    decision = decide({"DCGM_FI_DEV_XID_ERRORS": 45}, count.format(GPU0, 79))
    assert decision.action is A.REBOOT  # 45 beside another Xid: "follow other Xid"
    assert not any("Fabric Manager" in f.reason for f in decision.findings)
    assert decide(None, count.format(GPU1, 95)).action is A.RESET_GPU


def test_a_pending_row_remap_asks_for_a_gpu_reset():
    decision = decide({"DCGM_FI_DEV_ROW_REMAP_PENDING": 1})
    assert decision.action is A.RESET_GPU
    assert "row remapping pending: NVIDIA says reset the GPU to apply it" in decision.reason


def test_a_row_remap_failure_asks_for_repair():
    decision = decide({"DCGM_FI_DEV_ROW_REMAP_FAILURE": 1, "DCGM_FI_DEV_ROW_REMAP_PENDING": 1})
    assert decision.action is A.REPAIR and "RMA condition" in decision.reason


@pytest.mark.parametrize(
    ("fields", "action"),
    [
        ({"DCGM_FI_DEV_ECC_DBE_VOL_DEV": 1, "DCGM_FI_DEV_ROW_REMAP_PENDING": 1}, A.RESET_GPU),
        ({"DCGM_FI_DEV_ECC_DBE_VOL_DEV": 1}, A.REPAIR),  # no pending remap explains it
        ({"DCGM_FI_DEV_ECC_DBE_VOL_SRM": 1, "DCGM_FI_DEV_ROW_REMAP_PENDING": 1}, A.REPAIR),
        ({"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 2, "DCGM_FI_DEV_ROW_REMAP_PENDING": 1}, A.RESET_GPU),
        ({"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 2}, A.REPAIR),
    ],
)
def test_a_volatile_double_bit_error_as_the_nightly_reads_it(fields, action):
    decision = decide(fields)
    assert decision.action is action
    assert "uncorrectable ECC" in decision.reason


def test_an_on_chip_location_is_sram_no_remap_repairs():
    text = f"DCGM_FI_DEV_ECC_DBE_VOL_L2{{{GPU0}}} 1"
    decision = decide({"DCGM_FI_DEV_ROW_REMAP_PENDING": 1}, text)
    assert decision.action is A.REPAIR and "sram_uncorrectable 1" in decision.reason


def test_the_same_finding_as_nvidia_smi_for_the_same_memory_state():
    smi = (DATA / "nvidia_smi_a100_remap_pending.txt").read_text()
    from gpufleet.parsing.health import parse_nvidia_smi_remap_ecc

    nightly = decide_health(memory=parse_nvidia_smi_remap_ecc(smi))
    passive = decide({"DCGM_FI_DEV_ROW_REMAP_PENDING": 1})
    assert nightly.action is passive.action is A.RESET_GPU
    said = "row remapping pending: NVIDIA says reset the GPU to apply it"
    assert nightly.reason.endswith(said) and passive.reason.endswith(said)


def test_an_nvlink_down_asks_for_repair_and_error_totals_are_a_note():
    down = 'DCGM_FI_DEV_NVLINK_GET_STATE{nvlink="5",gpu="1",gpu_uuid="GPU-aaaa-0002"} 0'
    decision = decide(None, down)
    assert decision.action is A.REPAIR
    assert "GPU 1 (PCI 00000000:2A:00.0): NVLink 5 is down: repair the machine" in decision.reason
    noisy = decide(None, f"DCGM_FI_DEV_NVLINK_ERROR_DL_REPLAY{{{GPU1}}} 12")
    assert noisy.action is A.HEALTHY
    assert noisy.notes == ("GPU 1 (PCI 00000000:2A:00.0): NVLink error totals replay 12",)
    asleep = 'DCGM_FI_DEV_NVLINK_GET_STATE{nvlink="5",gpu="1",gpu_uuid="GPU-aaaa-0002"} 2'
    assert decide(None, asleep).action is A.HEALTHY


@pytest.mark.parametrize(("mask", "event"), [(0x40, "hw_thermal"), (0x20, "sw_thermal")])
def test_a_thermal_slowdown_asks_for_repair_of_the_cooling(mask, event):
    decision = decide({"DCGM_FI_DEV_CLOCKS_EVENT_REASONS": mask})
    assert decision.action is A.REPAIR
    assert f"GPU 0 ({event}) slowed for heat: repair the machine" in decision.reason
    assert "cooling" in decision.reason


def test_power_capping_and_idling_are_not_heat():
    assert decide({"DCGM_FI_DEV_CLOCKS_EVENT_REASONS": 0x4 | 0x1}).action is A.HEALTHY


def test_a_thermal_event_counted_in_the_window_counts():
    count = f'DCGM_EXP_CLOCK_EVENTS_COUNT{{{GPU1},clock_event="hw_thermal"}} 2'
    assert decide(None, count).action is A.REPAIR


def test_the_most_severe_finding_wins_across_gpus():
    down = 'DCGM_FI_DEV_NVLINK_GET_STATE{nvlink="1",gpu="1",gpu_uuid="GPU-aaaa-0002"} 0'
    decision = decide({"DCGM_FI_DEV_XID_ERRORS": 79, "DCGM_FI_DEV_ROW_REMAP_PENDING": 1}, down)
    assert [f.action for f in decision.findings] == [A.REPAIR, A.REBOOT, A.RESET_GPU]
    assert decision.action is A.REPAIR and decision.reason.startswith(PASSIVE)


def test_signals_the_exporter_does_not_serve_are_a_note():
    decision = decide(drop=("DCGM_FI_DEV_ROW_REMAP_PENDING", "DCGM_FI_DEV_NVLINK_GET_STATE"))
    assert decision.action is A.HEALTHY
    assert decision.notes == (
        "dcgm-exporter does not serve pending row remaps (DCGM_FI_DEV_ROW_REMAP_PENDING), "
        "NVLink state (DCGM_FI_DEV_NVLINK_GET_STATE)",
    )


def test_the_gpu_operators_default_counters_on_a_real_shaped_node():
    report = parse_dcgm_exporter((DATA / "dcgm_exporter_h100_gpu_operator.txt").read_text())
    decision = decide_passive(report)
    assert decision is not None and decision.action is A.HEALTHY
    assert any("Xid 13 (Graphics Engine Exception)" in n for n in decision.notes)
    assert any(
        n.startswith("dcgm-exporter does not serve pending row remaps") for n in decision.notes
    )


def test_an_old_exporters_last_xid_48_asks_for_a_reset():
    report = parse_dcgm_exporter((DATA / "dcgm_exporter_v100_old_blank.txt").read_text())
    decision = decide_passive(report)
    assert decision is not None and decision.action is A.RESET_GPU
    assert decision.reason.startswith(f"{PASSIVE}: GPU 2: Xid 48 (Double Bit ECC Error)")


def test_an_exporter_serving_no_health_field_decides_nothing():
    report = parse_dcgm_exporter(f"DCGM_FI_DEV_GPU_TEMP{{{GPU0}}} 61\n")
    assert decide_passive(report) is None
    blank = parse_dcgm_exporter(f"DCGM_FI_DEV_ROW_REMAP_FAILURE{{{GPU0}}} 9223372036854775794\n")
    assert decide_passive(blank) is None  # DCGM's blank: not served
