"""The simulated fleet's ``ClusterBackend``: one Kubernetes cluster, as a fabric model.

Design: docs/design/simulated-fleet.md.
"""

from __future__ import annotations

import calendar
import hashlib
import json
import logging
import time
from collections.abc import Iterable
from functools import partial
from typing import Any

from gpufleet.backends.base import ObjectChange, PodInfo, WorkloadStatus
from gpufleet.backends.sim.dcgm_exporter import SimGpuMetrics
from gpufleet.backends.sim.disruption import (
    UNFINISHED,
    eviction_refusal,
    fail_workload,
    keep_outcome,
    terminal_condition,
)
from gpufleet.backends.sim.faults import night_of
from gpufleet.backends.sim.nodes import SimNodes
from gpufleet.backends.sim.placement import Placement, place, pod_phase, record_pods
from gpufleet.backends.sim.programs import START_DELAY_S, GroupRun, PodRun, speed
from gpufleet.backends.sim.run_times import (
    POD_ROWS,
    forget_run_times,
    pod_life,
    record_run_times,
)
from gpufleet.domain.kueue import refused_change
from gpufleet.domain.workloads import (
    POOL_LABEL,
    REPLICATED_JOB_LABEL,
    workload_selector,
)
from gpufleet.errors import BackendError, TransientBackendError

log = logging.getLogger(__name__)


def _contains(have: Any, want: Any) -> bool:
    """Every field of ``want`` is in ``have`` with the same value (lists compared whole)."""
    if isinstance(want, dict):
        return isinstance(have, dict) and all(_contains(have.get(k), v) for k, v in want.items())
    return have == want


def _merge(have: dict[str, Any], want: dict[str, Any]) -> dict[str, Any]:
    """A JSON merge patch of ``want`` onto ``have`` (RFC 7386, without deletions)."""
    out = dict(have)
    for key, value in want.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


