"""Signals: what one change a cluster reported means for a node, by the same rules as the
nightly's passive signals. Pure: no I/O. Each :class:`Signal` carries the :class:`Response` it
asks for (quarantine, admit, forget, note). The sources, the rules and where each comes from:
docs/events.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

from gpufleet.domain.events import InstanceStatus, NodeCondition, later_version
from gpufleet.domain.health.catalog import SEVERITY, A, HealthAction
from gpufleet.domain.health.decide import xid_finding
from gpufleet.domain.inputs import shown

# GKE's node-health prediction: the key Google's page documents (gke.google.com/), and the
# cloud.google.com/ spelling some of Google's pages use
PREDICTION_LABELS = (
    "gke.google.com/recommended-to-run-large-training-workload",
    "cloud.google.com/recommended-to-run-large-training-workload",
)
PREDICTION_LABEL = PREDICTION_LABELS[0]
MAINTENANCE_LABEL = "cloud.google.com/scheduled-maintenance-time"

# Condition type -> the status that means a problem. EKS node monitoring agent (its "*Ready"
# conditions, False when it found a problem); Node Problem Detector's default monitors
# (KernelDeadlock, ReadonlyFilesystem, ... True when the problem is present).
PROBLEM_CONDITIONS: dict[str, str] = {
    "AcceleratedHardwareReady": "False",
    "ContainerRuntimeReady": "False",
    "KernelReady": "False",
    "NetworkingReady": "False",
    "StorageReady": "False",
    "KernelDeadlock": "True",
    "ReadonlyFilesystem": "True",
    "FrequentKubeletRestart": "True",
    "FrequentContainerdRestart": "True",
    "GpuUnhealthy": "True",
    # NVSentinel's health monitors through its platform connector (a fatal Xid)
    "SysLogsXIDError": "True",
}


class Response(StrEnum):
    """What a signal asks for, least to most urgent (the most urgent of a node's wins)."""

    NOTE = "note"
    LIFT = "lift"  # take off the hold of a node back from NotReady that did not reboot
    FORGET = "forget"
    HOLD = "hold"  # taint a NotReady node validation-pending, no session: it may come back rebooted
    ADMIT = "admit"
    QUARANTINE = "quarantine"


RANK = {r: i for i, r in enumerate(Response)}


class Source(StrEnum):
    XID = "xid"
    CONDITION = "condition"
    PREDICTION = "prediction"
    MAINTENANCE = "maintenance"
    LIFECYCLE = "lifecycle"
    EXPORTER = "exporter"
    EC2 = "ec2"


@dataclass(frozen=True)
class Signal:
    """One node's one fact and what it asks for. ``what`` names it within its source (an Xid
    code, a condition type, ``appeared``/``rebooted``/``replaced``/``gone``/``uncordoned``);
    (node, source, what) is the coalescing key. ``action`` is NVIDIA's for a GPU-health signal;
    ``count`` how many reports were coalesced into it; ``version`` the watch's resource
    version it came with (what the response acknowledges)."""

    cluster: str
    node: str
    source: Source
    what: str
    response: Response
    reason: str
    observed_at: datetime
    pool: str | None = None
    action: HealthAction | None = None
    count: int = 1
    version: str | None = None

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.cluster, self.node, self.source.value, self.what)

    @property
    def bad(self) -> bool:
        """Evidence against the node's health: what the gate weighs against a validation."""
        return self.response is Response.QUARANTINE


@dataclass(frozen=True)
class _Xid:
    code: int
    message: str = ""


def xid_signal(
    cluster: str,
    node: str,
    codes: Sequence[int],
    message: str,
    at: datetime,
    pool: str | None = None,
    gpu: str = "a GPU",
) -> Signal | None:
    """The signal of the Xids one event reported on ``node`` (``codes``: parsed from the
    driver's lines by the caller; ``message`` the event's text, for Xid 154's recovery action);
    None when there are no codes. The most severe code decides."""
    if not codes:
        return None
    found = []
    for code in dict.fromkeys(codes):
        finding = xid_finding(_Xid(code, message), gpu, set(codes) - {code})
        if finding is not None:
            found.append((code, finding))
    if not found:
        said = ", ".join(str(c) for c in dict.fromkeys(codes))
        return Signal(
            cluster, node, Source.XID, said, Response.NOTE, f"Xid {said}: no action", at, pool
        )
    code, worst = max(found, key=lambda cf: SEVERITY[cf[1].action])
    what = str(code)
    response = Response.NOTE if worst.action is A.HEALTHY else Response.QUARANTINE
    return Signal(
        cluster, node, Source.XID, what, response, worst.reason, at, pool, action=worst.action
    )


