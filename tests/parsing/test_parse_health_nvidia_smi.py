"""nvidia-smi -q -d ROW_REMAPPER,ECC,PAGE_RETIREMENT: remapped rows, pending/failure flags, ECC
counters, retired pages, and what of it is not in the output (``not_run``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.errors import ParseError
from gpufleet.parsing import GpuMemoryHealth, parse_nvidia_smi_remap_ecc
from gpufleet.parsing.health.not_run import NotRun

DATA = Path(__file__).resolve().parents[1] / "data" / "parsing" / "health"
CLEAN = {"sram_correctable": 0, "sram_uncorrectable": 0, "dram_correctable": 0}


def load(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


def test_a100_remap_pending_and_a_clean_gpu():
    report = parse_nvidia_smi_remap_ecc(load("nvidia_smi_a100_remap_pending.txt"))
    assert report.problems == ()
    pending, clean = report.gpus
    assert pending == GpuMemoryHealth(
        "00000000:10:1C.0",
        remapped_correctable=1,
        remapped_uncorrectable=0,
        remap_pending=True,
        remap_failure=False,
        bank_histogram={"max": 639, "high": 1, "partial": 0, "low": 0, "none": 0},
        ecc_volatile={**CLEAN, "dram_correctable": 177, "dram_uncorrectable": 0},
        ecc_aggregate={**CLEAN, "dram_correctable": 177, "dram_uncorrectable": 0},
    )
    assert (clean.pci_bus, clean.remap_pending, clean.remap_failure) == (
        "00000000:10:1D.0",
        False,
        False,
    )
    assert clean.bank_histogram["max"] == 640
    assert clean.ecc_volatile == {**CLEAN, "dram_uncorrectable": 0}


def test_v100_single_and_double_bit_layout():
    report = parse_nvidia_smi_remap_ecc(
        load("nvidia_smi_v100_single_double_bit.txt"), sections=("ROW_REMAPPER", "ECC")
    )
    assert report.not_run == ()  # "Remapped Rows : N/A" is there: no row remapper, not missing
    (gpu,) = report.gpus
    assert gpu.remap_pending is None and gpu.remapped_correctable is None  # no row remapper
    assert gpu.bank_histogram == {}
    assert gpu.ecc_volatile["single_bit_total"] == 2
    assert gpu.ecc_volatile["single_bit_texture_memory"] is None  # N/A
    assert gpu.ecc_aggregate["single_bit_device_memory"] == 14
    assert gpu.ecc_aggregate["double_bit_total"] == 1
    assert len(gpu.ecc_volatile) == len(gpu.ecc_aggregate) == 16


def test_impossible_values_are_refused():
    text = """GPU 00000000:3B:00.0
    ECC Errors
        Volatile
            DRAM Correctable              : -3
            DRAM Uncorrectable            : 1.5
            SRAM Correctable              : 0
    Remapped Rows
        Correctable Error                 : lots
        Uncorrectable Error               : 2
        Pending                           : Maybe
        Remapping Failure Occurred        : No
"""
    report = parse_nvidia_smi_remap_ecc(text)
    (gpu,) = report.gpus
    assert gpu.ecc_volatile == {"sram_correctable": 0}
    assert (gpu.remapped_correctable, gpu.remapped_uncorrectable) == (None, 2)
    assert (gpu.remap_pending, gpu.remap_failure) == (None, False)
    assert report.problems == (
        "GPU 00000000:3B:00.0: ecc errors / volatile / dram correctable '-3' is not a "
        "non-negative integer",
        "GPU 00000000:3B:00.0: ecc errors / volatile / dram uncorrectable '1.5' is not a "
        "non-negative integer",
        "GPU 00000000:3B:00.0: remapped rows / correctable error 'lots' is not a "
        "non-negative integer",
        "GPU 00000000:3B:00.0: remapped rows / pending 'Maybe' is not Yes or No",
    )


@pytest.mark.parametrize("text", ["", "GPU 0: NVIDIA A100 (UUID: x)\n", "Attached GPUs : 8\n"])
def test_no_gpu_raises(text):
    with pytest.raises(ParseError, match="no GPU found"):
        parse_nvidia_smi_remap_ecc(text)


HEAD = "Attached GPUs                             : {n}\n"
ECC = """    ECC Errors
        Volatile
            SRAM Correctable              : 0
            SRAM Uncorrectable            : 0
            DRAM Correctable              : 0
            DRAM Uncorrectable            : {dram}
        Aggregate
            SRAM Correctable              : 0
            SRAM Uncorrectable            : 0
            DRAM Correctable              : 0
            DRAM Uncorrectable            : 0
