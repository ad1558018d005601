"""One node's GPU health check output (parsing.health.report): each section to its parser,
what could not be read named in problems, text that is no health check refused."""

from __future__ import annotations

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
    assert report.problems == ("nvidia-smi-nvlink: not in the output",)
    # what was read still decides
    assert decide_health(**report.signals()).action is HealthAction.REBOOT


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
    assert len(report.problems) == 4
    assert decide_health(**report.signals()).action is HealthAction.NEEDS_HUMAN


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
