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
