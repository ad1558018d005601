"""dcgmi diag: DCGM 3.x and 4.x JSON and the text table, per test and per GPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufleet.errors import ParseError
from gpufleet.parsing import DcgmGpuResult, DcgmTest, parse_dcgm_diag

DATA = Path(__file__).resolve().parents[1] / "data" / "parsing" / "health"


def load(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


def statuses(test: DcgmTest) -> dict[int, str]:
    return {gpu.gpu: gpu.status for gpu in test.gpus}


def test_v3_json_level_3_everything_skipped_after_deployment():
    result = parse_dcgm_diag(load("dcgm_diag_v3_r3_skips.json"))
    assert result.source == "json"
    assert result.dcgm_version == "3.3.0" and result.driver_version is None
    assert [(t.name, t.category, t.status) for t in result.tests] == [
        ("Denylist", "Deployment", "pass"),
        ("Persistence Mode", "Deployment", "pass"),
        ("PCIe", "Integration", "skip"),
        ("GPU Memory", "Hardware", "skip"),
        ("Diagnostic", "Hardware", "skip"),
        ("Targeted Stress", "Stress", "skip"),
    ]
    assert all(statuses(t) == {0: t.status} for t in result.tests)
    assert result.failures == () and result.problems == ()


def test_v3_json_pcie_replays_fail_one_gpu_with_its_code():
    result = parse_dcgm_diag(load("dcgm_diag_v3_pcie_replay_fail.json"))
    assert (result.dcgm_version, result.driver_version) == ("3.3.5", "550.54.15")
    pcie = next(t for t in result.tests if t.name == "PCIe")
    assert pcie.status == "fail"
    assert statuses(pcie) == {0: "fail", 1: "pass", 2: "pass", 3: "pass"}
    ((name, gpu),) = result.failures
    assert name == "PCIe" and gpu.gpu == 0 and gpu.error_codes == (3,)  # DCGM_FR_PCI_REPLAY_RATE
    assert gpu.messages[0].startswith("Detected more than 8 PCIe replays per minute for GPU 0 : 41")
    assert statuses(result.tests[0]) == {0: "pass", 1: "pass", 2: "pass", 3: "pass"}
    assert result.failing_gpus == (0,)
    assert result.problems == ()


def test_v4_json_entities_summary_and_non_gpu_entities_left_out():
    result = parse_dcgm_diag(load("dcgm_diag_v4_entities.json"))
    assert (result.dcgm_version, result.driver_version) == ("4.1.1", "570.124.06")
    software, diagnostic = result.tests
    assert software == DcgmTest(
        "software",
        "Deployment",
        "fail",
        (
            DcgmGpuResult(0, "pass"),
            DcgmGpuResult(
                1,
                "fail",
                (
                    "Persistence Mode: Persistence mode for GPU 1 is disabled. Enable persistence"
                    ' mode by running "nvidia-smi -i <gpuId> -pm 1 " as root.',
                ),
                (29,),
            ),
        ),
    )
    assert diagnostic.status == "pass" and statuses(diagnostic) == {0: "pass", 1: "pass"}
    assert result.failing_gpus == (1,) and result.problems == ()


def test_flat_tests_with_errors_list():
    doc = {
        "version": "4.2.3",
        "tests": [
            {
                "name": "memory",
                "results": [
                    {"entity_group": "GPU", "entity_id": 0, "status": "pass"},
                    {
                        "entity_group": "GPU",
                        "entity_id": 1,
                        "status": "fail",
                        "errors": [{"error_id": 50, "category": 3, "severity": 2, "msg": "DBE"}],
                    },
                ],
            }
        ],
    }
    result = parse_dcgm_diag(json.dumps(doc))
    (memory,) = result.tests
    assert memory.status == "fail"
    assert memory.gpus[1] == DcgmGpuResult(1, "fail", ("DBE",), (50,))
    assert result.dcgm_version == "4.2.3"


def test_v3_text_table_names_the_failing_gpu_and_joins_wrapped_messages():
    result = parse_dcgm_diag(load("dcgm_diag_v3_text_pcie_fail.txt"))
    assert result.source == "text"
    assert (result.dcgm_version, result.driver_version) == ("3.3.5", "550.54.15")
    assert len(result.tests) == 14
    pcie = next(t for t in result.tests if t.name == "PCIe")
    assert pcie.category == "Integration" and pcie.status == "fail"
    assert pcie.gpus == (
        DcgmGpuResult(2, "fail", ("Detected more than 8 PCIe replays per minute for GPU 2 : 41",)),
    )
    power = next(t for t in result.tests if t.name == "Targeted Power")
    assert (power.category, power.status, power.gpus) == ("Stress", "skip", ())
    assert result.failing_gpus == (2,) and result.problems == ()


def test_v4_text_table_per_gpu_rows():
    result = parse_dcgm_diag(load("dcgm_diag_v4_text_per_gpu.txt"))
    assert result.dcgm_version == "4.2.3"
    software, memory = result.tests
    assert statuses(software) == {0: "pass", 1: "pass", 2: "pass", 3: "pass"}
    assert memory.status == "warn" and statuses(memory) == {
        0: "pass",
        1: "warn",
        2: "pass",
        3: "pass",
    }
    assert result.failures == ()


def test_impossible_values_are_refused_into_problems():
    doc = {
        "DCGM GPU Diagnostic": {
            "test_categories": [
                {
                    "category": "Hardware",
                    "tests": [
                        {
                            "name": "GPU Memory",
                            "results": [
                                {"gpu_ids": "0", "status": "Pass"},
                                {"gpu_ids": "1", "status": "Excellent"},
                                {"gpu_ids": "-2", "status": "Fail"},
                                {
                                    "gpu_ids": "3",
                                    "status": "Fail",
                                    "warnings": [{"warning": "x", "error_id": "DBE"}],
                                },
                            ],
                        }
                    ],
                }
            ]
        }
    }
    result = parse_dcgm_diag(json.dumps(doc))
    (memory,) = result.tests
    assert statuses(memory) == {0: "pass"}
    assert len(result.problems) == 3
    assert "'Excellent' is not a word DCGM prints" in result.problems[0]
    assert "'-2' are not non-negative integers" in result.problems[1]
    assert "error_id 'DBE' is not a DCGM error code" in result.problems[2]


def test_text_status_dcgm_never_prints_is_refused():
    text = "| Diagnostic | Result |\n| PCIe | Pass |\n| Memory | Great - All |\n|  | GPU0: Meh |\n"
    result = parse_dcgm_diag(text)
    assert [t.name for t in result.tests] == ["PCIe"]
    assert result.problems == ("test 'Memory': 'Great - All' is not a status DCGM prints",)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Error: unable to establish a connection to the specified host: localhost\n",
        '{"jobs": []}',
        '{"DCGM GPU Diagnostic": {"test_categories": []}}',
        "| Diagnostic | Result |\n| Memory | Splendid |\n",
    ],
)
def test_nothing_recognisable_raises(text):
    with pytest.raises(ParseError):
        parse_dcgm_diag(text)
