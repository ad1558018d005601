"""nvidia-smi nvlink -e / --errorcounters: NVLink error counters per GPU and link."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.errors import ParseError
from gpufleet.parsing import NvlinkGpuErrors, NvlinkLinkErrors, parse_nvlink_errors

DATA = Path(__file__).resolve().parents[1] / "data" / "parsing" / "health"
ZERO = {"replay": 0, "recovery": 0, "crc": 0}


def load(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


def test_h100_current_layout():
    report = parse_nvlink_errors(load("nvlink_h100_replay_crc.txt"))
    assert report.problems == ()
    clean, noisy = report.gpus
    assert clean == NvlinkGpuErrors(
        0,
        "NVIDIA H100 80GB HBM3",
        "GPU-00000000-1111-4000-8000-000000000000",
        tuple(NvlinkLinkErrors(n, dict(ZERO)) for n in range(18)),
    )
    assert (noisy.index, noisy.uuid) == (1, "GPU-00000000-1111-4000-8000-000000000001")
    assert [link.link for link in noisy.links] == list(range(18))
    assert noisy.links[5] == NvlinkLinkErrors(5, {"replay": 37, "recovery": 1, "crc": 12})
    assert all(link.counters == ZERO for link in noisy.links if link.link != 5)


def test_older_error_counter_layout_with_inactive_link():
    report = parse_nvlink_errors(load("nvlink_v100_error_counters_old.txt"))
    assert report.problems == ()
    (gpu,) = report.gpus
    assert (gpu.index, gpu.name) == (0, "Tesla V100-SXM2-32GB")
    assert len(gpu.links) == 6
    assert gpu.links[0].counters == {"replay": 0, "recovery": 0, "crc_data": 0, "crc_flit": 0}
    assert gpu.links[2].counters == {"replay": 3, "recovery": 0, "crc_data": None, "crc_flit": 9}
    assert gpu.links[5] == NvlinkLinkErrors(5, {}, inactive=True)


def test_impossible_counts_are_refused():
    text = """GPU 3: NVIDIA A100-SXM4-80GB (UUID: GPU-00000000-3333-4000-8000-000000000000)
\t Link 0: Replay Errors: -4
\t Link 0: Recovery Errors: 2.5
\t Link 0: CRC Errors: 7
\t Link 1: Replay Errors: lots
\t Link 2: N/A
\t Link 3: Some Future Counter: 11
"""
    report = parse_nvlink_errors(text)
    (gpu,) = report.gpus
    assert gpu.links == (
        NvlinkLinkErrors(0, {"crc": 7}),
        NvlinkLinkErrors(1, {}),
        NvlinkLinkErrors(2, {}, not_supported=True),
        NvlinkLinkErrors(3, {"some_future_counter": 11}),
    )
    assert report.problems == (
        "GPU 3: link 0: Replay Errors '-4' is not a non-negative integer",
        "GPU 3: link 0: Recovery Errors '2.5' is not a non-negative integer",
        "GPU 3: link 1: Replay Errors 'lots' is not a non-negative integer",
    )


@pytest.mark.parametrize(
    "text",
    ["", "No devices were found\n", "\t Link 0: Replay Errors: 0\n", "NVIDIA-SMI has failed\n"],
)
def test_no_gpu_header_is_a_parse_error(text):
    with pytest.raises(ParseError, match="no GPU found"):
        parse_nvlink_errors(text)
