"""nvidia-smi nvlink -e / -s and dcgmi nvlink -s / -e / -e -j: NVLink error counters, link
states and NVML's / DCGM's messages, per GPU and link."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufleet.errors import ParseError
from gpufleet.parsing import NvlinkGpuErrors, NvlinkLinkErrors, parse_nvlink_errors
from gpufleet.parsing.health.dcgm_nvlink import parse_dcgmi_nvlink
from gpufleet.parsing.health.not_run import NotRun

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
    assert gpu.links[5] == NvlinkLinkErrors(5, {}, inactive=True, state="down")


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


@pytest.mark.parametrize("text", ["", "\n\n", "some other tool's output\n"])
def test_no_gpu_header_is_a_parse_error(text):
    with pytest.raises(ParseError, match="no GPU found"):
        parse_nvlink_errors(text)


def test_a_link_line_before_any_gpu_is_refused():
    text = "\t Link 0: Replay Errors: 0\nGPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-1)\n"
    report = parse_nvlink_errors(text)
    assert report.problems == ("line 1: unknown line 'Link 0: Replay Errors: 0'",)
    assert report.gpus[0].links == ()


def test_status_reads_each_link_up_with_its_speed_or_down():
    """nvidia-smi nvlink -s, as in Azure/azhpc-diagnostics#73 (a V100 with links 3, 5 down)."""
    text = "GPU 3: Tesla V100-SXM2-32GB (UUID: GPU-3)\n" + "".join(
        f"         Link {n}: {'<inactive>' if n in (3, 5) else '25.781 GB/s'}\n" for n in range(6)
    )
    (gpu,) = parse_nvlink_errors(text).gpus
    assert [link.state for link in gpu.links] == ["up", "up", "up", "down", "up", "down"]
    assert gpu.links[0].speed_gbps == 25.781 and gpu.links[3].speed_gbps is None
    assert not gpu.all_inactive


@pytest.mark.parametrize(
    "message",
    [
        "NVML: Unable to retrieve NVLink information as all links are inActive",  # gpud#1085
        "NVML: Unable to retrieve NVLink information as all links are inactive",  # azurehpc
        "NVML:Unable to retrieve Nvlink information as all links are inActive",  # ogkm#1150
    ],
)
def test_all_links_inactive_is_a_fact_about_the_gpu(message):
    text = f"GPU 2: NVIDIA B200 (UUID: GPU-2)\n{message}\nGPU 3: NVIDIA B200 (UUID: GPU-3)\n"
    text += "\t Link 0: 53.125 GB/s\n"
    report = parse_nvlink_errors(text)
    assert [(g.index, g.all_inactive) for g in report.gpus] == [(2, True), (3, False)]
    assert report.problems == () and report.not_run == ()


def test_all_inactive_without_a_gpu_header_did_not_run():
    report = parse_nvlink_errors(
        "NVML: Unable to retrieve NVLink information as all links are inActive\n"
    )
    assert report.gpus == ()
    (not_run,) = report.not_run
    assert not_run.what == "nvidia-smi nvlink" and "no GPU named" in not_run.why


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ("No devices were found\n", "nvidia-smi nvlink"),
        (
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"
            "Make sure that the latest NVIDIA driver is installed and running.\n",
            "nvidia-smi nvlink",
        ),
        ("Failed to initialize NVML: Unknown Error\n", "nvidia-smi nvlink"),
        (
            "Unable to determine the device handle for GPU 0000:0B:00.0: Unknown Error\n",
            "nvidia-smi nvlink of GPU 0000:0B:00.0",
        ),
    ],
)
def test_nvml_failures_are_not_run(text, what):
    report = parse_nvlink_errors(text)
    assert report.gpus == () and report.problems == ()
    assert [n.what for n in report.not_run] == [what]


def test_an_unknown_link_value_is_refused():
    report = parse_nvlink_errors("GPU 0: NVIDIA H100 (UUID: GPU-0)\n\t Link 0: fast\n")
    assert report.problems == ("GPU 0: link 0: 'fast' is no counter or speed",)


# --- dcgmi nvlink (DCGM's dcgmi/Nvlink.cpp) -------------------------------------------------

DCGMI_STATUS = """+----------------------+
|  NvLink Link Status  |
+----------------------+
GPUs:
    gpuId 0:
        U U U D X _
    gpuId 1:
        U U U U U U
NvSwitches:
    physicalId 8:
        U D X _
    Link Entities:  0:0 1:1

Key: Up=U, Down=D, Disabled=X, Not Supported=_
"""