def _problem(condition: NodeCondition) -> bool:
    bad = PROBLEM_CONDITIONS.get(condition.type)
    return bad is not None and condition.status == bad


def condition_signals(
    cluster: str,
    node: str,
    before: Iterable[NodeCondition],
    after: Iterable[NodeCondition],
    at: datetime,
    pool: str | None = None,
) -> list[Signal]:
    """The signals of a node's conditions changing from ``before`` to ``after``: a known
    problem condition entering its problem status quarantines; one leaving it is a note (the
    node stays out until its retest passes); other changes say nothing."""
    was = {c.type: c for c in before}
    out: list[Signal] = []
    for cond in after:
        old = was.get(cond.type)
        if old is not None and old.status == cond.status:
            continue
        detail = f" ({cond.reason}: {cond.message})" if cond.reason or cond.message else ""
        if _problem(cond):
            said = f"condition {cond.type}={cond.status}{detail}"
            out.append(
                Signal(
                    cluster,
                    node,
                    Source.CONDITION,
                    cond.type,
                    Response.QUARANTINE,
                    said,
                    at,
                    pool,
                    action=A.NEEDS_HUMAN,
                )
            )
        elif old is not None and _problem(old):
            said = f"condition {cond.type} recovered ({cond.status}); out until its retest passes"
            out.append(
                Signal(cluster, node, Source.CONDITION, cond.type, Response.NOTE, said, at, pool)
            )
    return out


def label_signals(
    cluster: str,
    node: str,
    before: dict[str, str],
    after: dict[str, str],
    at: datetime,
    pool: str | None = None,
) -> list[Signal]:
    """The signals of the provider's labels changing: GKE's health prediction and its
    scheduled maintenance."""
    out: list[Signal] = []
    for key in PREDICTION_LABELS:
        found = _prediction(cluster, node, key, before.get(key), after.get(key), at, pool)
        out += [found] if found is not None else []
    when = after.get(MAINTENANCE_LABEL)
    if when and when != before.get(MAINTENANCE_LABEL):
        out.append(maintenance_signal(cluster, node, f"starts at {when} (epoch s)", at, pool))
    return out


def _prediction(
    cluster: str,
    node: str,
    key: str,
    old: str | None,
    new: str | None,
    at: datetime,
    pool: str | None,
) -> Signal | None:
    if new == old or new is None:
        return None
    if new.lower() == "false":
        said = f"GKE predicts degradation ({key}=false): not for large training workloads"
        return Signal(
            cluster,
            node,
            Source.PREDICTION,
            "degradation",
            Response.QUARANTINE,
            said,
            at,
            pool,
            action=A.REPAIR,
        )
    if old is not None and old.lower() == "false":
        said = f"GKE's prediction cleared ({key}={new})"
        return Signal(
            cluster, node, Source.PREDICTION, "degradation", Response.NOTE, said, at, pool
        )
    return None


def maintenance_signal(
    cluster: str, node: str, said: str, at: datetime, pool: str | None = None
) -> Signal:
    """Host maintenance announced (an EC2 scheduled event, GKE's label): a note; the reboot
    after it re-admits the node."""
    return Signal(
        cluster,
        node,
        Source.MAINTENANCE,
        "scheduled",
        Response.NOTE,
        f"host maintenance announced: {said}; re-admitted after it",
        at,
        pool,
    )


# dcgm-exporter, read at an interval (docs/events.md): the reading's ``what``
EXPORTER_BAD = "gpu-health"
EXPORTER_UNKNOWN = "unknown"