class SimClusterBackend(SimNodes, SimGpuMetrics):
    """The ``ClusterBackend`` of a simulated cluster (refusing every call, as an unreachable
    API server would, until a ``preexisting: false`` cluster was created by onboarding)."""

    def _api_call(self, what: str) -> None:
        self._require_cluster()
        super()._api_call(what)

    def server_version(self) -> str:
        self._api_call("get version")
        return self.cluster.kubernetes_version or "1.34"

    def ensure_object(self, manifest: dict[str, Any]) -> ObjectChange:
        """Create, leave (every field already as asked) or merge-patch one object; refuse
        (BackendError) to edit a spec Kueue keeps immutable, as the kube backend does."""
        kind = manifest.get("kind")
        meta = manifest.get("metadata") or {}
        name, namespace = meta.get("name"), meta.get("namespace") or ""
        existing = self.get(kind, name, namespace) if kind and name else None
        if existing is None:
            self.apply(manifest)
            return ObjectChange.CREATED
        self._api_call("read object")
        refusal = refused_change(existing, manifest)
        if refusal:
            raise BackendError(refusal)
        if _contains(existing, manifest):
            return ObjectChange.UNCHANGED
        self._api_call("patch object")
        with self.state.tx() as conn:
            conn.execute(
                "UPDATE objects SET body=? WHERE cluster=? AND kind=? AND namespace=? AND name=?",
                (json.dumps(_merge(existing, manifest)), self.cluster.name, kind, namespace, name),
            )
        return ObjectChange.UPDATED

    # --- objects and workloads -----------------------------------------------------------------

    def apply(self, manifest: dict[str, Any]) -> dict[str, Any]:
        self._api_call("create object")
        kind = manifest.get("kind")
        meta = manifest.get("metadata") or {}
        name, namespace = meta.get("name"), meta.get("namespace") or ""
        if not kind or not name:
            raise BackendError("sim apply: manifest needs kind and metadata.name")
        with self.state.tx() as conn:
            existing = conn.execute(
                "SELECT body FROM objects WHERE cluster=? AND kind=? AND namespace=? AND name=?",
                (self.cluster.name, kind, namespace, name),
            ).fetchone()
            if existing:
                return json.loads(existing["body"])
            body = json.loads(json.dumps(manifest))
            now = self.state.clock.time(conn)
            body["metadata"].setdefault(
                "uid",
                hashlib.sha1(
                    f"{self.cluster.name}/{kind}/{namespace}/{name}/{now}".encode()
                ).hexdigest()[:16],
            )
            body["metadata"]["creationTimestamp"] = time.strftime(
                "%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)
            )
            conn.execute(
                "INSERT INTO objects VALUES (?, ?, ?, ?, ?, ?)",
                (self.cluster.name, kind, namespace, name, json.dumps(body), now),
            )
            if kind in ("Job", "JobSet"):
                self._start(conn, body)
            return body

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        with self.state.read() as conn:
            row = conn.execute(
                "SELECT body FROM objects WHERE cluster=? AND kind=? AND namespace=? AND name=?",
                (self.cluster.name, kind, namespace or "", name),
            ).fetchone()
        return json.loads(row["body"]) if row else None

    def delete(self, kind: str, name: str, namespace: str | None = None) -> bool:
        self._api_call("delete object")
        ns = namespace or ""
        with self.state.tx() as conn:
            n = conn.execute(
                "DELETE FROM objects WHERE cluster=? AND kind=? AND namespace=? AND name=?",
                (self.cluster.name, kind, ns, name),
            ).rowcount
            forget_run_times(conn, self.cluster.name, ns, kind, name)
            conn.execute(
                "DELETE FROM pods WHERE cluster=? AND namespace=? AND workload_kind=? "
                "AND workload=?",
                (self.cluster.name, ns, kind, name),
            )
        return bool(n)

    def list_pods(self, namespace: str | None, selector: str) -> list[PodInfo]:
        self._api_call("list pods")
        wanted = dict(part.split("=", 1) for part in selector.split(",") if "=" in part)
        with self.state.read() as conn:
            now = self.state.clock.time(conn)
            rows = conn.execute(
                f"{POD_ROWS} WHERE pods.cluster=? AND (? IS NULL OR pods.namespace=?) "
                "ORDER BY pods.name",
                (self.cluster.name, namespace, namespace),
            ).fetchall()
        out = []
        for r in rows:
            labels = json.loads(r["labels"])
            if all(labels.get(k) == v for k, v in wanted.items()):
                out.append(self._pod_info(r, labels, now))
        return out

    def pods_on_node(self, node: str) -> list[PodInfo]:
        """Unfinished pods bound to ``node`` (a pod whose simulated end passed has finished),
        every namespace, sorted by namespace and name. The sim runs no DaemonSets: every
        ``owner_kind`` is None."""
        self._api_call("list pods")
        with self.state.read() as conn:
            now = self.state.clock.time(conn)
            rows = conn.execute(
                f"{POD_ROWS} WHERE pods.cluster=? AND pods.node=? "
                "ORDER BY pods.namespace, pods.name",
                (self.cluster.name, node),
            ).fetchall()
        pods = (self._pod_info(r, json.loads(r["labels"]), now) for r in rows)
        return [p for p in pods if not p.finished]

    @staticmethod
    def _pod_info(row, labels: dict[str, str], now: float) -> PodInfo:
        """A pod row (``clock.POD_ROWS``) as the API shows it, with its container times on
        the modelled clock (``clock.container_times``)."""
        phase = pod_phase(row, now)
        return PodInfo(
            row["name"],
            row["node"],
            phase,
            labels,
            row["message"],
            namespace=row["namespace"],
            **pod_life(row, phase),  # its life on the modelled clock (domain.stages)
        )

    def workload_status(self, kind: str, name: str, namespace: str) -> WorkloadStatus:
        self._api_call("get workload")
        body = self.get(kind, name, namespace)
        if body is None:
            return WorkloadStatus(kind, name, namespace, "NotFound")
        pods = tuple(self.list_pods(namespace, workload_selector(kind, name)))
        ended = terminal_condition(body)  # set when its pods were evicted (``disruption``)
        if ended is not None:
            return WorkloadStatus(kind, name, namespace, ended[0], pods, ended[1])
        late = past_deadline(body, pods, self.state.clock.time())
        if late is not None:
            return WorkloadStatus(kind, name, namespace, "Failed", pods, late)
        if not pods or any(p.node is None for p in pods):
            msg = pods[0].message if pods else "no pods"
            return WorkloadStatus(kind, name, namespace, "Pending", pods, msg)
        phases = {p.phase for p in pods}
        if "Failed" in phases:
            failed = next(p for p in pods if p.phase == "Failed")
            return WorkloadStatus(
                kind,
                name,
                namespace,
                "Failed",
                pods,
                f"pod {failed.name}: {failed.message or 'failed'}",
            )
        if phases == {"Succeeded"}:
            return WorkloadStatus(kind, name, namespace, "Succeeded", pods)
        if phases <= {"Running", "Succeeded"}:
            return WorkloadStatus(kind, name, namespace, "Running", pods)
        return WorkloadStatus(kind, name, namespace, "Admitted", pods, "pods starting")

    def pod_logs(self, pod: str, namespace: str, container: str | None = None) -> str:
        """A container's log by name, an init container's too (the pod's main container when
        ``container`` is None)."""
        self._api_call("read pod log")
        with self.state.read() as conn:
            now = self.state.clock.time(conn)
            row = conn.execute(
                "SELECT logs, start_at, node FROM pods WHERE cluster=? AND namespace=? AND name=?",
                (self.cluster.name, namespace, pod),
            ).fetchone()
        if row is None:
            raise BackendError(f"sim {self.cluster.name}: pod {namespace}/{pod} not found")
        if row["node"] is None:
            raise BackendError(f"pod {namespace}/{pod} is not scheduled: it has no logs yet")
        if now < row["start_at"]:
            raise TransientBackendError(f"pod {namespace}/{pod} has not started yet")
        logs: dict[str, str] = json.loads(row["logs"])
        if container is None:
            return next(iter(logs.values()), "")
        if container not in logs:
            raise BackendError(
                f"container {container!r} is not valid for pod {namespace}/{pod} "
                f"(containers: {', '.join(logs) or 'none'})"
            )
        return logs[container]

    def evict(self, pod: str, namespace: str) -> bool:
        """The Eviction API (``disruption``): False when a PodDisruptionBudget refuses for now
        (the pod stays); otherwise the pod is removed and True (also when it was gone). A pod
        of a Job or JobSet that had not finished fails its workload, as backoffLimit 0 does."""
        self._api_call("evict pod")
        with self.state.tx() as conn:
            now = self.state.clock.time(conn)
            row = conn.execute(
                "SELECT * FROM pods WHERE cluster=? AND namespace=? AND name=?",
                (self.cluster.name, namespace, pod),
            ).fetchone()
            if row is None:
                return True
            refusal = eviction_refusal(conn, self.cluster.name, row, now)
            if refusal is not None:
                log.info("eviction of pod %s/%s refused for now: %s", namespace, pod, refusal)
                return False
            unfinished = pod_phase(row, now) in UNFINISHED
            if not unfinished:
                keep_outcome(conn, self.cluster.name, row, now)
            conn.execute(
                "DELETE FROM pods WHERE cluster=? AND namespace=? AND name=?",
                (self.cluster.name, namespace, pod),
            )
            if unfinished:
                fail_workload(conn, self.cluster.name, row, now)
        log.info("evicted pod %s/%s", namespace, pod)
        return True

    # --- starting a workload --------------------------------------------------------------

    def _start(self, conn, body: dict[str, Any]) -> None:
        """Place the workload's pods and fix how each one ends."""
        now = self.state.clock.time(conn)
        plan, message = place(conn, self.cluster.name, body, now)
        runs = self._run(conn, body, plan, now)
        start_at = now + START_DELAY_S * speed()
        record_pods(conn, self.cluster.name, body, plan, runs, message, start_at, now)
        record_run_times(conn, self.cluster.name, body, plan, runs)

    def _run(
        self, conn, body: dict[str, Any], plan: list[Placement], now: float
    ) -> list[PodRun | None]:
        """How each placed pod ends, group by group (None: the pod was not placed). A
        validation workload counts as a night of its pool (what ``drift`` faults count)."""
        night = night_of(body)
        groups: dict[str, list[Placement]] = {}
        for p in plan:
            groups.setdefault(p.group, []).append(p)
        ends: dict[tuple[str, int], PodRun | None] = {}
        for group, members in groups.items():
            nodes = [p.node for p in members]
            if any(n is None for n in nodes):
                ends.update({(group, p.index): None for p in members})
                continue
            template = members[0].template
            pool = self._pool_of(template)
            if night is not None:
                self.state.record_night(conn, self.cluster.name, pool.name, night)
            faults = self.faults(pool.name)
            name = pool.name
            decay = faults.busbw_decay(
                partial(self.state.nights_since, conn, self.cluster.name, name)
            )
            runs = GroupRun(
                self.cluster,
                pool,
                faults,
                body["metadata"]["name"],
                group,
                template,
                [n for n in nodes if n is not None],
                now,
                busbw_decay=decay,
            ).run()
            ends.update({(group, p.index): run for p, run in zip(members, runs, strict=True)})
        return [ends[(p.group, p.index)] for p in plan]

    def _pool_of(self, template: dict[str, Any]):
        labels = (template.get("metadata") or {}).get("labels") or {}
        pool_name = labels.get(POOL_LABEL)
        if not pool_name:
            raise BackendError(f"sim: pod template has no {POOL_LABEL} label")
        return self.cluster.pool(pool_name)


