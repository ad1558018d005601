"""Parse NVIDIA Xid events out of kernel log text (``dmesg``, ``journalctl -k``, syslog).

Design: docs/design/gpu-health-parsers.md.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from gpufleet.errors import ParseError

__all__ = ["UNKNOWN_BUS", "XidEvent", "XidLog", "parse_xid_lines"]

MAX_XID = 999  # NVIDIA's catalog runs to the 150s; a 4-digit code is no Xid
_MAX_PROBLEMS = 16

_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<bus>[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)"
    r"(?P<inside>[^)]*)\):\s*(?P<code>[^,\s]+)\s*,?\s*(?P<rest>.*)$"
)
_MIG = re.compile(r"^(?:\s+GPU-I:(?P<gi>\d{1,3}))?(?:\s+GPU-CI:(?P<ci>\d{1,3}))?\s*$")
_JSON_MESSAGE = ("MESSAGE", "message", "log", "msg")
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
    gpu_instance: int | None = None  # MIG: "GPU-I:05" -> 5; None on a GPU without MIG
    compute_instance: int | None = None  # MIG: "GPU-CI:02" -> 2, when the driver names one


@dataclass(frozen=True, slots=True)
class XidLog:
    events: tuple[XidEvent, ...]
    problems: tuple[str, ...] = ()
    # GPUs the driver could not initialise ("RmInitAdapter failed"): (bus or "unknown", line)
    init_failures: tuple[tuple[str, str], ...] = ()

    @property
    def codes(self) -> tuple[int, ...]:
        return tuple(sorted({event.code for event in self.events}))


def _prefix(line: str, start: int) -> str | None:
    before = line[:start].strip()
    before = re.sub(r"\s*kernel:\s*$", "", before).strip()
    return before or None


def _read(line: str, match: re.Match[str]) -> XidEvent | str:
    """The event of one ``NVRM: Xid`` line, or why it cannot be one."""
    mig = _MIG.match(match.group("inside"))
    if mig is None:
        return f"{match.group('inside').strip()[:40]!r} after the bus id is no MIG instance"
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
        gpu_instance=int(mig.group("gi")) if mig.group("gi") else None,
        compute_instance=int(mig.group("ci")) if mig.group("ci") else None,
    )


UNKNOWN_BUS = "unknown"
DRIVER_FALLEN = "GPU has fallen off the bus (the driver's message, no Xid line)"
_DRIVER_GPU = re.compile(
    r"NVRM: (?:The NVIDIA )?GPU (?:at )?(?:PCI:)?"
    r"(?P<bus>[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.[0-7])?"
)
# "fallen off the bus" (os-interface's message), "GPU lost from the bus [NV_ERR_GPU_IS_LOST]"
# (an RM assertion, naming no bus)
_FALLEN = re.compile(r"fallen\s+off\s+the\s+bus|lost\s+from\s+the\s+bus|NV_ERR_GPU_IS_LOST", re.I)
_INIT_FAILED = re.compile(r"\b(?:RmInitAdapter|rm_init_adapter) failed", re.IGNORECASE)
_WRAP_LINES = 3  # a wrapped message names its GPU at most this many NVRM lines before


def _driver_message(
    line: str, recent_bus: str | None, number: int
) -> tuple[str, XidEvent | tuple[str, str]] | None:
    """A "fallen off the bus" or "RmInitAdapter failed" line that is not an Xid line, as an
    event of code 79 or an init failure; None for any other line."""
    fallen = _FALLEN.search(line)
    failed = _INIT_FAILED.search(line) if fallen is None else None
    if fallen is None and failed is None:
        return None
    named = _DRIVER_GPU.search(line)
    bus = (named.group("bus").lower() if named else recent_bus) or UNKNOWN_BUS
    nvrm = line.find("NVRM:")
    if failed is not None:
        return "init", (bus, line.strip()[:200])
    return "event", XidEvent(
        pci_bus=bus,
        code=79,
        pid=None,
        process=None,
        message=f"{DRIVER_FALLEN} (line {number})",
        logged_at=_prefix(line, nvrm) if nvrm >= 0 else None,
    )


def _unwrap(line: str) -> str:
    """The message of a line a log collector wrapped as a JSON object (``journalctl -o json``'s
    ``MESSAGE``, Fluent Bit's ``log``, Vector's ``message``); any other line as it is."""
    stripped = line.strip()
    if not (stripped.startswith("{") and stripped.endswith("}")):
        return line
    try:
        record = json.loads(stripped)
    except ValueError:
        return line
    if isinstance(record, dict):
        for key in _JSON_MESSAGE:
            if isinstance(record.get(key), str):
                return record[key].rstrip("\n")
    return line


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
    init_failures: dict[str, str] = {}
    fallen: set[str] = set()  # GPUs already reported fallen off the bus by the driver's message
    recent_bus: str | None = None  # the GPU the last few NVRM lines named (a wrapped message)
    since_named = _WRAP_LINES + 1
    for number, line in enumerate(text.splitlines(), start=1):
        if "NVRM" not in line:
            continue
        line = _unwrap(line)
        if "NVRM: Xid" not in line:
            named = _DRIVER_GPU.search(line)
            if named:
                recent_bus, since_named = named.group("bus").lower(), 0
            else:
                since_named += 1
            said = _driver_message(line, recent_bus if since_named <= _WRAP_LINES else None, number)
            if said is None:
                continue
            kind, found = said
            if kind == "init" and isinstance(found, tuple):
                init_failures.setdefault(found[0], found[1])
            elif isinstance(found, XidEvent) and found.pci_bus not in fallen:
                fallen.add(found.pci_bus)
                events.append(found)
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
    # the driver prints its own message after an Xid 79 line: one event per GPU
    logged = {e.pci_bus for e in events if e.code == 79 and not e.message.startswith(DRIVER_FALLEN)}
    events = [
        e for e in events if not (e.pci_bus in logged and e.message.startswith(DRIVER_FALLEN))
    ]
    failures = tuple(init_failures.items())[:64]
    return XidLog(tuple(events), tuple(problems[:_MAX_PROBLEMS]), failures)
