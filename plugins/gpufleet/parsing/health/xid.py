"""Parse NVIDIA Xid events out of kernel log text (``dmesg``, ``journalctl -k``, syslog).

A function over the text handed in: no I/O. The driver writes one line per event::

    NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus.
    NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception ...
    NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, ...
    NVRM: Xid (0000:01:00): 3, C 00000005 SC 00000007 ...           (old drivers: no "PCI:")

with any prefix before ``NVRM:`` (``[ 5107.644336] ``, ``[Fri Aug 30 11:43:09 2024] ``,
``May 18 19:02:39 host kernel: ``, an ISO timestamp). Per event: the PCI bus id as the driver
writes it (``0000:3b:00``, lower case), the Xid code, the pid and process name when the driver
knew them (``'<unknown>'`` is ``None``), the message, and the prefix before ``NVRM:`` (the
timestamp as logged, or ``None``). What an Xid code means and what to do about it (NVIDIA's
Xid catalog) is not this parser's business.

A line saying ``NVRM: Xid`` that cannot be read (no bus id, a code that is not a decimal number
in 1..999, a negative pid) is refused into ``problems``. Text holding no ``NVRM`` line at all is
not a kernel log of a host with the NVIDIA driver: a :class:`ParseError`. A log with NVRM lines
but no Xid is a clean log: no events.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpufleet.errors import ParseError

__all__ = ["XidEvent", "XidLog", "parse_xid_lines"]

MAX_XID = 999  # NVIDIA's catalog runs to the 150s; a 4-digit code is no Xid
_MAX_PROBLEMS = 16

_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<bus>[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)\):"
    r"\s*(?P<code>[^,\s]+)\s*,?\s*(?P<rest>.*)$"
)
_PID = re.compile(r"^pid=(?P<pid>'<unknown>'|<unknown>|-?\d+|\S+?)\s*(?:,\s*|$)")
_NAME = re.compile(r"^name=(?P<name>[^,]*?)\s*(?:,\s*|$)")


@dataclass(frozen=True, slots=True)
class XidEvent:
    pci_bus: str  # as the driver writes it, lower case: "0000:3b:00"
    code: int
    pid: int | None
    process: str | None
    message: str
    logged_at: str | None = None  # the text before "NVRM:" (timestamp, host), if any


@dataclass(frozen=True, slots=True)
class XidLog:
    events: tuple[XidEvent, ...]
    problems: tuple[str, ...] = ()

    @property
    def codes(self) -> tuple[int, ...]:
        return tuple(sorted({event.code for event in self.events}))


def _prefix(line: str, start: int) -> str | None:
    before = line[:start].strip()
    before = re.sub(r"\s*kernel:\s*$", "", before).strip()
    return before or None


def _read(line: str, match: re.Match[str]) -> XidEvent | str:
    """The event of one ``NVRM: Xid`` line, or why it cannot be one."""
    raw_code = match.group("code")
    if not raw_code.isdigit() or not 1 <= int(raw_code) <= MAX_XID:
        return f"Xid code {raw_code[:16]!r} is not a number in 1..{MAX_XID}"
    rest = match.group("rest").strip()
    pid: int | None = None
    process: str | None = None
    found = _PID.match(rest)
    if found:
        value = found.group("pid")
        if value.lstrip("-").isdigit():
            if value.startswith("-"):
                return f"pid {value[:16]} is negative"
            pid = int(value)
        elif "unknown" not in value:
            return f"pid {value[:16]!r} is not a process id"
        rest = rest[found.end() :]
        named = _NAME.match(rest)
        if named:
            name = named.group("name").strip()
            process = None if not name or "unknown" in name else name
            rest = rest[named.end() :]
    return XidEvent(
        pci_bus=match.group("bus").lower(),
        code=int(raw_code),
        pid=pid,
        process=process,
        message=rest.strip(),
        logged_at=_prefix(line, match.start()),
    )


def parse_xid_lines(text: str) -> XidLog:
    """Every Xid event in kernel log text, in the order logged."""
    if isinstance(text, bytes | bytearray):
        text = text.decode("utf-8", errors="replace")
    if "NVRM" not in text:
        raise ParseError(
            "no NVRM line found (expected kernel log lines like 'NVRM: Xid (PCI:...)')"
        )
    events: list[XidEvent] = []
    problems: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if "NVRM: Xid" not in line:
            continue
        match = _XID.search(line)
        if match is None:
            problems.append(
                f"line {number}: an Xid line without a PCI bus id: {line.strip()[:80]!r}"
            )
            continue
        read = _read(line, match)
        if isinstance(read, str):
            problems.append(f"line {number}: {read}")
        else:
            events.append(read)
    return XidLog(tuple(events), tuple(problems[:_MAX_PROBLEMS]))
