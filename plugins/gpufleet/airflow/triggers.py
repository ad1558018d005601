"""Triggers: wait for workloads without holding a worker slot.

The triggerer imports these from ``sys.path`` (``plugins/`` is on it), so the classpath is
``gpufleet.airflow.triggers.X``. Kwargs are plain JSON; ``run`` only reads (it may run more than
once) and creates nothing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from gpufleet.errors import TransientBackendError


class WorkloadTrigger(BaseTrigger):
    """Poll a Job/JobSet until it is done (``until="done"``) or running (``until="running"``).

    Fires ``{"status": "done"|"running"|"failed"|"timeout"|"error", "phase", "message",
    "carry"}``. ``carry`` is whatever JSON the operator handed over to get back on resume: the
    operator's state rides in the event, because Airflow 3.3.2's ``dag.test()`` replaces the
    deferral's kwargs with the event when it runs a trigger inline.
    """

    def __init__(
        self,
        cluster: str,
        kind: str,
        name: str,
        namespace: str,
        until: str = "done",
        poll_interval: float = 30.0,
        timeout: float = 3600.0,
        started: float | None = None,
        carry: Any = None,
    ):
        super().__init__()
        self.cluster = cluster
        self.kind = kind
        self.name = name
        self.namespace = namespace
        self.until = until
        self.poll_interval = poll_interval
        self.timeout = timeout
        self.started = started if started is not None else time.time()
        self.carry = carry

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "gpufleet.airflow.triggers.WorkloadTrigger",
            {
                "cluster": self.cluster,
                "kind": self.kind,
                "name": self.name,
                "namespace": self.namespace,
                "until": self.until,
                "poll_interval": self.poll_interval,
                "timeout": self.timeout,
                "started": self.started,
                "carry": self.carry,
            },
        )

    def _status(self):
        from gpufleet.backends import cluster_backend
        from gpufleet.config.catalog import load_catalog

        backend = cluster_backend(load_catalog().cluster(self.cluster))
        return backend.workload_status(self.kind, self.name, self.namespace)

    def _base(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "kind": self.kind,
            "name": self.name,
            "namespace": self.namespace,
            "carry": self.carry,
        }

    def settled(self, status) -> dict[str, Any] | None:
        """The event this workload status ends the wait with, or None to keep waiting."""
        if status.phase == "Failed" and self.until == "running":
            return {
                **self._base(),
                "status": "failed",
                "phase": status.phase,
                "message": status.message,
            }
        if status.done:
            return {
                **self._base(),
                "status": "done",
                "phase": status.phase,
                "message": status.message,
            }
        if self.until == "running" and status.phase == "Running":
            return {**self._base(), "status": "running", "phase": status.phase}
        return None

    def check_now(self) -> dict[str, Any] | None:
        """One synchronous look before deferring (the providers' pattern): the event when the
        wait is already over, else None. A transient error means "look again later"."""
        try:
            return self.settled(self._status())
        except TransientBackendError:
            return None

    async def run(self) -> AsyncIterator[TriggerEvent]:
        base = self._base()
        last_phase = None
        while True:
            try:
                status = await asyncio.to_thread(self._status)
            except TransientBackendError as exc:  # a blip: keep polling until the deadline
                self.log.warning("polling %s/%s: %s", self.namespace, self.name, exc)
                status = None
            except Exception as exc:  # noqa: BLE001 - reported to the task, which raises
                yield TriggerEvent({**base, "status": "error", "message": str(exc)})
                return
            if status is not None:
                if status.phase != last_phase:
                    self.log.info(
                        "%s %s/%s: %s %s",
                        self.kind,
                        self.namespace,
                        self.name,
                        status.phase,
                        status.message or "",
                    )
                    last_phase = status.phase
                event = self.settled(status)
                if event is not None:
                    yield TriggerEvent(event)
                    return
            if time.time() - self.started > self.timeout:
                yield TriggerEvent(
                    {
                        **base,
                        "status": "timeout",
                        "phase": last_phase,
                        "message": f"still {last_phase} after {self.timeout:.0f} s",
                    }
                )
                return
            await asyncio.sleep(self.poll_interval)


class CloudResourcesTrigger(BaseTrigger):
    """Poll cloud resources an onboarding step started creating until every one is READY.

    ``resources``: ``[cluster, kind, name]`` with kind ``cluster``, ``node_pool``,
    ``filesystem`` or ``nodes`` (every node of pool ``name`` Ready). Fires ``{"status":
    "ready"|"failed"|"timeout"|"error", "statuses": {"cluster/kind/name": status}, "notes",
    "message", "carry"}``: ``failed`` when a resource reports ERROR or disappears. Reads only.
    """

    def __init__(
        self,
        resources: list[list[str]],
        poll_interval: float = 30.0,
        timeout: float = 3600.0,
        started: float | None = None,
        carry: Any = None,
    ):
        super().__init__()
        self.resources = [list(r) for r in resources]
        self.poll_interval = poll_interval
        self.timeout = timeout
        self.started = started if started is not None else time.time()
        self.carry = carry

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "gpufleet.airflow.triggers.CloudResourcesTrigger",
            {
                "resources": self.resources,
                "poll_interval": self.poll_interval,
                "timeout": self.timeout,
                "started": self.started,
                "carry": self.carry,
            },
        )

    def check_now(self) -> dict[str, Any] | None:
        """The event when the wait is over (every resource READY, or one failed), else None."""
        look = self._look()
        return look if look.get("status") else None

    def _look(self) -> dict[str, Any]:
        """Every resource's status now; ``status`` set when the wait is over."""
        from gpufleet.backends import cloud_backend, cluster_backend
        from gpufleet.backends.base import ABSENT, ERROR, READY
        from gpufleet.config.catalog import load_catalog
        from gpufleet.services.onboarding import resource_status

        catalog = load_catalog()
        statuses: dict[str, str] = {}
        notes: list[str] = []
        for cluster_name, kind, name in self.resources:
            cluster = catalog.cluster(cluster_name)
            try:
                status, note = resource_status(
                    cloud_backend(cluster), lambda c=cluster: cluster_backend(c), kind, name
                )
            except TransientBackendError as exc:
                status, note = "UNKNOWN", str(exc)
            statuses[f"{cluster_name}/{kind}/{name}"] = status
            if note:
                notes.append(note)
        base = {"statuses": statuses, "notes": notes, "carry": self.carry}
        failed = [k for k, v in statuses.items() if v in (ERROR, ABSENT)]
        if failed:
            return {**base, "status": "failed", "message": f"{', '.join(failed)}: failed"}
        if all(v == READY for v in statuses.values()):
            return {**base, "status": "ready"}
        return base

    async def run(self) -> AsyncIterator[TriggerEvent]:
        last: dict[str, Any] | None = None
        while True:
            try:
                last = await asyncio.to_thread(self._look)
            except Exception as exc:  # noqa: BLE001 - reported to the task, which raises
                yield TriggerEvent({"status": "error", "message": str(exc), "carry": self.carry})
                return
            if last.get("status"):
                yield TriggerEvent(last)
                return
            if time.time() - self.started > self.timeout:
                yield TriggerEvent(
                    {
                        **(last or {}),
                        "status": "timeout",
                        "message": f"not ready after {self.timeout:.0f} s",
                        "carry": self.carry,
                    }
                )
                return
            await asyncio.sleep(self.poll_interval)