"""
RETIRED_NA = """    Retired Pages
        Single Bit ECC                    : N/A
        Double Bit ECC                    : N/A
        Pending Page Blacklist            : N/A
"""
REMAP = """    Remapped Rows
        Correctable Error                 : 0
        Uncorrectable Error               : 0
        Pending                           : No
        Remapping Failure Occurred        : No
"""


def gpu(bus: str, *parts: str) -> str:
    return f"GPU {bus}\n" + "".join(parts)


def test_a_whole_output_has_nothing_missing():
    text = HEAD.format(n=2) + gpu("00000000:3B:00.0", ECC.format(dram=0), RETIRED_NA, REMAP)
    text += gpu("00000000:5D:00.0", ECC.format(dram=2), RETIRED_NA, REMAP)
    report = parse_nvidia_smi_remap_ecc(text)
    assert report.not_run == () and report.problems == ()
    assert [g.ecc_volatile["dram_uncorrectable"] for g in report.gpus] == [0, 2]


def test_an_output_cut_before_its_ecc_section_is_not_run():
    """The issue's case: the output ends before ECC Errors; it must not read healthy."""
    text = HEAD.format(n=1) + gpu("00000000:3B:00.0", "    Product Name : NVIDIA A100\n")
    report = parse_nvidia_smi_remap_ecc(text)
    assert report.not_run == (
        NotRun("ECC Errors of GPU 00000000:3B:00.0", "not in the output"),
        NotRun("Remapped Rows of GPU 00000000:3B:00.0", "not in the output"),
        NotRun("Retired Pages of GPU 00000000:3B:00.0", "not in the output"),
    )
    assert str(report.not_run[0]) == "ECC Errors of GPU 00000000:3B:00.0: not in the output"


def test_fewer_gpu_blocks_than_attached_is_a_cut_output():
    text = HEAD.format(n=8) + gpu("00000000:3B:00.0", ECC.format(dram=0), RETIRED_NA, REMAP)
    report = parse_nvidia_smi_remap_ecc(text)
    assert report.not_run == (
        NotRun("nvidia-smi -q", "cut off: 'Attached GPUs : 8' but 1 GPU block(s) in the output"),
    )


@pytest.mark.parametrize(
    ("cut_after", "what", "why"),
    [
        ("Uncorrectable Error", "Remapped Rows", "cut off: no 'pending' line"),
        ("Pending                           : No", "Remapped Rows", "no 'remapping failure"),
        ("Volatile", "ECC Errors", "cut off: no Volatile counters"),
        (
            "Aggregate\n            SRAM Correctable              : 0",
            "ECC Errors",
            "Aggregate ends",
        ),
    ],
)
def test_a_block_that_stops_mid_section_is_not_run(cut_after, what, why):
    whole = HEAD.format(n=1) + gpu("00000000:3B:00.0", ECC.format(dram=0), RETIRED_NA, REMAP)
    text = whole[: whole.index(cut_after) + len(cut_after)] + "\n"
    report = parse_nvidia_smi_remap_ecc(text)
    found = [n for n in report.not_run if n.what == f"{what} of GPU 00000000:3B:00.0"]
    assert found and why in found[0].why, report.not_run


def test_the_sections_asked_decide_what_is_missing():
    text = HEAD.format(n=1) + gpu("00000000:3B:00.0", ECC.format(dram=0))
    assert parse_nvidia_smi_remap_ecc(text, sections=("ECC",)).not_run == ()
    (missing,) = parse_nvidia_smi_remap_ecc(text, sections=("ECC", "ROW_REMAPPER")).not_run
    assert missing.what == "Remapped Rows of GPU 00000000:3B:00.0"
    with pytest.raises(ValueError, match="unknown nvidia-smi -d section"):
        parse_nvidia_smi_remap_ecc(text, sections=("ECC", "TEMPERATURE"))


