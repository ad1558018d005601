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


@pytest.mark.parametrize(
    ("line", "instances"),
    [
        # NVIDIA's A100 memory error management guide, and the driver's comment above it
        (
            "NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel "
            "(0x9). RST: No, D-RST: No",
            (5, None),
        ),
        # the driver's format string: "PCI:%04x:%02x:%02x GPU-I:%02u GPU-CI:%02u"
        (
            "[ 8012.44] NVRM: Xid (PCI:0000:3b:00 GPU-I:01 GPU-CI:02): 13, pid=9, name=a, "
            "Graphics Exception",
            (1, 2),
        ),
        (
            "NVRM: Xid (PCI:0000:01:00): 94, pid=7062, Contained: CE User Channel (0x9).",
            (None, None),
        ),
    ],
)
def test_mig_lines_keep_their_gpu_and_compute_instance(line, instances):
    log = parse_xid_lines(line + "\n")
    assert log.problems == ()
    (event,) = log.events
    assert event.pci_bus in ("0000:01:00", "0000:3b:00")
    assert (event.gpu_instance, event.compute_instance) == instances


def test_something_else_inside_the_parentheses_is_refused():
    log = parse_xid_lines("NVRM: Xid (PCI:0000:01:00 VF:03): 94, pid=1, Contained: SM (0x1).\n")
    assert log.events == ()
    (problem,) = log.problems
    assert problem.startswith("line 1: ") and "'VF:03'" in problem


@pytest.mark.parametrize(
    ("line", "logged_at"),
    [
        (
            "[Thu Feb 23 16:24:18 2025] NVRM: Xid (PCI:0000:9b:00): 79, GPU has fallen off the bus",
            "[Thu Feb 23 16:24:18 2025]",
        ),
        ("kernel: NVRM: Xid (PCI:0000:9b:00): 79, GPU has fallen off the bus.", None),
        (
            "2025-03-04T10:21:55.120031+00:00 gpu-07 kernel: NVRM: Xid (PCI:0000:9b:00): 79, x",
            "2025-03-04T10:21:55.120031+00:00 gpu-07",
        ),
        (
            "2025-03-04T10:21:55.120031Z stdout F [ 5107.64] NVRM: Xid (PCI:0000:9b:00): 79, x",
            "2025-03-04T10:21:55.120031Z stdout F [ 5107.64]",
        ),  # a pod tailing dmesg, CRI log
        (
            "kern  :warn  : [ 5107.644336] NVRM: Xid (PCI:0000:9b:00): 79, x",
            "kern  :warn  : [ 5107.644336]",
        ),  # dmesg -x
    ],
)
def test_every_prefix_is_kept_as_when_it_was_logged(line, logged_at):
    (event,) = parse_xid_lines(line + "\n").events
    assert (event.code, event.pci_bus, event.logged_at) == (79, "0000:9b:00", logged_at)


@pytest.mark.parametrize(
    "line",
    [
        # journalctl -k -o json
        '{"__REALTIME_TIMESTAMP":"1700000000000000","_TRANSPORT":"kernel","MESSAGE":"NVRM: Xid '
        '(PCI:0000:3b:00 GPU-I:02): 43, pid=77, name=python3, Ch 00000008"}',
        # a log collector's record (Fluent Bit "log", Vector "message")
        '{"log":"NVRM: Xid (PCI:0000:3b:00 GPU-I:02): 43, pid=77, name=python3, Ch 00000008\\n",'
        '"stream":"stdout"}',
    ],
)
def test_a_line_wrapped_as_json_is_read_through_its_message(line):
    log = parse_xid_lines(line + "\n")
    assert log.problems == ()
    (event,) = log.events
    assert (event.code, event.pci_bus, event.gpu_instance, event.pid) == (43, "0000:3b:00", 2, 77)
    assert event.message == "Ch 00000008"


# ------------------------------------------------- the driver's own messages, with no Xid line


def test_a_gpu_fallen_off_the_bus_with_no_xid_line_is_an_xid_79_on_that_gpu():
    """NVIDIA/NVSentinel#155: the message wrapped over three NVRM lines names the GPU on the
    first; NVSentinel and gpud read it as Xid 79."""
    log = parse_xid_lines(
        "[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0\n"
        "               NVRM: (PCI ID: 10de:26b5) installed in this system has\n"
        "               NVRM: fallen off the bus and is not responding to commands.\n"
    )
    assert [(e.code, e.pci_bus) for e in log.events] == [(79, "0000:b3:00")]
    assert "no Xid line" in log.events[0].message


def test_the_drivers_message_after_an_xid_79_is_the_same_event():
    log = parse_xid_lines(
        "[ 5107.644336] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n"
        "[ 5107.644340] NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.\n"
    )
    assert [(e.code, e.pci_bus) for e in log.events] == [(79, "0000:3b:00")]


def test_a_lost_gpu_the_log_does_not_name_is_still_lost():
    log = parse_xid_lines(
        "NVRM: The NVIDIA GPU ... has fallen off the bus and is not responding to commands\n"
    )
    assert [(e.code, e.pci_bus) for e in log.events] == [(79, "unknown")]


def test_a_bus_named_long_before_is_not_the_lost_gpu():
    lines = ["NVRM: GPU 0000:3b:00.0: loading"] + ["NVRM: something else"] * 4
    log = parse_xid_lines("\n".join([*lines, "NVRM: GPU has fallen off the bus."]) + "\n")
    assert [(e.code, e.pci_bus) for e in log.events] == [(79, "unknown")]


def test_a_gpu_the_driver_could_not_initialise_is_an_init_failure():
    log = parse_xid_lines(
        "[  594.281578] NVRM: GPU 0000:04:01.0: RmInitAdapter failed! (0x11:0x45:2525)\n"
        "[  594.281732] NVRM: GPU 0000:04:01.0: rm_init_adapter failed, device minor number 0\n"
    )
    assert log.events == ()
    assert [bus for bus, _ in log.init_failures] == ["0000:04:01"]
    assert "RmInitAdapter failed!" in log.init_failures[0][1]
