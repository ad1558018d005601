"""What happens to a sim cluster's nodes between nights, as the real fleet shows it: a GPU
fault, a reboot, a cloud's auto-repair replacing a node, the autoscaler adding one, host
maintenance announced, and GKE's node-health prediction label.

Each action writes what the real components write (tests/data/events/ holds the real shapes,
with their sources), so a watch (``watch_log``) sees the same dialect as on a real cluster:

- **GPU fault** (``gpu_fault``): the driver's Xid line (``gpu_health.xid_line``), reported the
  way the cluster's shape does it. ``mimics: eks``: the EKS node monitoring agent (reason
  ``NvidiaXID<code>Error`` for a fatal Xid, ``NvidiaXID<code>Warning`` otherwise; fatal sets the
  ``AcceleratedHardwareReady`` condition False, a warning is an Event). ``mimics: gke``:
  NVSentinel's syslog health monitor through its platform connector (check
  ``SysLogsXIDError``: a fatal one is a node condition of that type, status True, reason
  ``SysLogsXIDErrorIsNotHealthy``; a non-fatal one an Event of that type and reason; message
  ``ErrorCode:79 PCI:0000:9a:00 <driver line> Recommended Action=RESTART_BM;``). The fault
  ``xid:<node>:<code>`` is put in force too, so the node's health tools see it.
- **reboot**: the machine reboots on its own, through the cloud's reboot (``machines.reboot``):
  NotReady, then Ready with a new ``bootID`` once it has booted (``HOST_REBOOT_S``).
- **replace** (a cloud's auto-repair): the node is DELETED and a node under a NEW name is ADDED
  in the same pool, NotReady until it has booted (``REPLACE_BOOT_S``), tainted as new nodes
  come up (``gpufleet.io/validation-pending``, NoSchedule) with the GPU taint; the old machine's
  faults go with it.
- **add** (the autoscaler): a new node in the pool, as a replacement's.
- **maintenance**: ``mimics: gke``: the label ``cloud.google.com/scheduled-maintenance-time``
  (the window's start, Unix seconds) as GKE sets it on GPU/TPU nodes; ``mimics: eks``: the EC2
  scheduled event as aws-node-termination-handler shows it (Event reason ``ScheduledEvent``,
  ``<code> will occur between <not before> and <not after> because <description>``, and the
  ``aws-node-termination-handler/scheduled-maintenance`` NoSchedule taint valued with the
  event id).
- **gpu-memory-fault**: a GPU's memory fails (``row-remap-failed``, ``ecc-dbe``,
  ``row-remap-pending``) and no agent on the node reports it: no Event, no condition; the fault
  is put in force, so only what reads the GPU's counters sees it (dcgm-exporter's metrics, the
  nightly's health check).
- **instance-status** (``mimics: eks``): EC2's status checks of the node's instance
  (``DescribeInstanceStatus``: ``sim_ec2_status``, read by ``ec2_status``): the system status
  check (the host) or the instance status check ``impaired`` (reachability failed) or ``ok``.
  ``maintenance`` on an EKS-shaped cluster also lists its scheduled event there (code
  ``system-maintenance``, ``system-reboot``, ``instance-retirement``, ...), as EC2 does
  alongside what aws-node-termination-handler writes.
- **prediction**: GKE's ``gke.google.com/recommended-to-run-large-training-workload`` label
  (``true`` | ``false``), as its node-health-prediction CronJob sets it every 10 minutes (the
  key as Google's page documents it: ``gke.google.com/``, not ``cloud.google.com/``).

Any action can be given a time on the sim's clock (``at``; ``events_schedule.time_of_day``
reads ``HH:MM``): a future one is scheduled and fires when the clock has passed it and the
nodes are read (``fire_due``).
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from gpufleet.backends.base import EnsureAction, NodeInfo
from gpufleet.backends.kube.node_objects import format_time
from gpufleet.backends.sim import events_schedule, watch_log
from gpufleet.backends.sim.base import SimBackendBase
from gpufleet.backends.sim.gpu_health import pci_address, xid_line
from gpufleet.backends.sim.programs import speed
from gpufleet.backends.sim.seeds import seed
from gpufleet.domain.faults import FaultError, parse_fault
from gpufleet.domain.health import XID_CATALOG
from gpufleet.domain.workloads import GPU_TAINT_KEY, UNVALIDATED_KEY
from gpufleet.errors import BackendError

ACTIONS = (
    "gpu-fault",
    "reboot",
    "replace",
    "add-node",
    "maintenance",
    "prediction",
    "gpu-memory-fault",
    "instance-status",
)
MEMORY_FAULTS = ("row-remap-failed", "ecc-dbe", "row-remap-pending")
CHECK_STATUSES = ("ok", "impaired")

# who reports what, per dialect (tests/data/events/*.yaml name the sources)
EKS_AGENT = "eks-node-monitoring-agent"
EKS_GPU_CONDITION = "AcceleratedHardwareReady"
NVSENTINEL_AGENT = "syslog-health-monitor"
NVSENTINEL_XID_CHECK = "SysLogsXIDError"
NTH = "aws-node-termination-handler"
NTH_MAINTENANCE_TAINT = "aws-node-termination-handler/scheduled-maintenance"
GKE_MAINTENANCE_LABEL = "cloud.google.com/scheduled-maintenance-time"
# the key as Google documents it (docs.cloud.google.com/ai-hypercomputer/docs/workloads/
# enable-node-health-prediction): gke.google.com/, not cloud.google.com/
GKE_PREDICTION_LABEL = "gke.google.com/recommended-to-run-large-training-workload"
EC2_EVENT_TIME = "%d %b %Y %H:%M:%S GMT"  # IMDS scheduled events' NotBefore/NotAfter
# Xid buckets the sim reports as fatal (the node needs service or a reset); the others
# (IGNORE, RESTART_APP: the application's own error) are warnings
_NON_FATAL_BUCKETS = frozenset({"IGNORE", "RESTART_APP"})
# NVSentinel's recommended action for an Xid, from NVIDIA's resolution bucket
_NVSENTINEL_ACTION = {"RESET_GPU": "COMPONENT_RESET", "RESTART_APP": "NONE", "IGNORE": "NONE"}
REPLACE_BOOT_S = 300.0  # a replacement or added node: NotReady until its machine has booted
# A machine that reboots on its own (a crash, a host's maintenance): NotReady until it has booted
# again, as long as a new machine's boot. Kubernetes shows it NotReady at once on a graceful
# shutdown, else after node-monitor-grace-period (40 s by default; 50 s in newer releases,
# kubernetes/kubernetes#127352); an 8-GPU server's firmware and boot take minutes. gpufleet's
# own reboot of a drained node through the cloud (``cloud.reboot_node``) keeps the cloud
# table's short ``CREATE_S["reboot"]``, so the remediation's tests do not wait for it.
HOST_REBOOT_S = REPLACE_BOOT_S
MAINTENANCE_WINDOW_S = 3600.0  # an EC2 scheduled event's NotAfter, after its NotBefore


def xid_is_fatal(code: int) -> bool:
    entry = XID_CATALOG.get(code)
    return entry is None or entry.bucket not in _NON_FATAL_BUCKETS


class SimNodeActions(SimBackendBase):
    """The actions above on one sim cluster (a base of ``SimNodes``, which lists the nodes)."""

    if TYPE_CHECKING:

        def nodes(self, pool: str | None = None) -> list[NodeInfo]: ...

    # --- the API: now, or scheduled --------------------------------------------------------

    def gpu_fault(
        self, node: str, xid: int = 79, gpu: int = 0, at: float | None = None
    ) -> dict[str, Any]:
        """A GPU of ``node`` logs Xid ``xid`` (now, or at ``at``)."""
        return self._act("gpu-fault", node, {"xid": int(xid), "gpu": int(gpu)}, at)

    def reboot(self, node: str, at: float | None = None) -> dict[str, Any]:
        """The machine behind ``node`` reboots."""
        return self._act("reboot", node, {}, at)

    def replace(self, node: str, at: float | None = None) -> dict[str, Any]:
        """The cloud replaces ``node``'s machine: a new node under a new name (``new``)."""
        return self._act("replace", node, {}, at)

    def add_node(self, pool: str, at: float | None = None) -> dict[str, Any]:
        """The autoscaler adds a node to ``pool`` (its name: ``new``)."""
        self.cluster.pool(pool)  # CatalogError naming the pools when unknown
        return self._act("add-node", None, {"pool": pool}, at)

    def maintenance(
        self, node: str, start: float, code: str = "system-maintenance", at: float | None = None
    ) -> dict[str, Any]:
        """Host maintenance of ``node``'s machine is announced, to start at ``start``."""
        return self._act("maintenance", node, {"start": float(start), "code": code}, at)

    def prediction(self, node: str, recommended: bool, at: float | None = None) -> dict[str, Any]:
        """GKE's node-health prediction says whether ``node`` should run large training
        (a GKE feature: refused on a cluster that mimics EKS)."""
        if self.cluster.shape != "gke":
            raise BackendError(
                f"sim {self.cluster.name} mimics {self.cluster.shape}: {GKE_PREDICTION_LABEL} is "
                "GKE's node-health prediction, set on GKE clusters only"
            )
        return self._act("prediction", node, {"recommended": bool(recommended)}, at)

    def gpu_memory_fault(
        self, node: str, kind: str = "row-remap-failed", at: float | None = None
    ) -> dict[str, Any]:
        """A GPU of ``node`` fails in memory (``kind``: one of ``MEMORY_FAULTS``) and nothing
        on the node reports it: only its counters (dcgm-exporter) show it."""
        if kind not in MEMORY_FAULTS:
            raise BackendError(f"GPU memory fault {kind!r}: one of {', '.join(MEMORY_FAULTS)}")
        return self._act("gpu-memory-fault", node, {"kind": kind}, at)

    def instance_status(
        self, node: str, system: str = "impaired", instance: str = "ok", at: float | None = None
    ) -> dict[str, Any]:
        """EC2's status checks of ``node``'s instance (an EC2 feature: refused on a cluster
        that mimics GKE)."""
        if self.cluster.shape != "eks":
            raise BackendError(
                f"sim {self.cluster.name} mimics {self.cluster.shape}: EC2's instance status "
                "checks are an EKS cluster's"
            )
        for value in (system, instance):
            if value not in CHECK_STATUSES:
                raise BackendError(f"a status check is one of {', '.join(CHECK_STATUSES)}")
        return self._act("instance-status", node, {"system": system, "instance": instance}, at)

    def _act(
        self, action: str, node: str | None, args: dict[str, Any], at: float | None
    ) -> dict[str, Any]:
        if node is not None:
            self._require_node(node)
        now = self.state.clock.time()
        if at is not None and at > now:
            with self.state.tx() as conn:
                row = events_schedule.add(conn, self.cluster.name, at, action, node, args)
            return {"action": action, "node": node, "scheduled": at, "id": row}
        return self._perform(action, node, args, now if at is None else at)

    def fire_due(self) -> list[dict[str, Any]]:
        """Run the scheduled actions whose time has come, oldest first, each at its time; a
        row whose node has gone by then (deleted, replaced) is skipped."""
        now = self.state.clock.time()
        with self.state.read() as conn:  # the common case: nothing due, no write transaction
            if not events_schedule.any_due(conn, self.cluster.name, now):
                return []
        with self.state.tx() as conn:
            due = events_schedule.take_due(conn, self.cluster.name, now)
        done = []
        for row in due:
            if row.node is not None and not self._node_exists(row.node):
                done.append({"action": row.action, "node": row.node, "skipped": "no such node"})
                continue
            done.append(self._perform(row.action, row.node, row.args, row.at))
        return done

    def schedule(self) -> list[events_schedule.Scheduled]:
        with self.state.read() as conn:
            return events_schedule.listed(conn, self.cluster.name)

    # --- the actions -----------------------------------------------------------------------

    def _perform(self, action: str, node: str | None, args: dict[str, Any], at: float) -> dict:
        if action == "reboot":
            assert node is not None
            return self._reboot(node, at)
        with self.state.tx() as conn:
            if action == "gpu-fault":
                assert node is not None
                return self._gpu_fault(conn, node, int(args["xid"]), int(args.get("gpu", 0)), at)
            if action == "replace":
                assert node is not None
                return self._replace(conn, node, at)
            if action == "add-node":
                return self._add(conn, str(args["pool"]), at)
            if action == "maintenance":
                assert node is not None
                return self._maintenance(
                    conn, node, float(args["start"]), str(args.get("code")), at
                )
            if action == "gpu-memory-fault":
                assert node is not None
                return self._memory_fault(conn, node, str(args["kind"]), at)
            if action == "instance-status":
                assert node is not None
                return self._instance_status(conn, node, args, at)
            if action == "prediction":
                assert node is not None
                value = "true" if args["recommended"] else "false"
                self._patch_labels(conn, node, {GKE_PREDICTION_LABEL: value})
                return {"action": action, "node": node, "label": value}
        raise BackendError(f"sim: unknown node action {action!r} (actions: {', '.join(ACTIONS)})")

    def _gpu_fault(
        self, conn: sqlite3.Connection, node: str, code: int, gpu: int, at: float
    ) -> dict[str, Any]:
        row = self._node_row(conn, node)
        pool = self.cluster.pool(row["pool"])
        if not 0 <= gpu < pool.gpu.count:
            raise BackendError(f"node {node} has GPUs 0..{pool.gpu.count - 1}, not {gpu}")
        line = xid_line(code, gpu, pid=1000 + seed("xid-pid", node, code) % 4_000_000)
        fatal = xid_is_fatal(code)
        conn.execute(
            "INSERT OR IGNORE INTO faults (cluster, pool, fault, scope, created_at) "
            "VALUES (?, ?, ?, 'cli', ?)",
            (self.cluster.name, row["pool"], f"xid:{node}:{code}", at),
        )
        if self.cluster.shape == "eks":
            reason = f"NvidiaXID{code}{'Error' if fatal else 'Warning'}"
            source, event_type = EKS_AGENT, "Warning"
            condition = {"type": EKS_GPU_CONDITION, "status": "False", "reason": reason}
            message = line
        else:
            entry = XID_CATALOG.get(code)
            action = "RESTART_BM" if code == 79 else "CONTACT_SUPPORT"
            if entry is not None and code != 79:
                action = _NVSENTINEL_ACTION.get(entry.bucket, action)
            reason = f"{NVSENTINEL_XID_CHECK}IsNotHealthy"
            source, event_type = NVSENTINEL_AGENT, NVSENTINEL_XID_CHECK
            condition = {"type": NVSENTINEL_XID_CHECK, "status": "True", "reason": reason}
            message = f"ErrorCode:{code} PCI:{pci_address(gpu)} {line} Recommended Action={action};"
        if fatal:
            self._set_condition(conn, node, {**condition, "message": message}, at)
        else:
            watch_log.record_event(
                conn,
                self.cluster.name,
                node,
                reason=reason,
                message=message,
                type_=event_type,
                source=source,
                at=at,
            )
        return {"action": "gpu-fault", "node": node, "xid": code, "fatal": fatal, "line": line}

    def _memory_fault(
        self, conn: sqlite3.Connection, node: str, kind: str, at: float
    ) -> dict[str, Any]:
        row = self._node_row(conn, node)
        conn.execute(
            "INSERT OR IGNORE INTO faults (cluster, pool, fault, scope, created_at) "
            "VALUES (?, ?, ?, 'cli', ?)",
            (self.cluster.name, row["pool"], f"{kind}:{node}", at),
        )
        return {"action": "gpu-memory-fault", "node": node, "kind": kind}

    def _instance_status(
        self, conn: sqlite3.Connection, node: str, args: dict[str, Any], at: float
    ) -> dict[str, Any]:
        self._node_row(conn, node)
        have = conn.execute(
            "SELECT * FROM sim_ec2_status WHERE cluster=? AND node=?", (self.cluster.name, node)
        ).fetchone()
        since = {}
        for check in ("system", "instance"):
            old = have[f"{check}_status"] if have else "ok"
            kept = have[f"{check}_since"] if have else None
            since[check] = (
                (at if old != "impaired" else kept) if args[check] == "impaired" else None
            )
        conn.execute(
            "INSERT INTO sim_ec2_status (cluster, node, instance_status, system_status, "
            "instance_since, system_since) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (cluster, node) "
            "DO UPDATE SET instance_status=excluded.instance_status, "
            "system_status=excluded.system_status, instance_since=excluded.instance_since, "
            "system_since=excluded.system_since",
            (
                self.cluster.name,
                node,
                args["instance"],
                args["system"],
                since["instance"],
                since["system"],
            ),
        )
        return {"action": "instance-status", "node": node, **args}

    def _ec2_event(self, conn: sqlite3.Connection, node: str, event: dict[str, Any]) -> None:
        """List a scheduled event of ``node``'s instance (``DescribeInstanceStatus``)."""
        have = conn.execute(
            "SELECT events FROM sim_ec2_status WHERE cluster=? AND node=?",
            (self.cluster.name, node),
        ).fetchone()
        events = [*json.loads(have["events"]), event] if have else [event]
        conn.execute(
            "INSERT INTO sim_ec2_status (cluster, node, events) VALUES (?, ?, ?) "
            "ON CONFLICT (cluster, node) DO UPDATE SET events=excluded.events",
            (self.cluster.name, node, json.dumps(events)),
        )

    def _reboot(self, node: str, at: float) -> dict[str, Any]:
        from gpufleet.backends.sim.cloud import SimCloudBackend

        cloud = SimCloudBackend(self.cluster, self.state)
        info = next(n for n in self.nodes() if n.name == node)
        ensured = cloud.reboot_node(info)
        if ensured.action is EnsureAction.CREATED:  # booting as long as a machine does
            with self.state.tx() as conn:
                conn.execute(
                    "UPDATE cloud SET body=? WHERE cluster=? AND kind='reboot' AND name=?",
                    (
                        json.dumps({"node": node, "ready_at": at + HOST_REBOOT_S * speed()}),
                        self.cluster.name,
                        node,
                    ),
                )
        return {"action": "reboot", "node": node, "result": str(ensured.action)}

    def _replace(self, conn: sqlite3.Connection, node: str, at: float) -> dict[str, Any]:
        row = self._node_row(conn, node)
        new = self._new_name(conn, row["pool"])
        conn.execute("DELETE FROM nodes WHERE cluster=? AND name=?", (self.cluster.name, node))
        conn.execute(  # its instance is terminated: EC2 reports it no more
            "DELETE FROM sim_ec2_status WHERE cluster=? AND node=?", (self.cluster.name, node)
        )
        gone = [  # the old machine's faults go with it (a sticky one is not the machine's)
            fault_id
            for fault_id, text in conn.execute(
                "SELECT id, fault FROM faults WHERE cluster=? AND scope!='sticky'",
                (self.cluster.name,),
            )
            if _names_node(text, node)
        ]
        conn.executemany("DELETE FROM faults WHERE id=?", [(i,) for i in gone])
        self._register(conn, row["pool"], new, at)
        return {"action": "replace", "node": node, "new": new, "pool": row["pool"]}

    def _add(self, conn: sqlite3.Connection, pool: str, at: float) -> dict[str, Any]:
        new = self._new_name(conn, pool)
        self._register(conn, pool, new, at)
        return {"action": "add-node", "node": None, "new": new, "pool": pool}

    def _register(self, conn: sqlite3.Connection, pool: str, name: str, at: float) -> None:
        taints = (
            {"key": GPU_TAINT_KEY, "value": "present", "effect": "NoSchedule"},
            {"key": UNVALIDATED_KEY, "value": "true", "effect": "NoSchedule"},
        )
        self.state.insert_nodes(conn, self.cluster, pool, [name], taints=taints, ready=False)
        # NotReady while its machine boots (``cloud.settle_nodes`` reads ``boot`` rows)
        body = {"node": name, "ready_at": at + REPLACE_BOOT_S * speed()}
        conn.execute(
            "INSERT OR REPLACE INTO cloud VALUES (?, 'boot', ?, ?)",
            (self.cluster.name, name, json.dumps(body)),
        )

    def _maintenance(
        self, conn: sqlite3.Connection, node: str, start: float, code: str, at: float
    ) -> dict[str, Any]:
        if self.cluster.shape == "eks":
            event_id = f"instance-event-{uuid.uuid4().hex[:17]}"
            not_before = datetime.fromtimestamp(start, UTC).strftime(EC2_EVENT_TIME)
            not_after = datetime.fromtimestamp(start + MAINTENANCE_WINDOW_S, UTC).strftime(
                EC2_EVENT_TIME
            )
            description = {
                "instance-retirement": "The instance is running on degraded hardware",
                "instance-stop": "The instance is running on degraded hardware",
            }.get(code, "scheduled reboot" if code.endswith("reboot") else "scheduled maintenance")
            message = (  # aws-node-termination-handler's text of an IMDS scheduled event
                f"{code} will occur between {not_before} and {not_after} because {description}\n"
            )
            watch_log.record_event(
                conn,
                self.cluster.name,
                node,
                reason="ScheduledEvent",
                message=message,
                type_="Normal",
                source=NTH,
                at=at,
            )
            taint = {"key": NTH_MAINTENANCE_TAINT, "value": event_id, "effect": "NoSchedule"}
            self._patch_taint(conn, node, taint)
            self._ec2_event(  # what EC2's DescribeInstanceStatus lists of it
                conn,
                node,
                {
                    "id": event_id,
                    "code": code,
                    "description": description,
                    "not_before": start,
                    "not_after": start + MAINTENANCE_WINDOW_S,
                },
            )
            return {"action": "maintenance", "node": node, "event": event_id, "start": start}
        self._patch_labels(conn, node, {GKE_MAINTENANCE_LABEL: str(int(start))})
        return {"action": "maintenance", "node": node, "label": str(int(start)), "start": start}

    # --- rows --------------------------------------------------------------------------------

    def _require_node(self, node: str) -> None:
        if not self._node_exists(node):
            raise BackendError(f"sim {self.cluster.name}: node {node!r} not found")

    def _node_exists(self, node: str) -> bool:
        with self.state.read() as conn:
            row = conn.execute(
                "SELECT 1 FROM nodes WHERE cluster=? AND name=?", (self.cluster.name, node)
            ).fetchone()
        return row is not None

    def _node_row(self, conn: sqlite3.Connection, node: str) -> sqlite3.Row:
        row = conn.execute(
            "SELECT * FROM nodes WHERE cluster=? AND name=?", (self.cluster.name, node)
        ).fetchone()
        if row is None:
            raise BackendError(f"sim {self.cluster.name}: node {node!r} not found")
        return row

    def _new_name(self, conn: sqlite3.Connection, pool: str) -> str:
        """A name no node of the cluster has had in this state file (``<cluster>-<pool>-r<n>``:
        the cloud names a replacement anew, never after the machine it replaced)."""
        key = f"node-names:{self.cluster.name}/{pool}"
        row = conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        n = int(row[0]) + 1 if row else 1
        conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, str(n)))
        return f"{self.cluster.name}-{pool}-r{n}"

    def _set_condition(
        self, conn: sqlite3.Connection, node: str, condition: dict[str, Any], at: float
    ) -> None:
        row = self._node_row(conn, node)
        conditions = [c for c in json.loads(row["conditions"] or "[]")]
        old = next((c for c in conditions if c["type"] == condition["type"]), None)
        since = at if old is None or old.get("status") != condition["status"] else None
        entry = {
            **condition,
            "lastHeartbeatTime": format_time(at),
            "lastTransitionTime": format_time(since)
            if since is not None
            else old.get("lastTransitionTime")
            if old
            else format_time(at),
        }
        conditions = [c for c in conditions if c["type"] != condition["type"]] + [entry]
        conn.execute(
            "UPDATE nodes SET conditions=? WHERE cluster=? AND name=?",
            (json.dumps(conditions), self.cluster.name, node),
        )

    def _patch_labels(self, conn: sqlite3.Connection, node: str, labels: dict[str, str]) -> None:
        row = self._node_row(conn, node)
        current = {**json.loads(row["labels"]), **labels}
        conn.execute(
            "UPDATE nodes SET labels=? WHERE cluster=? AND name=?",
            (json.dumps(current), self.cluster.name, node),
        )

    def _patch_taint(self, conn: sqlite3.Connection, node: str, taint: dict[str, Any]) -> None:
        row = self._node_row(conn, node)
        taints = [
            t
            for t in json.loads(row["taints"])
            if not (t["key"] == taint["key"] and t["effect"] == taint["effect"])
        ]
        conn.execute(
            "UPDATE nodes SET taints=? WHERE cluster=? AND name=?",
            (json.dumps([*taints, taint]), self.cluster.name, node),
        )


def _names_node(fault: str, node: str) -> bool:
    try:
        return parse_fault(fault).node == node
    except FaultError:
        return False
