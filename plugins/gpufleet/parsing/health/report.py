"""Read what one node's GPU health check prints (``include/manifests/gpu-health.yaml.j2``).

Design: docs/design/gpu-health-parsers.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gpufleet.errors import ParseError
from gpufleet.parsing.health.dcgm_diag import parse_dcgm_diag
from gpufleet.parsing.health.not_run import NotRun
from gpufleet.parsing.health.nvidia_smi import parse_nvidia_smi_remap_ecc
from gpufleet.parsing.health.nvlink import parse_nvlink_errors
from gpufleet.parsing.health.xid import parse_xid_lines

__all__ = ["MARKER", "SECTIONS", "NodeHealthReport", "parse_node_health", "section_line"]

MARKER = "==> gpufleet-health: {} <=="
SECTIONS = ("node", "dmesg", "nvidia-smi-remap-ecc", "nvidia-smi-nvlink", "thermal", "dcgmi-diag")
_MARKER = re.compile(r"^==> gpufleet-health: (?P<section>[a-z-]+) <==\s*$")
_NODE = re.compile(r"^node=(?P<node>\S+) level=(?P<level>[1-4])(?: timeout=(?P<timeout>\d+))?\s*$")
_EXIT = re.compile(r"^gpufleet-health-exit=(?P<rc>\d+)\s*$")
TIMED_OUT = frozenset({124, 137})  # timeout(1)'s own exit; SIGKILL (128 + 9)
_ACTIVE = {"active": True, "not active": False}
# what each section's tool is, as a NotRun names it
TOOLS = {
    "dmesg": "the kernel log (dmesg)",
    "nvidia-smi-remap-ecc": "nvidia-smi -q -d ROW_REMAPPER,ECC,PAGE_RETIREMENT",
    "nvidia-smi-nvlink": "nvidia-smi nvlink -e",
    "thermal": "nvidia-smi --query-gpu=...thermal_slowdown",
    "dcgmi-diag": "dcgmi diag",
}


def section_line(section: str) -> str:
    """The marker line that opens ``section`` (one of :data:`SECTIONS`)."""
    if section not in SECTIONS:
        raise ValueError(f"unknown health section {section!r} (known: {', '.join(SECTIONS)})")
    return MARKER.format(section)


@dataclass(frozen=True)
class NodeHealthReport:
    """One node's parsed signals, as ``decide_health`` takes them (``None``: not read)."""

    node: str | None
    level: int | None
    xid: Any = None
    memory: Any = None
    nvlink: Any = None
    diag: Any = None
    throttling: bool = False
    problems: tuple[str, ...] = ()
    not_run: tuple[NotRun, ...] = ()  # sections missing, timed out or unreadable
    timeout: int | None = None  # the level's hard limit, from the node line (seconds)
    exits: tuple[tuple[str, int], ...] = ()  # (section, the tool's exit status) as printed

    def signals(self) -> dict[str, Any]:
        """The keyword arguments of ``decide_health``."""
        return {
            "xid": self.xid,
            "memory": self.memory,
            "nvlink": self.nvlink,
            "diag": self.diag,
            "diag_level": self.level,
            "throttling": self.throttling,
            "not_run": self.not_run,
        }


def _sections(text: str) -> tuple[dict[str, str], dict[str, int]]:
    """Each section's text, and the exit status its last ``gpufleet-health-exit=`` line gave
    (the line taken off the text)."""
    found: dict[str, list[str]] = {}
    exits: dict[str, int] = {}
    current: list[str] | None = None
    name = ""
    for line in text.splitlines():
        m = _MARKER.match(line)
        if m:
            name = m.group("section")
            current = found.setdefault(name, [])
            continue
        if current is None:
            continue
        if rc := _EXIT.match(line):
            exits[name] = int(rc.group("rc"))
            continue
        current.append(line)
    return {k: "\n".join(v).strip("\n") + "\n" for k, v in found.items()}, exits


