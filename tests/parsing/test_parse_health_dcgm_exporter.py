"""dcgm-exporter's /metrics text: per GPU, the health fields it serves (the last Xid, row remaps,
volatile ECC, NVLink, clock events), DCGM's blanks not read, impossible values refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.errors import ParseError
from gpufleet.parsing.health import ExporterLink, parse_dcgm_exporter
from gpufleet.parsing.health.dcgm_exporter import HW_THERMAL_SLOWDOWN, SW_THERMAL_SLOWDOWN
from gpufleet.parsing.health.prometheus import read_samples

DATA = Path(__file__).resolve().parents[1] / "data" / "parsing" / "health"
UUID0 = "GPU-3f1c9a2e-7b4d-4e8a-9c21-5d6e7f8a9b01"
LABELS = 'gpu="0",UUID="GPU-aaaa-0001",pci_bus_id="00000000:18:00.0",Hostname="n1"'
LABELS1 = 'gpu="1",UUID="GPU-aaaa-0002",pci_bus_id="00000000:2A:00.0",Hostname="n1"'


def load(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


def metrics(*lines: str) -> str:
    return "\n".join(lines) + "\n"


def test_the_gpu_operators_default_counters_on_a_busy_h100_node():
    report = parse_dcgm_exporter(load("dcgm_exporter_h100_gpu_operator.txt"))
    assert report.problems == ()
    assert report.hostname == "gke-train-h100-pool-7f3a9c1e-x2lk"
    assert report.signals == {"xid", "row_remap_failure", "remapped_rows"}
    first, second = report.gpus
    assert (first.index, first.uuid, first.pci_bus, first.model) == (
        0, UUID0, "00000000:18:00.0", "NVIDIA H100 80GB HBM3")  # fmt: skip
    assert (first.last_xid, second.last_xid) == (0, 13)
    assert (first.remap_failure, first.remap_pending) == (False, None)
    assert second.remapped_rows == {"uncorrectable": 0, "correctable": 2}
    assert first.dbe_volatile == {} and first.links == () and first.clock_event_reasons is None


def test_an_old_exporter_with_spaced_labels_and_dcgms_blank_values():
    report = parse_dcgm_exporter(load("dcgm_exporter_v100_old_blank.txt"))
    assert report.problems == ()
    assert [g.index for g in report.gpus] == [0, 1, 2, 3]
    assert [g.last_xid for g in report.gpus] == [0, 0, 48, 0]
    assert all(g.pci_bus is None for g in report.gpus)  # before the pci_bus_id label
    # a V100 has no row remapper: DCGM's blank (INT64_BLANK + 2) is "not served", not a 1
    assert all(g.remap_failure is None for g in report.gpus)
    assert report.signals == {"xid"}


def test_every_health_field_and_its_aliases():
    text = metrics(
        f'DCGM_FI_DEV_XID_ERROR{{{LABELS},err_code="79"}} 79',
        f'DCGM_EXP_XID_ERRORS_COUNT{{{LABELS},window_size_in_ms="300000",xid="48"}} 2',
        f'DCGM_EXP_XID_ERRORS_COUNT{{{LABELS1},window_size_in_ms="300000"}} 0',
        f"DCGM_FI_DEV_ROW_REMAP_PENDING{{{LABELS}}} 1",
        f"DCGM_FI_DEV_ROW_REMAP_FAILURE{{{LABELS}}} 0",
        f"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS{{{LABELS}}} 1",
        f"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{{LABELS}}} 3",
        f"DCGM_FI_DEV_ECC_DBE_VOL_DEV{{{LABELS}}} 1",
        f"DCGM_FI_DEV_ECC_DBE_VOL_SRM{{{LABELS}}} 2",
        f"DCGM_FI_DEV_ECC_DBE_VOL_L2{{{LABELS}}} 0",
        f"DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL{{{LABELS}}} 4",
        f"DCGM_FI_DEV_NVLINK_ERROR_DL_REPLAY{{{LABELS}}} 7",
        f"DCGM_FI_DEV_NVLINK_ERROR_DL_CRC{{{LABELS}}} 1",
        f"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{{{LABELS1}}} {HW_THERMAL_SLOWDOWN | 0x4}",
        f'DCGM_EXP_CLOCK_EVENTS_COUNT{{{LABELS1},clock_event="sw_thermal"}} 3',
        'DCGM_FI_DEV_NVLINK_GET_STATE{nvlink="3",gpu="1",gpu_uuid="GPU-aaaa-0002",'
        'pci_bus_id="00000000:2A:00.0",hostname="n1"} 0',
        'DCGM_FI_DEV_NVLINK_LINK_STATUS{nvlink="4",gpu="1",gpu_uuid="GPU-aaaa-0002"} 1',
        'DCGM_FI_DEV_NVLINK_GET_STATE{nvlink="0",nvswitch="nvswitch2",hostname="n1"} 0',
    )
    report = parse_dcgm_exporter(text)
    assert report.problems == ()
    gpu0, gpu1 = report.gpus
    assert (gpu0.last_xid, gpu0.xid_counts) == (79, {48: 2})
    assert (gpu0.remap_pending, gpu0.remap_failure) == (True, False)
    assert gpu0.dbe_volatile == {"total": 3, "dram": 1, "sram": 2, "l2": 0}
    assert gpu0.nvlink_errors == {"replay": 7, "crc": 1}  # the two replay counters: the higher
    assert gpu1.last_xid is None and gpu1.xid_counts == {}
    assert gpu1.clock_event_reasons == HW_THERMAL_SLOWDOWN | 0x4
    assert gpu1.clock_event_counts == {"sw_thermal": 3}
    assert gpu1.thermal_slowdown == ("hw_thermal", "sw_thermal")
    assert gpu1.links == (ExporterLink(3, 0), ExporterLink(4, 1))  # the switch's link skipped
    assert gpu1.links[0].down and not gpu1.links[1].down
    assert report.signals == {
        "xid", "row_remap_pending", "row_remap_failure", "remapped_rows", "ecc_dbe_volatile",
        "nvlink_errors", "thermal", "nvlink_state"}  # fmt: skip


@pytest.mark.parametrize(
    "blank",
    [
        "2147483632",  # DCGM_INT32_BLANK
        "2147483634",  # DCGM_INT32_NOT_SUPPORTED
        "9223372036854775792",  # DCGM_INT64_BLANK
        "9223372036854775794",  # DCGM_INT64_NOT_SUPPORTED, as the exporter's README shows it
        "140737488355328.000000",  # DCGM_FP64_BLANK, as the exporter prints a double
        "140737488355330",  # DCGM_FP64_NOT_SUPPORTED
    ],
)
def test_dcgms_blank_values_are_not_served_not_counted(blank):
    report = parse_dcgm_exporter(metrics(f"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{{LABELS}}} {blank}"))
    assert report.problems == () and report.signals == frozenset()
    assert report.gpus[0].dbe_volatile == {}


def test_power_capping_is_no_thermal_slowdown():
    report = parse_dcgm_exporter(metrics(f"DCGM_FI_DEV_CLOCKS_EVENT_REASONS{{{LABELS}}} 4"))
    assert report.gpus[0].thermal_slowdown == ()
    sw = parse_dcgm_exporter(
        metrics(f"DCGM_FI_DEV_CLOCKS_EVENT_REASONS{{{LABELS}}} {SW_THERMAL_SLOWDOWN}")
    )
    assert sw.gpus[0].thermal_slowdown == ("sw_thermal",)


def test_mig_instances_repeat_a_gpus_fields_and_keep_the_worst():
    mig = 'gpu="2",UUID="GPU-b3f2a1c9",device="nvidia2",GPU_I_PROFILE="1g.6gb"'
    report = parse_dcgm_exporter(
        metrics(
            f'DCGM_FI_DEV_ROW_REMAP_PENDING{{{mig},GPU_I_ID="3"}} 1',
            f'DCGM_FI_DEV_ROW_REMAP_PENDING{{{mig},GPU_I_ID="4"}} 0',
            f'DCGM_FI_DEV_XID_ERRORS{{{mig},GPU_I_ID="3"}} 0',
            f'DCGM_FI_DEV_XID_ERRORS{{{mig},GPU_I_ID="4"}} 31',
            f'DCGM_FI_DEV_XID_ERRORS{{{mig},GPU_I_ID="5"}} 0',
            f'DCGM_FI_DEV_ECC_DBE_VOL_DEV{{{mig},GPU_I_ID="3"}} 2',
            f'DCGM_FI_DEV_ECC_DBE_VOL_DEV{{{mig},GPU_I_ID="4"}} 0',
        )
    )
    assert report.problems == ()
    (gpu,) = report.gpus
    assert (gpu.index, gpu.remap_pending, gpu.last_xid) == (2, True, 31)
    assert gpu.dbe_volatile == {"dram": 2}


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        (f"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS{{{LABELS}}} -3", "-3 is negative"),
        (f"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{{LABELS}}} 1.5", "not a whole number"),
        (f"DCGM_FI_DEV_ECC_DBE_VOL_DEV{{{LABELS}}} NaN", "is not a number"),
        (f"DCGM_FI_DEV_NVLINK_ERROR_DL_CRC{{{LABELS}}} +Inf", "is not a number"),
        (f"DCGM_FI_DEV_XID_ERRORS{{{LABELS}}} 1000", "Xid 1000 is not in 1..999"),
        (f"DCGM_FI_DEV_XID_ERRORS{{{LABELS}}} -79", "is negative"),
        (f'DCGM_EXP_XID_ERRORS_COUNT{{{LABELS},xid="4000"}} 1', "not an Xid in 1..999"),
        (f"DCGM_EXP_XID_ERRORS_COUNT{{{LABELS}}} 2", "not an Xid"),
        (f'DCGM_EXP_CLOCK_EVENTS_COUNT{{{LABELS},clock_event="HW THERMAL"}} 1', "no event name"),
        (f"DCGM_FI_DEV_ROW_REMAP_PENDING{{{LABELS}}} 2", "neither 0 nor 1"),
        (f"DCGM_FI_DEV_ROW_REMAP_FAILURE{{{LABELS}}} -1", "neither 0 nor 1"),
        (f'DCGM_FI_DEV_NVLINK_GET_STATE{{nvlink="1",{LABELS}}} 7', "not 0, 1 or 2"),
        (f'DCGM_FI_DEV_NVLINK_GET_STATE{{nvlink="x",{LABELS}}} 1', "no nvlink label"),
        (f"DCGM_FI_DEV_NVLINK_GET_STATE{{{LABELS}}} 1", "no nvlink label"),
        (f"DCGM_FI_DEV_CLOCKS_EVENT_REASONS{{{LABELS}}} -64", "is negative"),
        ('DCGM_FI_DEV_XID_ERRORS{UUID="GPU-aaaa-0001"} 79', "no gpu label"),
        ('DCGM_FI_DEV_XID_ERRORS{gpu="nvidia0"} 79', "no gpu label"),
        ('DCGM_FI_DEV_XID_ERRORS{gpu="4096"} 79', "no gpu label"),
        ('DCGM_FI_DEV_XID_ERRORS{gpu="\u0663"} 79', "no gpu label"),  # an Arabic-Indic 3
        ('DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="0xdeadbeef"} 79', "is not a GPU's"),
        ('DCGM_FI_DEV_XID_ERRORS{gpu="0",pci_bus_id="bus zero"} 79', "is not a PCI bus id"),
        ('DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-aaaa-0001" 79', "not a Prometheus sample"),
        ('DCGM_FI_DEV_XID_ERRORS{gpu="0"} seventy-nine', "not a Prometheus sample"),
    ],
)
def test_impossible_values_and_unknown_label_shapes_are_refused(line, problem):
    report = parse_dcgm_exporter(metrics(f"DCGM_FI_DEV_GPU_TEMP{{{LABELS}}} 60", line))
    assert len(report.problems) == 1 and problem in report.problems[0], report.problems
    assert "line 2" in report.problems[0]
    for gpu in report.gpus:  # nothing of the refused line was kept
        assert (gpu.last_xid, gpu.remap_pending, gpu.remap_failure) == (None, None, None)
        assert not (gpu.xid_counts or gpu.remapped_rows or gpu.dbe_volatile or gpu.links)
        assert not (gpu.nvlink_errors or gpu.clock_event_counts or gpu.clock_event_reasons)


def test_one_gpu_index_named_by_two_uuids_is_refused():
    report = parse_dcgm_exporter(
        metrics(
            'DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-aaaa-0001"} 0',
            'DCGM_FI_DEV_ROW_REMAP_FAILURE{gpu="0",UUID="GPU-bbbb-0002"} 1',
        )
    )
    assert report.gpus[0].remap_failure is None
    assert report.problems == (
        "line 2: DCGM_FI_DEV_ROW_REMAP_FAILURE: GPU 0 is GPU-aaaa-0001 and GPU-bbbb-0002",
    )


def test_two_different_last_xids_of_one_gpu_are_a_problem():
    report = parse_dcgm_exporter(
        metrics(
            f'DCGM_FI_DEV_XID_ERRORS{{{LABELS},GPU_I_ID="1"}} 79',
            f'DCGM_FI_DEV_XID_ERRORS{{{LABELS},GPU_I_ID="2"}} 13',
        )
    )
    assert report.gpus[0].last_xid == 79
    assert report.problems == ("line 2: DCGM_FI_DEV_XID_ERRORS: GPU 0 reads Xid 79 and 13",)


@pytest.mark.parametrize(
    "text",
    ["", "<html><body>404 page not found</body></html>", "node_load1 0.5\nup 1\n"],
)
def test_text_with_no_dcgm_metric_is_no_exporters(text):
    with pytest.raises(ParseError, match="no DCGM_ metric"):
        parse_dcgm_exporter(text)


def test_an_exporter_serving_no_health_field_has_gpus_with_nothing_read():
    report = parse_dcgm_exporter(metrics(f"DCGM_FI_DEV_GPU_TEMP{{{LABELS}}} 60"))
    assert report.gpus == () and report.signals == frozenset() and report.problems == ()


def test_prometheus_text_escapes_and_timestamps():
    (sample,) = read_samples('m{a="x\\"y\\\\z\\n",b="1,2}"} 1e+03 1700000000000\n')
    assert sample.labels == {"a": 'x"y\\z\n', "b": "1,2}"}
    assert (sample.value, sample.line) == (1000.0, 1)
    assert list(read_samples('m{a="1",a="2"} 1\n# HELP m x\n\n')) == [1]  # a repeated label


@pytest.mark.parametrize(
    "labels",
    [
        'gpu="0\\n",UUID="GPU-aaaa-0001"',
        'gpu="0",UUID="GPU-aaaa-0001\\n"',
        'gpu="0",UUID="GPU-aaaa-0001",pci_bus_id="00000000:3B:00.0\\n"',
    ],
)
def test_a_label_value_with_an_escaped_newline_is_refused(labels):
    """Prometheus's text format escapes a newline in a label value as ``\\n``, which the reader
    turns back into one: ``$`` would let ``"GPU-aaaa-0001\\n"`` pass as a UUID."""
    report = parse_dcgm_exporter(metrics(f"DCGM_FI_DEV_XID_ERRORS{{{labels}}} 79"))
    assert report.problems, report
    assert all(gpu.last_xid is None for gpu in report.gpus)


@given(st.lists(st.text(max_size=12), min_size=1, max_size=4))
def test_any_label_value_written_escaped_reads_back_as_written(values):
    """Each label value, escaped as Prometheus writes it (``\\\\``, ``\\"``, ``\\n``), reads
    back as it was: the reader's unescaping is the writer's inverse."""

    def escaped(v: str) -> str:
        return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    labels = ",".join(f'l{i}="{escaped(v)}"' for i, v in enumerate(values))
    (sample,) = read_samples(f"m{{{labels}}} 1\n")
    assert sample.labels == {f"l{i}": v for i, v in enumerate(values)}
