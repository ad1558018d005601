"""The event path's response: a batch of a cluster's node changes and node events turned into
signals, recorded once, and acted on in minutes (design: docs/events.md).

A service: no Airflow imports. ``EventResponse.respond`` compares each changed node with the node
as the ledger last saw it (``gf_watched_nodes``), reads the Xids in node events, decides with
the domain's rules (``domain.signals``), records the signals (a replay records nothing twice),
then acts on the new ones only: a node in service whose signal asks for a quarantine is
quarantined through the node lifecycle (NoSchedule: a running job is not killed); a node that
appeared or came back is tainted ``validation-pending`` and joins its pool's re-admission
session (``domain.admission``). Last, it keeps the nodes as seen and acknowledges the batch's
versions, so a watcher restarted after a kill resumes from there.

A cluster the ledger has never seen is a baseline: its nodes are recorded, nobody is admitted
(the fleet already in service is not new), and only a problem a node shows right now counts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from gpufleet.backends import cluster_backend
from gpufleet.backends.base import ClusterBackend, Taint
from gpufleet.domain.admission import DEFAULT_WINDOW_S, PENDING_KEY, Session
from gpufleet.domain.events import NodeCondition, iso_time, version_after
from gpufleet.domain.fleet import Catalog, Cluster, PoolRef
from gpufleet.domain.nodes import NodeState
from gpufleet.domain.signals import (
    HOLD_VALUE,
    Response,
    Signal,
    by_node,
    coalesce,
    condition_signals,
    exporter_signal,
    instance_signals,
    label_signals,
    lifecycle_signal,
    maintenance_signal,
    xid_signal,
)
from gpufleet.errors import GpufleetError
from gpufleet.parsing.health import announces_maintenance, xid_codes
from gpufleet.services.nodes.admission import join_session, orphaned_sessions
from gpufleet.services.nodes.drain import backend_clock
from gpufleet.services.nodes.lifecycle import NodeLifecycle
from gpufleet.services.nodes.readings import instance_of
from gpufleet.services.nodes.watch_batch import Batch
from gpufleet.store import Ledger

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Seen:
    """A node as the ledger (or the batch) has it, read by ``domain.signals``."""

    name: str
    pool: str | None
    uid: str | None
    boot_id: str | None
    provider_id: str | None
    unschedulable: bool
    conditions: tuple[NodeCondition, ...]
    labels: dict[str, str]
    version: str
    pending: str | None = None  # its validation-pending taint's value (a batch's node only)

    @classmethod
    def of(cls, name: str, fields: dict[str, Any]) -> _Seen:
        return cls(
            name=name,
            pool=fields.get("pool"),
            uid=fields.get("uid"),
            boot_id=fields.get("boot_id"),
            provider_id=fields.get("provider_id"),
            unschedulable=bool(fields.get("unschedulable")),
            conditions=tuple(
                NodeCondition(
                    str(c.get("type")),
                    str(c.get("status")),
                    str(c.get("reason") or ""),
                    str(c.get("message") or ""),
                )
                for c in fields.get("conditions") or ()
            ),
            labels={str(k): str(v) for k, v in (fields.get("labels") or {}).items()},
            version=str(fields.get("version")),
            pending=None if fields.get("pending") is None else str(fields["pending"]),
        )


@dataclass
class ResponseReport:
    """What one batch led to."""

    cluster: str
    signals: list[Signal] = field(default_factory=list)  # the new ones
    quarantined: dict[str, str] = field(default_factory=dict)
    admitted: dict[str, str] = field(default_factory=dict)
    held: dict[str, str] = field(default_factory=dict)  # NotReady: held validation-pending
    lifted: list[str] = field(default_factory=list)  # back without a reboot: hold lifted
    forgotten: list[str] = field(default_factory=list)
    sessions: list[dict[str, str]] = field(default_factory=list)  # opened by this response
    notes: list[str] = field(default_factory=list)
    baseline: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "signals": [
                {
                    "node": s.node,
                    "source": s.source.value,
                    "what": s.what,
                    "response": s.response.value,
                    "reason": s.reason,
                    "observed_at": s.observed_at.isoformat(),
                    "count": s.count,
                }
                for s in self.signals
            ],
            "quarantined": self.quarantined,
            "admitted": self.admitted,
            "held": self.held,
            "lifted": self.lifted,
            "forgotten": self.forgotten,
            "sessions": self.sessions,
            "notes": self.notes,
            "baseline": self.baseline,
        }


class EventResponse:
    """Respond to one cluster's batches. ``backend_for``: the cluster's backend (the catalog's,
    by default); ``window_s``: the re-admission sessions' batching window."""

    def __init__(
        self,
        ledger: Ledger,
        catalog: Catalog,
        backend_for: Callable[[Cluster], ClusterBackend] = cluster_backend,
        window_s: float = DEFAULT_WINDOW_S,
    ):
        self.ledger = ledger
        self.catalog = catalog
        self.backend_for = backend_for
        self.window_s = window_s

    def respond(self, batch: Batch, run_id: str) -> ResponseReport:
        cluster = self.catalog.cluster(batch.cluster)  # an unknown cluster: GpufleetError
        backend = self.backend_for(cluster)
        now = backend_clock(backend).now()
        report = ResponseReport(cluster=cluster.name)
        seen = self.ledger.watched_nodes(cluster.name)
        report.baseline = not seen
        held_out = {
            r["node"]
            for r in self.ledger.node_states(cluster.name)
            if r["state"] != NodeState.RELEASED.value
        }
        signals, keep = self.decide(batch, seen, held_out, now)
        # the new signals, and those a response that died or failed before acting recorded
        new = self.ledger.record_signals(signals, run_id=run_id)
        report.signals = new
        self._act(cluster, backend, new, run_id, now, report)  # each action is idempotent
        self.ledger.mark_acted(new)
        self.ledger.see_nodes(cluster.name, keep)
        for stream, version in (
            ("nodes", batch.nodes_version),
            ("events", batch.events_version),
            ("readings", batch.readings_version),
        ):
            if version is None:
                continue
            acked = self.ledger.watch_cursor(cluster.name, stream)
            if batch.follows(stream, acked):
                self.ledger.ack_watch(cluster.name, stream, version, run_id)
            else:  # a batch before this one was not handled: the watcher hands it over again
                report.notes.append(
                    f"{stream}: this batch begins after {acked}, the version acknowledged: "
                    "not acknowledged, so the watcher hands the changes between over again"
                )
        if batch.dropped_events:
            report.notes.append(
                f"{batch.dropped_events} further node event(s) in the storm were counted, not read"
            )
        return report

    # --- deciding --------------------------------------------------------------------------

    def decide(
        self,
        batch: Batch,
        seen: dict[str, dict[str, Any]],
        held_out: set[str],
        now: datetime,
    ) -> tuple[list[Signal], dict[str, dict[str, Any] | None]]:
        """The batch's signals, coalesced (``seen``: the nodes as last seen, none: a baseline;
        ``held_out``: the nodes gpufleet holds out of service), and what to keep of each node
        (None: gone). Pure over its arguments: nothing is read or written."""
        signals, keep = self._node_signals(batch, seen, held_out, now, not seen)
        signals += self._event_signals(batch, seen, now)
        signals += self._reading_signals(batch, seen, now)
        return coalesce(signals), keep

    def _node_signals(
        self,
        batch: Batch,
        seen: dict[str, dict[str, Any]],
        held_out: set[str],
        now: datetime,
        baseline: bool,
    ) -> tuple[list[Signal], dict[str, dict[str, Any] | None]]:
        """The nodes' signals, and what to keep of each (None: gone)."""
        name = batch.cluster
        out: list[Signal] = []
        keep: dict[str, dict[str, Any] | None] = {}
        changed = dict(batch.nodes)
        if batch.relist:  # a node the ledger knows that the list does not have is gone
            for node, row in seen.items():
                if not row["gone"] and node not in changed:
                    changed[node] = None
        for node, fields in changed.items():
            last = seen.get(node)
            before = _Seen.of(node, last) if last is not None and not last["gone"] else None
            if fields is None:
                if before is None:
                    continue
                sig = lifecycle_signal(name, before, None, now)
                if sig is not None:
                    out.append(_versioned(sig, batch.nodes_version or before.version))
                keep[node] = None
                continue
            after = _Seen.of(node, fields)
            if before is not None and not version_after(after.version, before.version):
                continue  # a replay: the ledger already has this node at a later version
            sig = None if baseline else lifecycle_signal(name, before, after, now, node in held_out)
            out += [_versioned(sig, after.version)] if sig is not None else []
            old_conditions = before.conditions if before is not None else ()
            old_labels = before.labels if before is not None else {}
            found = condition_signals(
                name, node, old_conditions, after.conditions, now, after.pool
            ) + label_signals(name, node, old_labels, after.labels, now, after.pool)
            for cond in after.conditions:  # a problem condition naming an Xid: NVIDIA's action
                if any(f.source.value == "condition" and f.what == cond.type for f in found):
                    codes = xid_codes(cond.reason, cond.message)
                    xid = xid_signal(name, node, codes, cond.message, now, after.pool)
                    found += [xid] if xid is not None else []
            out += [_versioned(s, after.version) for s in found]
            keep[node] = fields
        return out, keep

    def _event_signals(
        self, batch: Batch, seen: dict[str, dict[str, Any]], now: datetime
    ) -> list[Signal]:
        """The Xids the node events carry (``parsing.health.xid_codes``: the agents' reasons,
        NVSentinel's ``ErrorCode:``, the driver's ``NVRM: Xid`` line) and the host maintenance
        they announce; any other event is not a GPU signal."""
        out: list[Signal] = []
        for uid, ev in batch.events.items():
            node = str(ev.get("node") or "")
            reason, message = str(ev.get("reason") or ""), str(ev.get("message") or "")
            pool = (batch.nodes.get(node) or seen.get(node) or {}).get("pool")
            at = iso_time(ev.get("last_seen")) or now
            version = f"event:{uid}:{ev.get('count') or 1}"
            if announces_maintenance(reason):
                out.append(
                    _versioned(maintenance_signal(batch.cluster, node, message, at, pool), version)
                )
                continue
            sig = xid_signal(batch.cluster, node, xid_codes(reason, message), message, at, pool)
            if sig is not None:
                out.append(_versioned(sig, version))
        return out

    def _reading_signals(
        self, batch: Batch, seen: dict[str, dict[str, Any]], now: datetime
    ) -> list[Signal]:
        """The interval readings' signals: each node's dcgm-exporter reading and its EC2
        instance status (``domain.signals.exporter_signal`` / ``instance_signals``). A node
        the ledger knows is gone says nothing."""
        out: list[Signal] = []
        for node, reading in batch.exporters.items():
            pool = _pool(batch, seen, node)
            if pool is False or not isinstance(reading, dict):
                continue
            sig = exporter_signal(batch.cluster, node, reading, now, str(pool) if pool else None)
            out += [sig] if sig is not None else []
        for node, fields in batch.instances.items():
            pool = _pool(batch, seen, node)
            if pool is False or not isinstance(fields, dict):
                continue
            where = str(pool) if pool else None
            out += instance_signals(batch.cluster, node, instance_of(fields), now, where)
        return out

    # --- acting ----------------------------------------------------------------------------

    def _ref(self, cluster: Cluster, pool: str | None) -> PoolRef | None:
        if pool is None:
            return None
        try:
            return self.catalog.pool(cluster.name, pool)
        except GpufleetError:
            return None

    def _act(
        self,
        cluster: Cluster,
        backend: ClusterBackend,
        signals: list[Signal],
        run_id: str,
        now: datetime,
        report: ResponseReport,
    ) -> None:
        urgent = by_node(signals)
        reasons = {
            (s.cluster, s.node): s for s in signals if s.response is urgent[(s.cluster, s.node)]
        }
        opened: dict[str, Session] = {}
        for (_, node), response in urgent.items():
            sig = reasons[(cluster.name, node)]
            ref = self._ref(cluster, sig.pool)
            if response is Response.FORGET:
                report.forgotten.append(node)
            elif ref is None:
                if response in (Response.QUARANTINE, Response.ADMIT, Response.HOLD):
                    report.notes.append(
                        f"{node}: {sig.reason}; in no pool of the catalog: recorded only"
                    )
            elif response is Response.QUARANTINE:
                self._quarantine(ref, backend, node, sig, run_id, report)
            elif response is Response.ADMIT:
                self._admit(ref, backend, node, sig, now, opened, report)
            elif response is Response.HOLD:
                backend.add_taint(node, Taint(PENDING_KEY, HOLD_VALUE, "NoSchedule"))
                report.held[node] = sig.reason
                log.info("%s: %s held validation-pending: %s", ref.key, node, sig.reason)
            elif response is Response.LIFT:
                backend.remove_taint(node, PENDING_KEY)
                report.lifted.append(node)
                log.info("%s: %s: %s", ref.key, node, sig.reason)
        for orphan in orphaned_sessions(self.ledger, cluster.name, now):
            opened.setdefault(orphan.id, orphan)  # no run waits for it: this one will
        for session in opened.values():
            report.sessions.append(
                {"cluster": session.cluster, "node_pool": session.pool, "session": session.id}
            )
        for s in signals:
            if s.response is Response.NOTE:
                report.notes.append(f"{s.node}: {s.reason}")

    def _quarantine(
        self,
        ref: PoolRef,
        backend: ClusterBackend,
        node: str,
        sig: Signal,
        run_id: str,
        report: ResponseReport,
    ) -> None:
        row = self.ledger.node_state(ref.cluster.name, node)
        if row is not None and row["state"] != NodeState.RELEASED.value:
            if row["state"] == NodeState.QUARANTINED.value:
                # its taint as recorded (idempotent): a response that failed after recording
                # the quarantine (the cluster's API busy) may have left the node untainted
                NodeLifecycle(ref, self.ledger, backend).quarantine(
                    node, row["reason"], run_id=run_id
                )
            report.notes.append(
                f"{node}: {sig.reason} (already {row['state']}: the lifecycle has it)"
            )
            return
        evidence = {
            "signal": {
                "source": sig.source.value,
                "what": sig.what,
                "reason": sig.reason,
                "observed_at": sig.observed_at.isoformat(),
                "action": sig.action.value if sig.action is not None else None,
            }
        }
        if sig.action is not None:
            evidence["health"] = {"action": sig.action.value, "reason": sig.reason}
        NodeLifecycle(ref, self.ledger, backend).quarantine(
            node, sig.reason, evidence, run_id=run_id
        )
        report.quarantined[node] = sig.reason
        log.warning("%s: quarantined %s on its signal: %s", ref.key, node, sig.reason)

    def _admit(
        self,
        ref: PoolRef,
        backend: ClusterBackend,
        node: str,
        sig: Signal,
        now: datetime,
        opened: dict[str, Session],
        report: ResponseReport,
    ) -> None:
        backend.add_taint(node, Taint(PENDING_KEY, sig.what, "NoSchedule"))
        session, new = join_session(self.ledger, ref, node, now, self.window_s)
        if new:
            opened[session.id] = session
        report.admitted[node] = f"{sig.reason} (session {session.id})"
        log.info("%s: %s held validation-pending: %s", ref.key, node, sig.reason)


def _pool(batch: Batch, seen: dict[str, dict[str, Any]], node: str) -> str | bool | None:
    """A node's pool, as the batch or the ledger has it; False: the ledger knows it is gone
    (and the batch does not bring it back)."""
    if node in batch.nodes:
        fields = batch.nodes[node]
        return False if fields is None else fields.get("pool")
    row = seen.get(node)
    if row is not None and row.get("gone"):
        return False
    return (row or {}).get("pool")


def _versioned(sig: Signal, version: str) -> Signal:
    return replace(sig, version=version)
