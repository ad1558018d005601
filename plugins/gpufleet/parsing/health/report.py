"""Read what one node's GPU health check prints (``include/manifests/gpu-health.yaml.j2``).

A function over the text handed in: no I/O. The check's pod runs each tool in turn and prints
each one's output under a marker line ``==> gpufleet-health: <section> <==``:

- ``node``: ``node=<node name> level=<dcgmi diag run level>``;
- ``dmesg``: the kernel log's ``NVRM`` lines (the driver's load line and its Xid events);
- ``nvidia-smi-remap-ecc``: ``nvidia-smi -q -d ROW_REMAPPER,ECC``;
- ``nvidia-smi-nvlink``: ``nvidia-smi nvlink -e``;
- ``thermal``: ``nvidia-smi --query-gpu=index,clocks_event_reasons.hw_thermal_slowdown,
  clocks_event_reasons.sw_thermal_slowdown --format=csv,noheader``, one line per GPU
  (``0, Not Active, Not Active``);
- ``dcgmi-diag``: ``dcgmi diag -r <level> -j``.

Each section goes to its own parser (``gpufleet.parsing.health``); a section that is missing or
cannot be read is ``None`` with the reason in ``problems``, so the domain decides on what was
read (``decide_health``: nothing read at all is a node for a person). A thermal line whose
fields are neither ``Active`` nor ``Not Active`` is refused into ``problems``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gpufleet.errors import ParseError
from gpufleet.parsing.health.dcgm import parse_dcgm_diag
from gpufleet.parsing.health.nvidia_smi import parse_nvidia_smi_remap_ecc
from gpufleet.parsing.health.nvlink import parse_nvlink_errors
from gpufleet.parsing.health.xid import parse_xid_lines

__all__ = ["MARKER", "SECTIONS", "NodeHealthReport", "parse_node_health", "section_line"]

MARKER = "==> gpufleet-health: {} <=="
SECTIONS = ("node", "dmesg", "nvidia-smi-remap-ecc", "nvidia-smi-nvlink", "thermal", "dcgmi-diag")
_MARKER = re.compile(r"^==> gpufleet-health: (?P<section>[a-z-]+) <==\s*$")
_NODE = re.compile(r"^node=(?P<node>\S+) level=(?P<level>[1-4])\s*$")
_ACTIVE = {"active": True, "not active": False}


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

    def signals(self) -> dict[str, Any]:
        """The keyword arguments of ``decide_health``."""
        return {
            "xid": self.xid,
            "memory": self.memory,
            "nvlink": self.nvlink,
            "diag": self.diag,
            "diag_level": self.level,
            "throttling": self.throttling,
        }


def _sections(text: str) -> dict[str, str]:
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        m = _MARKER.match(line)
        if m:
            current = found.setdefault(m.group("section"), [])
            continue
        if current is not None:
            current.append(line)
    return {k: "\n".join(v).strip("\n") + "\n" for k, v in found.items()}


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


def parse_node_health(text: str) -> NodeHealthReport:
    """One node's health check output into its signals. Raises :class:`ParseError` when the
    text holds no ``node`` section (not a gpufleet health check's output)."""
    sections = _sections(text)
    head = _NODE.match(sections.get("node", "").strip())
    if head is None:
        raise ParseError(
            "not a gpufleet health check's output: no '"
            + section_line("node")
            + "' section with 'node=<name> level=<1-4>'"
        )
    problems: list[str] = []
    parsed: dict[str, Any] = {}
    for key, section, parser in (
        ("xid", "dmesg", parse_xid_lines),
        ("memory", "nvidia-smi-remap-ecc", parse_nvidia_smi_remap_ecc),
        ("nvlink", "nvidia-smi-nvlink", parse_nvlink_errors),
        ("diag", "dcgmi-diag", parse_dcgm_diag),
    ):
        body = sections.get(section)
        if body is None or not body.strip():
            problems.append(f"{section}: not in the output")
            continue
        try:
            parsed[key] = parser(body)
        except ParseError as e:
            problems.append(f"{section}: {e}")
            continue
        problems += [f"{section}: {p}" for p in getattr(parsed[key], "problems", ())]
    throttling = _thermal(sections.get("thermal", ""), problems)
    return NodeHealthReport(
        node=head.group("node"),
        level=int(head.group("level")),
        throttling=throttling,
        problems=tuple(problems),
        **parsed,
    )