def exporter_signal(
    cluster: str, node: str, reading: Mapping[str, Any], at: datetime, pool: str | None = None
) -> Signal | None:
    """The signal of one node's dcgm-exporter reading, decided by the nightly's passive rule
    (``domain.health.decide_passive``) where the reading was taken: ``{"action", "reason",
    "key"}`` (the decision; ``key`` names the values it was taken from) or ``{"unknown", "key"}``
    (the exporter is down, unreadable or serves none of the fields: never healthy, and not a
    quarantine by itself: a note). An action beyond ``healthy`` quarantines, with NVIDIA's
    action; ``healthy`` says nothing; a reading whose action is none gpufleet knows is the
    unknown note too. The version is the reading's ``key``: the same values
    read again (a counter that stays where it is) record nothing; a changed value does."""
    key = str(reading.get("key") or "")[:52]
    version = f"exporter:{key}"

    def unknown(said: str) -> Signal:
        return Signal(
            cluster,
            node,
            Source.EXPORTER,
            EXPORTER_UNKNOWN,
            Response.NOTE,
            said,
            at,
            pool,
            version=version,
        )

    if "unknown" in reading:
        return unknown(
            f"dcgm-exporter: no reading ({reading['unknown']}): unknown, not healthy; "
            "not a quarantine by itself"
        )
    try:
        action = HealthAction(str(reading.get("action")))
    except ValueError:  # a reading this gpufleet cannot read: unknown, never healthy
        return unknown(
            f"dcgm-exporter: a reading with no action gpufleet knows "
            f"({shown(reading.get('action'))}): unknown, not healthy"
        )
    if action is A.HEALTHY:
        return None
    reason = str(reading.get("reason") or "dcgm-exporter")
    if action is A.COULD_NOT_RUN:
        return unknown(reason)
    return Signal(
        cluster,
        node,
        Source.EXPORTER,
        EXPORTER_BAD,
        Response.QUARANTINE,
        reason,
        at,
        pool,
        action=action,
        version=version,
    )


# EC2 (``DescribeInstanceStatus``): scheduled events that stop the instance, and those that only
# reboot it or its host (docs/events.md)
EC2_STOPS = ("instance-retirement", "instance-stop")


def instance_signals(
    cluster: str, node: str, status: InstanceStatus, at: datetime, pool: str | None = None
) -> list[Signal]:
    """The signals of one node's EC2 instance status: a failed system status check (the
    host: hardware, power, network) or instance status check quarantines; a scheduled event
    that stops the instance (``instance-retirement``, ``instance-stop``) quarantines ahead of
    it (no new job lands on a machine AWS will stop; a running job is not killed); a reboot or
    maintenance event is the maintenance note (the reboot after it re-admits the node). A
    completed or canceled event says nothing. Each signal's version names the impairment's
    start or the event's id: the same status read again records nothing."""
    out: list[Signal] = []
    for check, value, since, action in (
        ("system", status.system_status, status.system_impaired_since, A.REPAIR),
        ("instance", status.instance_status, status.instance_impaired_since, A.REBOOT),
    ):
        if value != "impaired":
            continue
        when = f" since {since.isoformat()}" if since is not None else ""
        said = f"EC2 {check} status check of {status.instance_id} impaired{when}" + (
            ": its host (hardware, power or network) is failing"
            if check == "system"
            else ": the instance does not answer EC2's reachability check"
        )
        out.append(
            Signal(
                cluster,
                node,
                Source.EC2,
                f"{check}-impaired",
                Response.QUARANTINE,
                said,
                at,
                pool,
                action=action,
                version=f"ec2:{check}:{since.isoformat() if since else 'impaired'}"[:64],
            )
        )
    for event in status.events:
        if event.done:
            if event.code in EC2_STOPS:  # the stop is no longer ahead (``stop_ahead``)
                out.append(_stop_done(cluster, node, status, event, at, pool))
            continue
        start = event.not_before.isoformat() if event.not_before else "a time to come"
        said = f"EC2 {event.code} of {status.instance_id} from {start}" + (
            f" ({event.description})" if event.description else ""
        )
        version = f"ec2:{event.event_id or event.code + ':' + start}"[:64]
        if event.code in EC2_STOPS:
            said += ": the instance will be stopped; out of service ahead of it"
            out.append(
                Signal(
                    cluster,
                    node,
                    Source.EC2,
                    event.code,
                    Response.QUARANTINE,
                    said,
                    at,
                    pool,
                    action=A.REPAIR,
                    version=version,
                )
            )
        else:
            out.append(replace(maintenance_signal(cluster, node, said, at, pool), version=version))
    return out