def test_dcgmi_link_status_per_gpu_and_nvswitch():
    report = parse_dcgmi_nvlink(DCGMI_STATUS)
    assert report.problems == () and report.not_run == ()
    first, second = report.gpus
    assert [(link.state, link.not_supported) for link in first.links] == [
        ("up", False),
        ("up", False),
        ("up", False),
        ("down", False),
        ("disabled", False),  # X: turned off, not a fault
        (None, True),
    ]
    assert {link.state for link in second.links} == {"up"}
    (switch,) = report.switches
    assert switch.index == 8 and [link.state for link in switch.links] == [
        "up",
        "down",
        "disabled",
        None,
    ]


def test_dcgmi_link_status_without_gpus():
    text = "GPUs:\n    No GPUs found.\nNvSwitches:\n    No NvSwitches found.\n"
    report = parse_dcgmi_nvlink(text)
    assert report.gpus == () and report.switches == () and report.problems == ()


DCGMI_ERRORS = """+------------------------------+------------------------------------------------+
| NVLINK Error Counts                                                           |
| GPU 3                                                                         |
+==============================+================================================+
| Link 0                       |                                                |
| -> CRC FLIT Error            | 0                                              |
| -> CRC Data Error            | 2                                              |
| -> Replay Error              | 0                                              |
| -> Recovery Error            | 1                                              |
| Link 1                       |                                                |
| -> CRC FLIT Error            | 0                                              |
| -> CRC Data Error            | 0                                              |
| -> Replay Error              | 0                                              |
| -> Recovery Error            | 0                                              |
+------------------------------+------------------------------------------------+
"""


def test_dcgmi_error_counts_text_and_json_read_alike():
    text = parse_dcgmi_nvlink(DCGMI_ERRORS)
    document = {
        "header": ["NVLINK Error Counts", "GPU 3"],
        "body": {
            f"Link {n}": {
                "children": {
                    "CRC FLIT Error": {"value": "0"},
                    "CRC Data Error": {"value": "2" if n == 0 else "0"},
                    "Replay Error": {"value": "0"},
                    "Recovery Error": {"value": "1" if n == 0 else "0"},
                }
            }
            for n in range(2)
        },
    }
    as_json = parse_dcgmi_nvlink(json.dumps(document, indent=3))
    assert text == as_json
    (gpu,) = text.gpus
    assert gpu.index == 3
    assert gpu.links[0] == NvlinkLinkErrors(
        0, {"crc_flit": 0, "crc_data": 2, "replay": 0, "recovery": 1}
    )


def test_dcgmi_blackwell_error_detail_is_per_gpu():
    document = {
        "header": ["NVLINK Error Counts", "GPU 0"],
        "body": {
            "Error Detail": {
                "children": {
                    "Malformed Packet Error": {"value": "0"},
                    "Symbol BER": {"value": "1.5e-12"},
                    "Rx Error": {"value": "-4"},
                }
            }
        },
    }
    report = parse_dcgmi_nvlink(json.dumps(document))
    assert report.gpus[0].counters == {"malformed_packet_error": 0, "symbol_ber": 1.5e-12}
    assert report.problems == ("GPU 0: Error Detail: Rx Error '-4' is not a non-negative integer",)


@pytest.mark.parametrize(
    ("text", "what"),
    [
        (
            "Error: Unable to retrieve NvLink link status from DCGM. Return: Host engine "
            "connection invalid/disconnected.\n",
            "dcgmi nvlink",
        ),
        (
            "Error: unable to establish a connection to the specified host: localhost\n",
            "dcgmi nvlink",
        ),
        (
            DCGMI_ERRORS.replace("| Link 1 ", "| Link 2 ")
            + "Warning: Unable to retrieve nvlink CRC FLIT Error count for link 1 for gpuId 3 - "
            "Not Supported\n",
            "dcgmi nvlink CRC FLIT Error of GPU 3 link 1",
        ),
    ],
)
def test_dcgmi_failures_are_not_run(text, what):
    report = parse_dcgmi_nvlink(text)
    assert [n.what for n in report.not_run] == [what]
    assert isinstance(report.not_run[0], NotRun)


@pytest.mark.parametrize("text", ["", "GPU 0: NVIDIA H100\n", '{"header": ["x"], "body": {}}'])
def test_dcgmi_unknown_text_is_a_parse_error(text):
    with pytest.raises(ParseError):
        parse_dcgmi_nvlink(text)


def test_dcgmi_an_unknown_line_is_refused():
    report = parse_dcgmi_nvlink(DCGMI_STATUS.replace("    gpuId 1:", "    gpu 1 is odd:"))
    assert any("unknown line 'gpu 1 is odd:'" in p for p in report.problems)