def past_deadline(body: dict[str, Any], pods: Iterable[PodInfo], now: float) -> str | None:
    """The Job controller's ``DeadlineExceeded``: a Job (a JobSet's replicated Job) whose pods
    are not all done ``activeDeadlineSeconds`` after the workload was created, placed or not,
    fails it then, as in a cluster, instead of waiting for ever (a pod whose node went away
    never finds one). None before, or without a deadline."""
    spec = body.get("spec") or {}
    if body.get("kind") == "JobSet":
        limits = {
            r.get("name"): ((r.get("template") or {}).get("spec") or {}).get(
                "activeDeadlineSeconds"
            )
            for r in spec.get("replicatedJobs") or ()
        }
    else:
        limits = {None: spec.get("activeDeadlineSeconds")}
    created = (body.get("metadata") or {}).get("creationTimestamp")
    if not created:
        return None
    age = now - calendar.timegm(time.strptime(created, "%Y-%m-%dT%H:%M:%SZ"))
    for pod in pods:
        job = pod.labels.get(REPLICATED_JOB_LABEL) if body.get("kind") == "JobSet" else None
        limit = limits.get(job)
        if limit and age >= limit and pod.phase not in ("Succeeded", "Failed"):
            return (
                f"DeadlineExceeded: Job {job or body['metadata'].get('name')} was active longer "
                f"than specified deadline ({limit} s; active {age:.0f} s)"
            )
    return None
