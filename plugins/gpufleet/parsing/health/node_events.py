"""The Xid codes a node's Kubernetes Event or condition carries, in the dialects of the agents
that write them (samples with their sources: tests/data/events/):

- the EKS node monitoring agent: reason ``NvidiaXID<code>Error`` / ``NvidiaXID<code>Warning``,
  the driver's line as the message;
- NVSentinel's syslog health monitor: ``ErrorCode:<code> PCI:<bus> <driver line> Recommended
  Action=<action>;``;
- any agent that passes on the driver's ``NVRM: Xid (PCI:…): <code>, …`` line.

And whether an Event announces host maintenance (aws-node-termination-handler's
``ScheduledEvent``)."""

from __future__ import annotations

import re

from gpufleet.parsing.health.xid import parse_xid_lines

_REASON = re.compile(r"NvidiaXID(\d{1,4})(?:Error|Warning)")
_ERROR_CODE = re.compile(r"\bErrorCode:(\d{1,4})\b")
MAINTENANCE_REASONS = frozenset({"ScheduledEvent"})


def xid_codes(reason: str, message: str) -> list[int]:
    """Every Xid code named by an Event's (or a condition's) ``reason`` and ``message``, in
    order, each once."""
    codes = [int(m) for m in _REASON.findall(reason or "")]
    codes += [int(m) for m in _ERROR_CODE.findall(message or "")]
    if "NVRM" in (message or ""):  # the driver's own line (the parser refuses text without one)
        codes += [e.code for e in parse_xid_lines(message).events]
    return list(dict.fromkeys(codes))


def announces_maintenance(reason: str) -> bool:
    """An Event that announces host maintenance (aws-node-termination-handler's EC2 scheduled
    event)."""
    return (reason or "") in MAINTENANCE_REASONS
