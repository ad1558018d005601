"""One node's GPU health check output (parsing.health.report): each section to its parser,
what could not be read named in problems, text that is no health check refused."""

from __future__ import annotations

import re

import pytest

from gpufleet.backends.sim.gpu_health import health_check_output
from gpufleet.domain.faults import parse_fault
from gpufleet.domain.health import HealthAction, decide_health
from gpufleet.errors import ParseError
from gpufleet.parsing.health import parse_node_health
from gpufleet.parsing.health.report import section_line

NODE = "a3u-sim-h200-a-1"


def output(faults=(), level=1) -> str:
    faults = [parse_fault(f) for f in faults]
    return health_check_output(NODE, faults, gpu_model="H200", gpus=8, diag_level=level)


def test_every_section_is_read_and_a_healthy_node_is_healthy():
    report = parse_node_health(output(level=2))
    assert (report.node, report.level, report.problems) == (NODE, 2, ())
    assert report.xid.events == () and len(report.memory.gpus) == 8
    assert len(report.nvlink.gpus) == 8 and report.diag is not None
    assert not report.throttling
    assert decide_health(**report.signals()).action is HealthAction.HEALTHY


def test_thermal_slowdown_is_read_from_the_query():
    report = parse_node_health(output([f"thermal-throttle:{NODE}"]))
    assert report.throttling
    assert decide_health(**report.signals()).action is HealthAction.REPAIR


def test_a_missing_or_unreadable_section_is_a_problem_not_a_failure():
    text = output([f"xid:{NODE}:79"])
    head, _, rest = text.partition(section_line("nvidia-smi-nvlink"))
    _, _, tail = rest.partition(section_line("thermal"))
    report = parse_node_health(head + section_line("thermal") + tail)
    assert report.nvlink is None
    assert report.problems == ("nvidia-smi-nvlink: not in the output (cut off before it)",)
    assert [str(n) for n in report.not_run] == [
        "nvidia-smi nvlink -e: not in the output (cut off before it)"
    ]
    # what was read still decides: a real failure outranks what could not run
    assert decide_health(**report.signals()).action is HealthAction.REBOOT
    # without the Xid the node is could_not_run, never healthy
    clean = output()
    head, _, rest = clean.partition(section_line("nvidia-smi-nvlink"))
    _, _, tail = rest.partition(section_line("thermal"))
    decision = decide_health(**parse_node_health(head + section_line("thermal") + tail).signals())
    assert decision.action is HealthAction.COULD_NOT_RUN
    assert decision.reason == "nvidia-smi nvlink -e: not in the output (cut off before it)"


def test_an_impossible_thermal_value_is_refused_into_problems():
    text = output().replace("0, Not Active, Not Active", "0, Maybe, Not Active")
    report = parse_node_health(text)
    assert not report.throttling
    assert report.problems == ("thermal line 1: 'maybe' is neither 'Active' nor 'Not Active'",)


def test_a_tool_that_printed_nothing_leaves_nothing_to_decide_on():
    empty = "".join(
        f"{section_line(s)}\n"
        for s in ("dmesg", "nvidia-smi-remap-ecc", "nvidia-smi-nvlink", "thermal", "dcgmi-diag")
    )
    report = parse_node_health(f"{section_line('node')}\nnode={NODE} level=1\n{empty}")
    # issue 31: the thermal query printing nothing did not run either (was: 4 problems and a
    # node for a person; now a check that could not run, retried, never a hardware verdict)
    assert len(report.problems) == len(report.not_run) == 5
    assert decide_health(**report.signals()).action is HealthAction.COULD_NOT_RUN


@pytest.mark.parametrize(
    "text",
    ["", "hello\n", f"{section_line('node')}\nnode={NODE} level=9\n", f"node={NODE} level=1\n"],
)
def test_text_that_is_no_health_check_is_refused(text):
    with pytest.raises(ParseError, match="not a gpufleet health check"):
        parse_node_health(text)


def test_an_unknown_section_name_is_refused():
    with pytest.raises(ValueError, match="unknown health section"):
        section_line("smartctl")


# --- issue 31: exit lines, timeouts, missing sections -----------------------------------------


def old_output(level: int = 1) -> str:
    """What the check printed before issue 31: no exit lines, no timeout on the node line."""
    lines = output(level=level).splitlines(keepends=True)
    text = "".join(line for line in lines if not line.startswith("gpufleet-health-exit="))
    return re.sub(r"(level=\d) timeout=\d+", r"\1", text)