def _stop_done(
    cluster: str,
    node: str,
    status: InstanceStatus,
    event: Any,
    at: datetime,
    pool: str | None,
) -> Signal:
    said = f"EC2 {event.code} of {status.instance_id} is over ({event.description.strip()})"
    return Signal(
        cluster,
        node,
        Source.EC2,
        f"{event.code}{DONE_SUFFIX}",
        Response.NOTE,
        said,
        at,
        pool,
        version=f"ec2:{event.event_id or event.code}:done"[:64],
    )


DONE_SUFFIX = "-done"
# the node's own signals that mean an announced stop is behind it: it came back from a stop
# (a stop and start gives a new boot ID), on another machine, or is a new node
STOP_BEHIND = frozenset({"rebooted", "replaced", "appeared"})


def stop_ahead(rows: Iterable[Mapping[str, Any]]) -> str | None:
    """The reason of the EC2 stop (``instance-retirement``, ``instance-stop``) still ahead of
    a node, from its recorded signals newest first (``Ledger.node_signals``: ``source``,
    ``what``, ``reason``), or None. A stop is behind the node once a newer signal says the event
    is over (completed or canceled) or the node came back (rebooted: stopped and started;
    replaced; new). A node with a stop ahead passes no retest into service: it is replaced
    ahead of AWS's stop (``NodeLifecycle.record_retest``)."""
    for row in rows:
        source, what = row.get("source"), str(row.get("what") or "")
        if source == Source.LIFECYCLE.value and what in STOP_BEHIND:
            return None
        if source != Source.EC2.value:
            continue
        if what.endswith(DONE_SUFFIX) and what.removesuffix(DONE_SUFFIX) in EC2_STOPS:
            return None
        if what in EC2_STOPS:
            return str(row.get("reason") or what)
    return None


def lifecycle_signal(
    cluster: str, before: Any | None, after: Any | None, at: datetime, held_out: bool = False
) -> Signal | None:
    """The node itself appearing, returning or leaving, from its state ``before`` and
    ``after`` (NodeInfo-like: ``name``, ``pool``, ``uid``, ``boot_id``, ``provider_id``,
    ``unschedulable``; None: not there). ``held_out``: gpufleet holds the node out of service
    (an open lifecycle record), so an uncordon is a person's, not a validation."""
    if after is None:
        if before is None:
            return None
        said = "the node is gone (deleted or replaced)"
        return Signal(
            cluster, before.name, Source.LIFECYCLE, "gone", Response.FORGET, said, at, before.pool
        )
    node, pool = after.name, after.pool
    if before is None:
        said = "a new node appeared: validation pending"
        return Signal(cluster, node, Source.LIFECYCLE, "appeared", Response.ADMIT, said, at, pool)
    if _changed(before, after, "uid") or _changed(before, after, "provider_id"):
        said = "the node came back on another machine (replaced): validation pending"
        return Signal(cluster, node, Source.LIFECYCLE, "replaced", Response.ADMIT, said, at, pool)
    if _changed(before, after, "boot_id"):
        said = "the node rebooted: validation pending"
        return Signal(cluster, node, Source.LIFECYCLE, "rebooted", Response.ADMIT, said, at, pool)
    if held_out and before.unschedulable and not after.unschedulable:
        said = "uncordoned while out of service: validation pending"
        return Signal(cluster, node, Source.LIFECYCLE, "uncordoned", Response.ADMIT, said, at, pool)
    return _readiness_signal(cluster, before, after, at, held_out)


