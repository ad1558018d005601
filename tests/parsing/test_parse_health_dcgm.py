"""dcgmi diag: DCGM 2.x-4.x JSON and the text table, per test and per GPU; the test-level facts
(a test that fails with no failing GPU, messages of no GPU), DCGM's run errors, the level, and
what a cut-short or skipped run did not check.

Inputs written in the tests below are composed from DCGM's own format strings (NVIDIA/DCGM
``dcgmi/Diag.cpp``, ``dcgmi/Command.cpp``, ``dcgmlib/src/dcgm_errors.c``), not real samples; the
real samples are in ``tests/data/parsing/health/corpus/dcgm`` (``test_health_corpus_dcgm.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufleet.errors import ParseError
from gpufleet.parsing import DcgmGpuResult, DcgmTest, parse_dcgm_diag
from gpufleet.parsing.health.dcgm import named_gpus, status_word

DATA = Path(__file__).resolve().parents[1] / "data" / "parsing" / "health"
CORPUS = DATA / "corpus" / "dcgm"


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
    assert len(result.tests) == 15  # the 3.x test named "Diagnostic" is a test, not the header
    assert next(t for t in result.tests if t.name == "Diagnostic").status == "pass"
    pcie = next(t for t in result.tests if t.name == "PCIe")
    assert pcie.category == "Integration" and pcie.status == "fail"
    assert pcie.gpus == (
        DcgmGpuResult(
            2, "fail", ("GPU 2 Detected more than 8 PCIe replays per minute for GPU 2 : 41",)
        ),
    )
    power = next(t for t in result.tests if t.name == "Targeted Power")
    # "Skip - All": every GPU the output names (GPU 2) skipped it
    assert (power.category, power.status, power.gpus) == (
        "Stress",
        "skip",
        (DcgmGpuResult(2, "skip"),),
    )
    assert result.failing_gpus == (2,) and result.problems == () and result.not_run == ()


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


# --- the table as dcgmi/Diag.cpp draws it (DIAG_HEADER, DIAG_DATA, DIAG_FOOTER) -------------

BORDER = "+" + "-" * 27 + "+" + "-" * 48 + "+"
HEAD = [
    "Successfully ran diagnostic for group.",
    BORDER,
    "| Diagnostic                | Result                                         |",
    "+" + "=" * 27 + "+" + "=" * 48 + "+",
]
DEPLOYMENT = "|-----  Deployment  --------+------------------------------------------------|"
HARDWARE = "+-----  Hardware  ----------+------------------------------------------------+"
INTEGRATION = "+-----  Integration  -------+------------------------------------------------+"


def row(name: str, value: str = "") -> str:
    return f"| {name:<25} | {value:<46} |"


def message(name: str, text: str) -> list[str]:
    """A message wrapped as DisplayVerboseInfo wraps it: 45 characters a row."""
    chunks = [text[i : i + 45] for i in range(0, len(text), 45)]
    return [row(name, chunks[0])] + [row("", chunk) for chunk in chunks[1:]]


def table(*lines: str, close: bool = True) -> str:
    return "\n".join([*HEAD, *lines, *([BORDER] if close else [])]) + "\n"


def test_table_helpers_draw_what_dcgmi_draws():
    real = (CORPUS / "v4_4_2_r2_one_gpu_pass.txt").read_text(encoding="utf-8").splitlines()
    assert real[1:5] == HEAD and real[-1] == BORDER
    assert row("software", "Pass") in real and row("", "GPU0: Pass") in real


# --- a test that fails without a failing GPU ---------------------------------------------------


def test_v4_test_failed_while_every_gpu_passed_is_a_whole_node_failure():
    result = parse_dcgm_diag((CORPUS / "v4_4_1_b200_pcie_internal_error.txt").read_text())
    pcie = next(t for t in result.tests if t.name == "pcie")
    assert pcie.status == "fail" and pcie.failing_gpus == () and pcie.whole_node
    assert {g.status for g in pcie.gpus} == {"pass"} and len(pcie.gpus) == 8
    assert pcie.messages == (
        "There was an internal error during the test: 'Output of child process (11167) "
        "couldn't be parsed: '* Line 1, Column 1 Syntax error: value, object or array "
        "expected. '' Check DCGM and system logs for errors. Reset GPU. Restart DCGM. Rerun "
        "diagnostics.",
    )
    assert result.failed_tests == ("pcie",) and result.whole_node_failures == (pcie,)
    assert result.failures == () and result.failing_gpus == ()
    # an internal error: the test did not run to a verdict (its status stays DCGM's)
    (internal,) = result.not_run
    assert internal.what == "dcgmi diag test 'pcie'" and "internal error" in internal.why


def test_fail_all_fails_every_gpu_the_output_names_and_continuation_rows_name_theirs():
    text = table(
        INTEGRATION,
        row("PCIe", "Pass - GPUs: 0, 2"),
        row("", "Fail - GPU: 1"),
        *message("Warning", "GPU 1 Detected more than 8 PCIe replays per minute for GPU 1 : 41"),
        HARDWARE,
        row("GPU Memory", "Fail - All"),
        row("Diagnostic", "Pass - All"),
    )
    result = parse_dcgm_diag(text)
    pcie, memory, diagnostic = result.tests
    assert statuses(pcie) == {0: "pass", 1: "fail", 2: "pass"} and pcie.status == "fail"
    assert pcie.gpus[1].messages == (
        "GPU 1 Detected more than 8 PCIe replays per minute for GPU 1 : 41",
    )
    assert statuses(memory) == {0: "fail", 1: "fail", 2: "fail"} and memory.status == "fail"
    assert statuses(diagnostic) == {0: "pass", 1: "pass", 2: "pass"}
    assert result.failing_gpus == (0, 1, 2) and result.whole_node_failures == ()
    assert result.not_run == () and result.problems == ()


def test_fail_all_in_an_output_naming_no_gpu_fails_the_whole_node():
    result = parse_dcgm_diag(table(HARDWARE, row("GPU Memory", "Fail - All")))
    (memory,) = result.tests
    assert memory.status == "fail" and memory.gpus == () and memory.whole_node
    assert result.failed_tests == ("GPU Memory",) and result.failing_gpus == ()


def test_deployment_fail_rows_with_no_gpu_are_whole_node_failures():
    result = parse_dcgm_diag((CORPUS / "v2_deepops_prolog_deployment_fail.txt").read_text())
    assert [t.name for t in result.whole_node_failures] == [
        "Persistence Mode",
        "Environment Variables",
        "Page Retirement",
        "Graphics Processes",
        "Inforom",
    ]


@pytest.mark.parametrize(
    "text, gpus",
    [
        ("GPU 0 Thermal violations totaling 13.3 seconds", (0,)),
        ("Persistence mode for GPU 3 is disabled", (3,)),
        ("cudaEventCreate failed for GPU0: busy", (0,)),
        ("error on gpu 2 while allocating", (2,)),
        ("Unable to run the test on GPU ID: 5", (5,)),
        ("Pass - GPUs: 1, 2, 7", (1, 2, 7)),
        ("gpuId 4 returned status 0", (4,)),
        ("GPU 0 GPU to Host bandwidth: 12.33 GB/s, GPU 0 Host to GPU bandwidth", (0,)),
        ("Detected more than 8 PCIe replays per minute for GPU 2 : 41", (2,)),
        ("GPU 0GPU 0's NvLink link 3 is currently down", (0,)),  # DCGM 2.4 (issue 49)
        ("an H100 GPU 80GB HBM3 card", ()),
        ("The GPU to Host bandwidth is 12.33 GB/s", ()),
        ("GPU-64c6592e-0317-762b-fb32-0d561ed649ae failed", ()),
    ],
)
def test_gpus_named_in_any_of_dcgms_spellings(text, gpus):
    assert named_gpus(text) == gpus


def test_v4_entity_rows_messages_and_non_gpu_entities():
    text = table(
        HARDWARE,
        row("memory", "Fail"),
        row("", "GPU0: Pass"),
        row("", "GPU1: Fail"),
        *message("Warning: GPU1", "Error using CUDA API cuMemAlloc Check DCGM and system logs"),
        row("cpu_eud", "Fail"),
        row("", "CPU0: Fail"),
        *message("Warning: CPU0", "The CPU EUD test failed"),
    )
    result = parse_dcgm_diag(text)
    memory, cpu = result.tests
    assert statuses(memory) == {0: "pass", 1: "fail"}
    assert memory.gpus[1].messages == (
        "Error using CUDA API cuMemAlloc Check DCGM and system logs",
    )
    assert cpu.status == "fail" and cpu.gpus == () and cpu.whole_node
    assert cpu.messages == ("CPU0: Fail", "CPU0: The CPU EUD test failed")
    assert result.failing_gpus == (1,) and [t.name for t in result.whole_node_failures] == [
        "cpu_eud"
    ]


def test_a_warning_of_no_gpu_stays_the_tests_own():
    text = table(
        INTEGRATION,
        row("pcie", "Fail"),
        *message("Warning", "There was an internal error during the test: 'A child process'"),
        row("", "GPU0: Pass"),
    )
    (pcie,) = parse_dcgm_diag(text).tests
    assert pcie.messages == ("There was an internal error during the test: 'A child process'",)
    assert pcie.gpus == (DcgmGpuResult(0, "pass"),)


def test_warn_all_with_its_code_row_and_info_rows_are_read_without_problems():
    text = table(
        HARDWARE,
        row("Diagnostic", "Warn - All"),
        *message("Warning", "GPU 0 Thermal violations totaling 13.3 seconds"),
        *message("Info", "GPU 0 calculated at approximately 859.08 gigaflops"),
        row("", "  Code: (000000000000)"),
    )
    result = parse_dcgm_diag(text)
    (diagnostic,) = result.tests
    assert diagnostic.status == "warn" and statuses(diagnostic) == {0: "warn"}
    assert diagnostic.gpus[0].messages == ("GPU 0 Thermal violations totaling 13.3 seconds",)
    assert result.problems == () and result.not_run == ()


# --- skipped, cut short, not run -----------------------------------------------------------------


def test_every_test_skipped_is_a_run_that_checked_nothing():
    text = table(
        INTEGRATION,
        row("PCIe", "Skip - All"),
        HARDWARE,
        row("GPU Memory", "Skip - All"),
        row("Diagnostic", "Not Run"),
    )
    result = parse_dcgm_diag(text)
    assert [t.status for t in result.tests] == ["skip", "skip", "skip"]
    assert result.skipped_all and result.failed_tests == ()
    (nothing,) = result.not_run
    assert nothing.what == "dcgmi diag" and "skipped every test" in nothing.why


def test_some_skipped_tests_are_not_a_skipped_run():
    result = parse_dcgm_diag((CORPUS / "v3_3_9_h200_r3_pass_eud_skip.txt").read_text())
    assert result.skipped_tests == ("EUD Test",) and not result.skipped_all
    assert result.not_run == ()


def test_a_table_whose_box_does_not_close_is_cut_short_and_says_what_it_read_last():
    lines = (CORPUS / "v3_3_3_p4de_r2_pass_all.txt").read_text().splitlines()
    assert lines[-1] == BORDER
    result = parse_dcgm_diag("\n".join(lines[:-1]) + "\n")
    (cut,) = result.not_run
    assert cut.what == "dcgmi diag" and cut.code is None
    assert "box does not close" in cut.why and "last read: test 'GPU Memory'" in cut.why


def test_a_row_cut_mid_message_is_cut_short():
    result = parse_dcgm_diag(
        (CORPUS / "v3_excerpt_r2_gpu_memory_fail_gpu0_thermal.txt").read_text()
    )
    (memory,) = result.tests
    assert statuses(memory) == {
        0: "fail",
        1: "pass",
        2: "pass",
        3: "pass",
        4: "pass",
        5: "pass",
        6: "pass",
        7: "pass",
    }
    (cut,) = result.not_run
    assert "a row cut short" in cut.why and "last read: test 'GPU Memory' Warning" in cut.why


def test_json_that_does_not_close_is_cut_short_and_names_the_last_test():
    text = (CORPUS / "v3_json_virtualclient_r3.json").read_text()
    cut_at = text.index('"name" : "Targeted Power"') + 40
    result = parse_dcgm_diag(text[:cut_at])
    assert result.source == "json" and result.tests == ()
    (cut,) = result.not_run
    assert "does not close" in cut.why and "'Targeted Power'" in cut.why


def test_banner_without_a_table_is_no_result():
    result = parse_dcgm_diag("Successfully ran diagnostic for group.\n")
    assert result.tests == () and len(result.not_run) == 1


# --- DCGM's run errors ---------------------------------------------------------------------------

IN_USE = "The requested operation could not be completed because the affected resource is in use"


@pytest.mark.parametrize(
    "text, code",
    [
        # 4.x RunDiagOnce: "Return: (" << result << ") : " << errorString(result)
        (
            f"Error: Unable to complete diagnostic for group 2147483647. Return: (-34) : {IN_USE}"
            "\n",
            "DCGM_ST_IN_USE",
        ),
        # 3.x: "Return: (" << result << ") " << errorString(result) << "."
        (
            f"Error: Unable to complete diagnostic for group 2. Return: (-34) {IN_USE}.\n",
            "DCGM_ST_IN_USE",
        ),
        # 2.x: "Return: " << errorString(result), no number
        (f"Error: Unable to complete diagnostic for group 0. Return: {IN_USE}\n", "DCGM_ST_IN_USE"),
        ("Error: Unable to complete diagnostic. Return: (-11) : Timeout\n", "DCGM_ST_TIMEOUT"),
        (
            "Error: Unable to complete diagnostic for group 2. Return: (-39) : A diag instance is "
            "already running, cannot run a new diag until the current one finishes\n",
            "DCGM_ST_DIAG_ALREADY_RUNNING",
        ),
        ("Error: Diagnostic could not be run while DCGM is paused.\n", "DCGM_ST_PAUSED"),
        (
            "Error: unable to establish a connection to the specified host: localhost\n"
            "Error: Unable to connect to host engine. Host engine connection "
            "invalid/disconnected.\n",
            "DCGM_ST_CONNECTION_NOT_VALID",
        ),
        ("preflight: dcgmi diag ended with DCGM_ST_IN_USE, retrying\n", "DCGM_ST_IN_USE"),
    ],
)
def test_run_errors_are_not_run_with_dcgms_code_and_no_parse_error(text, code):
    result = parse_dcgm_diag(text)
    assert result.tests == () and result.source == "text"
    assert result.not_run and {n.code for n in result.not_run} == {code}
    assert all(n.what == "dcgmi diag" for n in result.not_run)


def test_a_bare_system_error_is_a_run_error_and_its_return_line_keeps_it():
    """3.x prints NVVS's system error as a bare "Error: <message>"; 4.x prints it on the line
    after "Return: (-30)" (NVIDIA/DCGM#254)."""
    bare = "Error: Cannot load plugins. Unable to change to the plugin dir '/usr/x/': 'No such'\n"
    (error,) = parse_dcgm_diag(bare).not_run
    assert error.code is None and error.why.startswith("Error: Cannot load plugins")
    text = (CORPUS / "v4_4_1_error_only_nvvs_error_no_plugins.txt").read_text()
    (error,) = parse_dcgm_diag(text).not_run
    assert error.code == "DCGM_ST_NVVS_ERROR" and "Cannot load plugins" in error.why


@pytest.mark.parametrize(
    "line",
    [
        # 3.x (NVIDIA/DCGM#67): NVVS refuses a test name it does not know, nothing ran
        'Error: requested test "memory bandwidth" was not found among possible test choices.',
        # 4.x nvvs/src/NvidiaValidationSuite.cpp: "Error: requested test(s): ..."
        "Error: requested test(s): [pulse_test] were not found among possible test choices.",
    ],
)
def test_an_unknown_test_name_is_a_run_error_not_a_parse_error(line):
    result = parse_dcgm_diag(line + "\n")
    assert result.tests == ()
    (error,) = result.not_run
    assert error.what == "dcgmi diag" and error.why == line and error.code is None


def test_a_return_number_it_does_not_know_is_no_code_and_a_problem():
    result = parse_dcgm_diag(
        "Error: Unable to complete diagnostic for group 2. Return: (-99) : x\n"
    )
    (error,) = result.not_run
    assert error.code is None and "Return: (-99)" in error.why
    assert result.problems and "-99" in result.problems[0]


@pytest.mark.parametrize("root", ["DCGM Diagnostic", "DCGM GPU Diagnostic"])
def test_json_runtime_error_instead_of_results(root):
    doc = {
        root: {
            "version": "4.2.3",
            "runtime_error": "Error: Unable to complete diagnostic for group 2147483647. "
            f"Return: (-34) : {IN_USE}\n",
        }
    }
    result = parse_dcgm_diag(json.dumps(doc, indent=4))
    assert result.source == "json" and result.tests == () and result.dcgm_version == "4.2.3"
    (error,) = result.not_run
    assert error.code == "DCGM_ST_IN_USE" and error.why.startswith("Error: Unable to complete")


def test_iterations_read_every_run_and_a_failed_test_is_no_not_run():
    one = json.loads(load("dcgm_diag_v4_entities.json"))
    failed = {
        "iterations": [one, one],
        "Overall Result": "Fail",
        "warning": "DCGM GPU Diagnostic returned an error",
    }
    result = parse_dcgm_diag(json.dumps(failed))
    assert len(result.tests) == 4 and result.failing_gpus == (1,) and result.not_run == ()
    timed_out = {**failed, "warning": "Timeout"}
    assert [n.code for n in parse_dcgm_diag(json.dumps(timed_out)).not_run] == ["DCGM_ST_TIMEOUT"]


# --- 4.x JSON: the summary, non-GPU entities, tests not run ---------------------------------------


def _v4(*tests: dict) -> str:
    return json.dumps(
        {
            "DCGM Diagnostic": {
                "test_categories": [{"category": "Integration", "tests": list(tests)}]
            },
            "metadata": {"version": "4.2.3"},
        }
    )


def _gpu(entity: int, status: str, **more) -> dict:
    return {
        "entity_group": "GPU",
        "entity_group_id": 1,
        "entity_id": entity,
        "status": status,
        **more,
    }


def test_v4_json_summary_fail_with_every_entity_passing_fails_the_test():
    internal = "There was an internal error during the test: 'A child process (152) exited'"
    test = {
        "name": "pcie",
        "results": [_gpu(0, "Pass"), _gpu(1, "Pass")],
        "test_summary": {
            "status": "Fail",
            "warnings": [
                {"warning": internal, "error_id": 44, "error_category": 7, "error_severity": 2}
            ],
        },
    }
    result = parse_dcgm_diag(_v4(test))
    (pcie,) = result.tests
    assert pcie.status == "fail" and pcie.whole_node and statuses(pcie) == {0: "pass", 1: "pass"}
    assert pcie.messages == (internal,) and pcie.error_codes == (44,)
    assert [n.what for n in result.not_run] == ["dcgmi diag test 'pcie'"]


def test_v4_json_summary_repeats_entity_errors_without_duplicating_them():
    warning = {"warning": "Persistence mode for GPU 1 is disabled.", "error_id": 29}
    test = {
        "name": "software",
        "results": [_gpu(0, "Pass"), _gpu(1, "Fail", warnings=[warning])],
        "test_summary": {"status": "Fail", "warnings": [warning]},
    }
    (software,) = parse_dcgm_diag(_v4(test)).tests
    assert software.messages == () and software.error_codes == ()
    assert software.gpus[1] == DcgmGpuResult(
        1, "fail", ("Persistence mode for GPU 1 is disabled.",), (29,)
    )


def test_v4_json_a_failing_non_gpu_entity_fails_the_test():
    cpu = {
        "entity_group": "CPU",
        "entity_group_id": 7,
        "entity_id": 0,
        "status": "Fail",
        "warnings": [{"warning": "CPU EUD failed", "error_id": 95}],
    }
    result = parse_dcgm_diag(_v4({"name": "cpu_eud", "results": [cpu, _gpu(0, "Pass")]}))
    (test,) = result.tests
    assert test.status == "fail" and test.whole_node
    assert test.messages == ("CPU 0: Fail", "CPU 0: CPU EUD failed") and test.error_codes == (95,)


def test_v4_json_a_test_without_results_or_summary_was_not_run():
    result = parse_dcgm_diag(
        _v4({"name": "pcie", "results": [_gpu(0, "Pass")]}, {"name": "pulse_test"})
    )
    assert [(t.name, t.status) for t in result.tests] == [("pcie", "pass"), ("pulse_test", "skip")]


def test_v3_json_deployment_result_without_gpu_id_names_gpus_in_its_message():
    doc = {
        "DCGM GPU Diagnostic": {
            "test_categories": [
                {
                    "category": "Deployment",
                    "tests": [
                        {"name": "Denylist", "results": [{"status": "Pass"}]},
                        {
                            "name": "Persistence Mode",
                            "results": [
                                {
                                    "gpu_id": 1,
                                    "status": "Fail",
                                    "warnings": [
                                        {
                                            "warnings": "Persistence mode for GPU 1 is "
                                            "currently disabled.",
                                            "error_id": 29,
                                        }
                                    ],
                                }
                            ],
                        },
                        {
                            "name": "Inforom",
                            "results": [
                                {"status": "Fail", "warnings": "Inforom corrupted on GPU 0"}
                            ],
                        },
                    ],
                }
            ]
        }
    }
    result = parse_dcgm_diag(json.dumps(doc))
    denylist, persistence, inforom = result.tests
    assert denylist.status == "pass" and denylist.gpus == ()
    assert persistence.gpus == (
        DcgmGpuResult(1, "fail", ("Persistence mode for GPU 1 is currently disabled.",), (29,)),
    )
    assert inforom.gpus == (DcgmGpuResult(0, "fail", ("Inforom corrupted on GPU 0",)),)
    assert result.failing_gpus == (0, 1) and result.problems == ()


# --- the level -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "prefix, level",
    [
        ("$ dcgmi diag -r 3\n", 3),
        ("sh-5.1# /usr/bin/dcgmi diag --run 4 --fail-early\n", 4),
        ("srun --gpus=2 sudo dcgmi diag -r 2\n", 2),
        ("$ dcgmi diag -r pcie,diagnostic\n", None),
        ("$ dcgmi diag -r long\n", 3),  # DCGM's alias (dcgmi diag reference)
        ("$ dcgmi diag --run=xlong -j\n", 4),
        ("", None),
    ],
)
def test_the_level_is_read_from_a_dcgmi_diag_command_line_only(prefix, level):
    text = prefix + table(INTEGRATION, row("PCIe", "Pass - All"))
    assert parse_dcgm_diag(text).level == level