def with_exits(text: str, exits: dict[str, int]) -> str:
    """``text`` with ``gpufleet-health-exit=<rc>`` after each section named in ``exits``."""
    out = text
    for section, rc in exits.items():
        marker = section_line(section)
        head, _, rest = out.partition(marker)
        body, nxt, tail = rest.partition("==> gpufleet-health: ")
        body = body.rstrip("\n") + f"\ngpufleet-health-exit={rc}\n"
        out = head + marker + body + nxt + tail
    return out


def test_an_output_from_before_the_exit_lines_is_read_as_before():
    report = parse_node_health(old_output(level=2))
    assert (report.timeout, report.exits, report.not_run, report.problems) == (None, (), (), ())
    assert decide_health(**report.signals()).verdict == "pass"


def test_an_exit_line_is_taken_off_before_the_parser_reads_the_section():
    plain = old_output(level=2)
    report = parse_node_health(with_exits(plain, {"dcgmi-diag": 0, "nvidia-smi-nvlink": 0}))
    assert report.not_run == () and report.problems == ()
    assert dict(report.exits) == {"dcgmi-diag": 0, "nvidia-smi-nvlink": 0}
    assert report.diag == parse_node_health(plain).diag
    # dcgmi diag exits non-zero when a test fails: its output decides, not its status
    failing = parse_node_health(with_exits(plain, {"dcgmi-diag": 226}))
    assert failing.not_run == () and decide_health(**failing.signals()).verdict == "pass"


@pytest.mark.parametrize("rc,how", [(124, "ended by timeout"), (137, "killed")])
def test_a_tool_cut_off_by_its_timeout_could_not_run_and_says_after_how_long(rc, how):
    text = old_output(level=2).replace(f"node={NODE} level=2", f"node={NODE} level=2 timeout=600")
    report = parse_node_health(with_exits(text, {"dcgmi-diag": rc}))
    assert report.timeout == 600 and report.diag is None
    assert [str(n) for n in report.not_run] == [
        f"dcgmi diag: timed out: {how} after 600 s, the level's hard limit (exit {rc})"
    ]
    decision = decide_health(**report.signals())
    assert decision.verdict == "could_not_run" and decision.reason == str(report.not_run[0])


def test_an_output_cut_off_before_a_section_could_not_run():
    text = output()
    cut = text.partition(section_line("nvidia-smi-remap-ecc"))[0]
    report = parse_node_health(cut)
    assert report.memory is None and report.diag is None
    whats = [n.what for n in report.not_run]
    assert whats == [
        "nvidia-smi -q -d ROW_REMAPPER,ECC,PAGE_RETIREMENT",
        "nvidia-smi nvlink -e",
        "dcgmi diag",
        "nvidia-smi --query-gpu=...thermal_slowdown",
    ]
    assert decide_health(**report.signals()).verdict == "could_not_run"


def test_an_unreadable_section_could_not_run():
    text = output()
    head, marker, rest = text.partition(section_line("dcgmi-diag"))
    report = parse_node_health(head + marker + "\nSegmentation fault (core dumped)\n")
    assert report.diag is None
    assert report.not_run[0].what == "dcgmi diag"
    assert report.not_run[0].why.startswith("unreadable: ")
    assert decide_health(**report.signals()).verdict == "could_not_run"


def test_nvlink_printing_nothing_with_exit_0_is_a_gpu_without_nvlink_not_a_check_not_run():
    text = old_output()
    head, marker, rest = text.partition(section_line("nvidia-smi-nvlink"))
    _, nxt, tail = rest.partition(section_line("thermal"))
    no_links = parse_node_health(head + marker + "\ngpufleet-health-exit=0\n" + nxt + tail)
    assert no_links.nvlink is None and no_links.not_run == ()
    assert no_links.problems == (
        "nvidia-smi-nvlink: printed nothing (exit 0): no NVLink on the GPUs",
    )
    assert decide_health(**no_links.signals()).verdict == "pass"
    failed = parse_node_health(head + marker + "\ngpufleet-health-exit=9\n" + nxt + tail)
    assert [str(n) for n in failed.not_run] == ["nvidia-smi nvlink -e: printed nothing"]