def _thermal(text: str, problems: list[str]) -> bool:
    throttling = False
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = [f.strip().lower() for f in line.split(",")]
        if len(fields) != 3 or not fields[0].isdigit():
            problems.append(f"thermal line {number}: expected 'index, hw, sw', got {line!r:.60}")
            continue
        for value in fields[1:]:
            if value not in _ACTIVE:
                problems.append(
                    f"thermal line {number}: {value!r:.30} is neither 'Active' nor 'Not Active'"
                )
            elif _ACTIVE[value]:
                throttling = True
    return throttling


def _timed_out(section: str, rc: int, timeout: int | None) -> NotRun:
    """A tool its ``timeout`` ended; the node line's limit is ``dcgmi diag``'s (the level's),
    the quick tools run under their own."""
    if timeout and section == "dcgmi-diag":
        limit = f"after {timeout} s, the level's hard limit"
    else:
        limit = "at its hard limit"
    how = "ended by timeout" if rc == 124 else "killed"
    return NotRun(TOOLS[section], f"timed out: {how} {limit} (exit {rc})")


def parse_node_health(text: str) -> NodeHealthReport:
    """One node's health check output into its signals. Raises :class:`ParseError` when the
    text holds no ``node`` section (not a gpufleet health check's output)."""
    sections, exits = _sections(text)
    head = _NODE.match(sections.get("node", "").strip())
    if head is None:
        raise ParseError(
            "not a gpufleet health check's output: no '"
            + section_line("node")
            + "' section with 'node=<name> level=<1-4>' (optionally ' timeout=<seconds>')"
        )
    timeout = int(head.group("timeout")) if head.group("timeout") else None
    problems: list[str] = []
    not_run: list[NotRun] = []
    parsed: dict[str, Any] = {}

    def missing(section: str, why: str) -> None:
        problems.append(f"{section}: {why}")
        not_run.append(NotRun(TOOLS[section], why))

    for key, section, parser in (
        ("xid", "dmesg", parse_xid_lines),
        ("memory", "nvidia-smi-remap-ecc", parse_nvidia_smi_remap_ecc),
        ("nvlink", "nvidia-smi-nvlink", parse_nvlink_errors),
        ("diag", "dcgmi-diag", parse_dcgm_diag),
    ):
        body = sections.get(section)
        if exits.get(section) in TIMED_OUT:
            problems.append(f"{section}: timed out (exit {exits[section]})")
            not_run.append(_timed_out(section, exits[section], timeout))
            continue
        if body is None:
            missing(section, "not in the output (cut off before it)")
            continue
        if not body.strip():
            if section == "nvidia-smi-nvlink" and exits.get(section) == 0:
                # the tool ran and had nothing to say: GPUs without NVLink (a PCIe model)
                problems.append(f"{section}: printed nothing (exit 0): no NVLink on the GPUs")
                continue
            missing(section, "printed nothing")
            continue
        try:
            parsed[key] = parser(body)
        except ParseError as e:
            missing(section, f"unreadable: {e}")
            continue
        problems += [f"{section}: {p}" for p in getattr(parsed[key], "problems", ())]
    throttling = False
    if exits.get("thermal") in TIMED_OUT:
        problems.append(f"thermal: timed out (exit {exits['thermal']})")
        not_run.append(_timed_out("thermal", exits["thermal"], timeout))
    elif "thermal" not in sections:
        missing("thermal", "not in the output (cut off before it)")
    elif not sections["thermal"].strip():
        missing("thermal", "printed nothing")
    else:
        before = len(problems)
        throttling = _thermal(sections["thermal"], problems)
        not_run += [NotRun(TOOLS["thermal"], p) for p in problems[before:]]
    return NodeHealthReport(
        node=head.group("node"),
        level=int(head.group("level")),
        throttling=throttling,
        problems=tuple(problems),
        not_run=tuple(not_run),
        timeout=timeout,
        exits=tuple(sorted(exits.items())),
        **parsed,
    )