def test_retired_pages_are_expected_only_without_a_row_remapper():
    """Ampere and later remap rows (their Retired Pages are N/A); a V100 retires pages and
    prints ``Remapped Rows : N/A``: there a missing Retired Pages is missing."""
    ampere = HEAD.format(n=1) + gpu("00000000:3B:00.0", ECC.format(dram=0), REMAP)
    assert parse_nvidia_smi_remap_ecc(ampere).not_run == ()
    volta = HEAD.format(n=1) + gpu(
        "00000000:3B:00.0", ECC.format(dram=0), "    Remapped Rows                         : N/A\n"
    )
    (missing,) = parse_nvidia_smi_remap_ecc(volta).not_run
    assert missing == NotRun("Retired Pages of GPU 00000000:3B:00.0", "not in the output")


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        (
            "    Retired Pages\n        Single Bit ECC : 2\n        Double Bit ECC : 1\n"
            "        Pending Page Blacklist : Yes\n",
            (2, 1, True),
        ),
        (  # older drivers: "Pending"
            "    Retired Pages\n        Single Bit ECC : 0\n        Double Bit ECC : 0\n"
            "        Pending : No\n",
            (0, 0, False),
        ),
        (  # older -d PAGE_RETIREMENT: blocks with a retired count each
            "    Retired Pages\n        Multiple Single Bit Retirement\n"
            "            Retired Count : 3\n        Double Bit Retirement\n"
            "            Retired Count : 4\n        Pending : Yes\n",
            (3, 4, True),
        ),
        (
            "    Retired Pages\n        Multiple Single Bit Retirement : N/A\n"
            "        Double Bit ECC : N/A\n        Pending Page Blacklist : N/A\n",
            (None, None, None),
        ),
    ],
)
def test_page_retirement_in_each_spelling(block, expected):
    text = HEAD.format(n=1) + gpu("00000000:3B:00.0", block)
    report = parse_nvidia_smi_remap_ecc(text, sections=("PAGE_RETIREMENT",))
    (read,) = report.gpus
    assert (read.retired_pages_sbe, read.retired_pages_dbe, read.retirement_pending) == expected
    assert report.not_run == () and report.problems == ()


def test_retired_pages_without_its_pending_line_is_cut_off():
    text = HEAD.format(n=1) + gpu(
        "00000000:3B:00.0", "    Retired Pages\n        Single Bit ECC : 2\n"
    )
    (missing,) = parse_nvidia_smi_remap_ecc(text, sections=("PAGE_RETIREMENT",)).not_run
    assert missing.what == "Retired Pages of GPU 00000000:3B:00.0" and "cut off" in missing.why


def test_a_yes_no_among_ecc_counters_is_a_flag_not_a_problem():
    text = HEAD.format(n=1) + gpu(
        "00000000:3B:00.0",
        ECC.format(dram=0).rstrip("\n") + "\n            SRAM Threshold Exceeded       : Yes\n",
    )
    report = parse_nvidia_smi_remap_ecc(text, sections=("ECC",))
    assert report.problems == ()
    assert report.gpus[0].ecc_flags == {"sram_threshold_exceeded": True}


@pytest.mark.parametrize(
    ("line", "what"),
    [
        ("No devices were found", "nvidia-smi -q"),
        (
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make "
            "sure that the latest NVIDIA driver is installed and running.",
            "nvidia-smi -q",
        ),
        ("Failed to initialize NVML: Driver/library version mismatch", "nvidia-smi -q"),
        # a container without the driver's NVML library (NVIDIA/nvidia-docker#1163): was a
        # ParseError, read now as the tool not running
        (
            "NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. Please make sure "
            "that the NVIDIA Display Driver is properly installed and present in your system.",
            "nvidia-smi -q",
        ),
        (
            "Unable to determine the device handle for GPU 0000:03:00.0: GPU is lost.  Reboot "
            "the system to recover this GPU",
            "nvidia-smi -q of GPU 0000:03:00.0",
        ),
        (
            "Unable to determine the device handle for GPU 0000:0B:00.0: Unknown Error",
            "nvidia-smi -q of GPU 0000:0B:00.0",
        ),
        (
            "Unable to determine the device handle for GPU0000:07:00.0: Unknown Error",
            "nvidia-smi -q of GPU 0000:07:00.0",
        ),
    ],
)
def test_nvml_and_driver_failures_are_not_run(line, what):
    report = parse_nvidia_smi_remap_ecc(line + "\n")
    assert report.gpus == ()
    assert report.not_run == (NotRun(what, line),)


def test_a_gpu_whose_handle_failed_beside_readable_ones():
    text = (
        HEAD.format(n=2)
        + "Unable to determine the device handle for GPU 0000:5D:00.0: Unknown Error\n"
        + gpu("00000000:3B:00.0", ECC.format(dram=0), RETIRED_NA, REMAP)
    )
    report = parse_nvidia_smi_remap_ecc(text)
    assert [g.pci_bus for g in report.gpus] == ["00000000:3B:00.0"]
    assert [n.what for n in report.not_run] == [
        "nvidia-smi -q of GPU 0000:5D:00.0",
        "nvidia-smi -q",
    ]
