"""nvidia-smi -q -d ROW_REMAPPER,ECC: remapped rows, pending/failure flags, ECC counters."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.errors import ParseError
from gpufleet.parsing import GpuMemoryHealth, parse_nvidia_smi_remap_ecc

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
    (gpu,) = parse_nvidia_smi_remap_ecc(load("nvidia_smi_v100_single_double_bit.txt")).gpus
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


@pytest.mark.parametrize("text", ["", "No devices were found\n", "GPU 0: NVIDIA A100 (UUID: x)\n"])
def test_no_gpu_raises(text):
    with pytest.raises(ParseError, match="no GPU found"):
        parse_nvidia_smi_remap_ecc(text)
