"""What the event path reads at an interval, reduced to what the response decides on: a node's
dcgm-exporter metrics, decided by the nightly's passive rule (``domain.health.decide_passive``,
through :func:`exporter_decision`, which the nightly's ``read_exporter`` calls too: one rule,
two callers), and its EC2 instance status. Each reading is a small JSON-able dict carrying a
``key`` that names the values it was taken from (what the response coalesces on: the same
values read again record nothing). Design: docs/events.md.

A service helper: parses and decides, no I/O.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpufleet.domain.events import InstanceStatus, ScheduledEvent, iso_time
from gpufleet.domain.health import HealthAction, HealthDecision, decide_passive
from gpufleet.domain.health.passive import PASSIVE_SIGNALS
from gpufleet.errors import ParseError
from gpufleet.parsing.health import parse_dcgm_exporter

KEY_CHARS = 16  # of a reading's key: a hash's first characters


def key_of(value: Any) -> str:
    """A short stable hash of a JSON-able value."""
    text = json.dumps(value, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:KEY_CHARS]


@dataclass(frozen=True)
class ExporterRead:
    """One node's exporter text read: the passive decision (None: nothing to decide on,
    ``why`` says so) and what could not be read of it (``problems``)."""

    decision: HealthDecision | None
    problems: tuple[str, ...] = ()
    why: str | None = None


def exporter_decision(text: str, node: str) -> ExporterRead:
    """The nightly's passive rule over what ``node``'s dcgm-exporter served."""
    try:
        report = parse_dcgm_exporter(text)
    except ParseError as e:
        why = f"what {node}'s dcgm-exporter served is not its metrics ({e})"
        return ExporterRead(None, (), why)
    decision = decide_passive(report)
    if decision is None:
        served = ", ".join(PASSIVE_SIGNALS.values())
        return ExporterRead(
            None, report.problems, f"{node}'s dcgm-exporter serves none of {served}"
        )
    return ExporterRead(decision, report.problems)


def exporter_reading(text: str, node: str) -> dict[str, Any] | None:
    """One node's reading for the event path: None when healthy (nothing to hand on); the
    decision (``action``, ``reason``, ``key``: a hash of the action and every finding that asks
    for one, counts included: a counter that moves is a new reading, one that stays is not);
    or ``unknown`` (no decision: never healthy)."""
    read = exporter_decision(text, node)
    if read.decision is None:
        return unknown_reading(read.why or "no reading", "no-fields")
    decision = read.decision
    if decision.action is HealthAction.HEALTHY:
        return None
    if decision.action is HealthAction.COULD_NOT_RUN:
        return unknown_reading(decision.reason, "could-not-run")
    found = sorted(f.reason for f in decision.findings if f.action is not HealthAction.HEALTHY)
    return {
        "action": decision.action.value,
        "reason": decision.reason,
        "key": key_of([decision.action.value, found]),
    }


def unknown_reading(why: str, kind: str) -> dict[str, Any]:
    """A node whose exporter gave no reading (``kind``: ``no-pod``, ``not-running``,
    ``unreadable``, ``no-fields``, ...): unknown, keyed by its kind (a message that names a
    pod or a time is not a new fact)."""
    return {"unknown": why, "key": f"unknown:{kind}"}


# --- EC2 ----------------------------------------------------------------------------------------


def _time(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def instance_reading(status: InstanceStatus) -> dict[str, Any] | None:
    """An instance's status as the batch carries it; None when there is nothing to say (both
    checks not impaired, no event ahead)."""
    events = [e for e in status.events if not e.done]
    impaired = "impaired" in (status.instance_status, status.system_status)
    if not impaired and not events:
        return None
    return {
        "instance_id": status.instance_id,
        "state": status.state,
        "instance_status": status.instance_status,
        "system_status": status.system_status,
        "instance_impaired_since": _time(status.instance_impaired_since),
        "system_impaired_since": _time(status.system_impaired_since),
        "zone": status.zone,
        "events": [
            {
                "code": e.code,
                "description": e.description,
                "event_id": e.event_id,
                "not_before": _time(e.not_before),
                "not_after": _time(e.not_after),
                "not_before_deadline": _time(e.not_before_deadline),
            }
            for e in events
        ],
    }


def instance_of(fields: Mapping[str, Any]) -> InstanceStatus:
    """The ``InstanceStatus`` a batch's instance reading holds."""
    return InstanceStatus(
        instance_id=str(fields.get("instance_id") or ""),
        state=str(fields.get("state") or ""),
        instance_status=str(fields.get("instance_status") or ""),
        system_status=str(fields.get("system_status") or ""),
        instance_impaired_since=iso_time(fields.get("instance_impaired_since")),
        system_impaired_since=iso_time(fields.get("system_impaired_since")),
        zone=str(fields.get("zone") or ""),
        events=tuple(
            ScheduledEvent(
                code=str(e.get("code") or ""),
                description=str(e.get("description") or ""),
                event_id=str(e.get("event_id") or ""),
                not_before=iso_time(e.get("not_before")),
                not_after=iso_time(e.get("not_after")),
                not_before_deadline=iso_time(e.get("not_before_deadline")),
            )
            for e in fields.get("events") or ()
            if isinstance(e, Mapping)
        ),
    )