def test_two_command_lines_that_disagree_give_no_level():
    text = "dcgmi diag -r 1\ndcgmi diag -r 3\n" + table(INTEGRATION, row("PCIe", "Pass - All"))
    result = parse_dcgm_diag(text)
    assert result.level is None and "several dcgmi diag run levels" in result.problems[0]


def test_the_level_of_a_json_run():
    text = "$ dcgmi diag -r 2 -j\n" + load("dcgm_diag_v4_entities.json")
    assert parse_dcgm_diag(text).level == 2


# --- the words and what is refused ---------------------------------------------------------------


@pytest.mark.parametrize(
    "word, status",
    [
        ("Pass", "pass"),
        ("PASS", "pass"),
        ("Fail", "fail"),
        ("Warn", "warn"),
        ("Skip", "skip"),
        ("Not Run", "skip"),
        ("Warning", None),
        ("OK", None),
        ("Skipped", None),
        ("Passed", None),
    ],
)
def test_the_status_words_dcgm_prints(word, status):
    assert status_word(word) == status


@pytest.mark.parametrize(
    "text, said",
    [
        ("", "empty"),
        ("Hello from a kernel log\nNVRM: Xid 79\n", "Hello from a kernel log"),
        ('{"jobs": []}', "jobs"),
        ("Error: file not found\n", "Error: file not found"),
    ],
)
def test_output_that_is_not_dcgms_raises_with_what_it_saw(text, said):
    with pytest.raises(ParseError, match=said):
        parse_dcgm_diag(text)


def test_a_diagnostic_root_that_is_not_an_object_is_refused():
    with pytest.raises(ParseError, match="holds a list"):
        parse_dcgm_diag('{"DCGM GPU Diagnostic": [{"category": "Deployment"}]}')


@pytest.mark.parametrize(
    "text",
    [
        '{"DCGM GPU Diagnostic": {"test_categories": []}}',
        "| Diagnostic | Result |\n| Memory | Splendid |\n",
    ],
)
def test_dcgm_output_with_no_readable_test_is_not_run_not_healthy(text):
    result = parse_dcgm_diag(text)
    assert result.tests == () and result.not_run