# The value of the validation-pending taint while gpufleet holds a NotReady node (its ``what``).
HOLD_VALUE = "not-ready"


def ready_of(node: Any) -> bool | None:
    """Whether ``node`` (NodeInfo-like, with ``conditions``) reports Ready: its ``Ready``
    condition's status is ``True``; False for ``False``/``Unknown``; None: no Ready condition."""
    return ready_in((c.type, c.status) for c in getattr(node, "conditions", None) or ())


def ready_in(conditions: Iterable[tuple[str, str]]) -> bool | None:
    """:func:`ready_of` over ``(type, status)`` pairs (a node's kept conditions, as the ledger
    holds them)."""
    for kind, status in conditions:
        if kind == "Ready":
            return status == "True"
    return None


def _readiness_signal(
    cluster: str, before: Any, after: Any, at: datetime, held_out: bool
) -> Signal | None:
    """A node in service going NotReady is held: tainted validation-pending at once (no
    session), so that if it comes back from a reboot it is already held when it turns Ready,
    with no window for a job to land on it before the watcher sees the new boot id. Back Ready
    with the same boot id, both known (no reboot: a kubelet restart, a network partition), the
    hold is lifted; a new boot id is ``rebooted`` (admitted), and a boot id not known either
    side is never taken as "no reboot": the hold stays for the pool's next validation. A node
    already pending (``after.pending``: its validation-pending taint's value) is not held again,
    and only gpufleet's own hold (``HOLD_VALUE``) is lifted."""
    was, now = ready_of(before), ready_of(after)
    node, pool = after.name, after.pool
    pending = getattr(after, "pending", None)
    if was is True and now is False and not held_out and pending is None:
        said = (
            "the node is NotReady: held validation-pending until it is back (a reboot is "
            "validated before a job lands on it)"
        )
        return Signal(cluster, node, Source.LIFECYCLE, HOLD_VALUE, Response.HOLD, said, at, pool)
    same_boot = before.boot_id is not None and before.boot_id == after.boot_id
    if was is False and now is True and pending == HOLD_VALUE and same_boot:
        said = "Ready again without a reboot (the same boot id): the NotReady hold is lifted"
        return Signal(cluster, node, Source.LIFECYCLE, "ready", Response.LIFT, said, at, pool)
    return None


def _changed(before: Any, after: Any, field: str) -> bool:
    old, new = getattr(before, field, None), getattr(after, field, None)
    return old is not None and new is not None and old != new


def coalesce(signals: Iterable[Signal]) -> list[Signal]:
    """One signal per (cluster, node, source, what): the first seen, counting the rest, with the
    newest version and the most urgent response among them. A burst of lines from one fault is
    one signal. Order: as first seen."""
    out: dict[tuple[str, str, str, str], Signal] = {}
    for s in signals:
        have = out.get(s.key)
        if have is None:
            out[s.key] = s
            continue
        urgent = s if RANK[s.response] > RANK[have.response] else have
        out[s.key] = replace(
            urgent,
            observed_at=min(have.observed_at, s.observed_at),
            count=have.count + s.count,
            version=later_version(have.version, s.version),
        )
    return list(out.values())


def by_node(signals: Iterable[Signal]) -> dict[tuple[str, str], Response]:
    """Each (cluster, node)'s most urgent response."""
    out: dict[tuple[str, str], Response] = {}
    for s in signals:
        k = (s.cluster, s.node)
        if k not in out or RANK[s.response] > RANK[out[k]]:
            out[k] = s.response
    return out


def newer_bad_signals(
    validated_at: datetime | None, bad_at: dict[str, tuple[datetime, str]]
) -> dict[str, str]:
    """The nodes whose newest bad signal (``bad_at``: node -> (when, reason)) is newer than the
    pool's last validation (``validated_at``; None: never validated, every bad signal counts):
    node -> a sentence naming the signal, for the gate to refuse the node."""
    out: dict[str, str] = {}
    for node, (when, reason) in sorted(bad_at.items()):
        if validated_at is None or when > validated_at:
            out[node] = f"{node}: {reason} at {when.isoformat()}, after the pool's last validation"
    return out
