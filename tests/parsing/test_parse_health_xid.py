"""Kernel-log Xid events."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.errors import ParseError
from gpufleet.parsing import XidEvent, parse_xid_lines

DATA = Path(__file__).resolve().parents[1] / "data" / "parsing" / "health"


def test_every_prefix_and_pid_form():
    log = parse_xid_lines((DATA / "xid_mixed_prefixes.log").read_text(encoding="utf-8"))
    assert log.problems == ()
    assert log.events == (
        XidEvent("0000:3b:00", 79, None, None, "GPU has fallen off the bus.", "[ 5107.644336]"),
        XidEvent(
            "0000:cb:00",
            13,
            None,
            None,
            "Graphics SM Warp Exception on (GPC 7, TPC 1, SM 0): Out Of Range Address",
            "[Fri Aug 30 11:43:09 2024]",
        ),
        XidEvent(
            "0000:10:1c",
            63,
            1896,
            None,
            "Row Remapper: New row marked for remapping, reset gpu to activate.",
            "May 18 19:02:39 gpu-node-07",
        ),
        XidEvent(
            "0000:5d:00",
            94,
            2290,
            "python3",
            "Contained: SM (0x1). RST: No, D-RST: No",
            "2025-03-04T10:21:55.120031+00:00 gpu-node-07",
        ),
        XidEvent(
            "0000:01:00",
            31,
            3310,
            "train.py",
            "Ch 00000010, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ "
            "0x7f5e_1f000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
            "Jan 18 11:38:05 gpu-node-08 kernel: [  269.517039]",
        ),
    )
    assert log.codes == (13, 31, 63, 79, 94)


def test_a_clean_log_with_the_driver_loaded_has_no_events():
    log = parse_xid_lines("[    5.1] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.127.08\n")
    assert log.events == () and log.problems == ()


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("NVRM: Xid (PCI:0000:3b:00): 7x, GPU has fallen off the bus.", "'7x' is not a number"),
        ("NVRM: Xid (PCI:0000:3b:00): -79, GPU has fallen off the bus.", "'-79' is not a number"),
        ("NVRM: Xid (PCI:0000:3b:00): 0, nothing", "'0' is not a number in 1..999"),
        ("NVRM: Xid (PCI:0000:3b:00): 123456, huge", "'123456' is not a number"),
        ("NVRM: Xid (PCI:0000:3b:00): 13, pid=-4, name=x, oops", "pid -4 is negative"),
        ("NVRM: Xid (PCI:0000:3b:00): 13, pid=abc, name=x, oops", "pid 'abc' is not a process id"),
        ("NVRM: Xid (somewhere): 13, oops", "without a PCI bus id"),
    ],
)
def test_impossible_values_are_refused(line, reason):
    good = "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."
    log = parse_xid_lines(f"{line}\n{good}\n")
    assert [e.code for e in log.events] == [79]
    (problem,) = log.problems
    assert problem.startswith("line 1: ") and reason in problem, problem


@pytest.mark.parametrize("text", ["", "this is not a kernel log\n", "Xid 79 somewhere\n"])
def test_no_nvrm_line_raises(text):
    with pytest.raises(ParseError, match="no NVRM line"):
        parse_xid_lines(text)
