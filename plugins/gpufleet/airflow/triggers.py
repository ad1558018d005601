"""Triggers: wait for workloads and cloud resources without holding a worker slot.

The triggerer imports these from ``sys.path`` (``plugins/`` is on it), so the classpath is
``gpufleet.airflow.triggers.X``. Kwargs are plain JSON; ``run`` only reads (it may run more than
once) and creates nothing.

``PollingTrigger`` is the one poll loop: poll interval, timeout (from ``started``, a UNIX time
that survives a triggerer restart), the error event and the check-before-defer helper
(``check_now``). A subclass only says what one poll returns (``poll``), which look ends the
wait (``settled``) and what its error and timeout events carry. Time comes from
``PollingTrigger.clock``, a ``gpufleet.domain.clock.Clock`` (the system clock; tests install one
they advance), waited on through ``domain.clock.sleep_async``; the clock is not a kwarg, so a
trigger serializes as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from functools import partial
from typing import Any, ClassVar

from airflow.triggers.base import BaseTrigger, TriggerEvent

from gpufleet.domain.clock import SYSTEM_CLOCK, Clock, sleep_async
from gpufleet.errors import TransientBackendError


class PollingTrigger(BaseTrigger):
    """Poll until a look settles the wait, an unexpected error, or ``timeout`` seconds after
    ``started``. Subclasses give ``poll`` (one synchronous look, run in a thread; a
    ``TransientBackendError`` means "look again later"), ``settled`` (the event a look ends the
    wait with, or None), ``_own_kwargs`` (their serialized kwargs), ``timed_out`` (the timeout
    event) and, if more than ``carry``, ``event_base`` (what every error event carries)."""

    clock: ClassVar[Clock] = SYSTEM_CLOCK

    def __init__(
        self,
        poll_interval: float = 30.0,
        timeout: float = 3600.0,
        started: float | None = None,
        carry: Any = None,
    ):
        super().__init__()
        self.poll_interval = poll_interval
        self.timeout = timeout
        self.started = started if started is not None else self.clock.time()
        self.carry = carry

    # -- what a subclass says -------------------------------------------------------------

    def _own_kwargs(self) -> dict[str, Any]:
        raise NotImplementedError

    def poll(self) -> Any:
        raise NotImplementedError

    def settled(self, look: Any) -> dict[str, Any] | None:
        raise NotImplementedError

    def timed_out(self, last: Any) -> dict[str, Any]:
        """The timeout event; ``last`` is the last look (None when none succeeded)."""
        raise NotImplementedError

    def event_base(self) -> dict[str, Any]:
        return {"carry": self.carry}

    def observed(self, look: Any, previous: Any) -> None:
        """Called with each look and the one before it (to log progress)."""

    # -- the loop -------------------------------------------------------------------------

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                **self._own_kwargs(),
                "poll_interval": self.poll_interval,
                "timeout": self.timeout,
                "started": self.started,
                "carry": self.carry,
            },
        )

    def check_now(self) -> dict[str, Any] | None:
        """One synchronous look before deferring (the providers' pattern): the event when the
        wait is already over, else None. A transient error means "look again later"."""
        try:
            return self.settled(self.poll())
        except TransientBackendError:
            return None

    async def run(self) -> AsyncIterator[TriggerEvent]:
        last = None
        while True:
            try:
                look = await asyncio.to_thread(self.poll)
            except TransientBackendError as exc:  # a blip: keep polling until the deadline
                self.log.warning("polling %s: %s", self._own_kwargs(), exc)
                look = None
            except Exception as exc:  # noqa: BLE001 - reported to the task, which raises
                yield TriggerEvent({**self.event_base(), "status": "error", "message": str(exc)})
                return
            if look is not None:
                self.observed(look, last)
                last = look
                event = self.settled(look)
                if event is not None:
                    yield TriggerEvent(event)
                    return
            if self.clock.time() - self.started > self.timeout:
                yield TriggerEvent(self.timed_out(last))
                return
            await sleep_async(self.clock, self.poll_interval)


class WaitTrigger(BaseTrigger):
    """Fire ``{"status": "done"}`` once ``seconds`` have passed on ``PollingTrigger.clock``
    (a drain batch's soak, the next look at a transition's step): Airflow's
    ``TimeDeltaTrigger``, on the one clock tests advance. ``until`` (a UNIX time, set when the
    trigger is made) survives a triggerer restart."""

    def __init__(self, seconds: float, until: float | None = None):
        super().__init__()
        self.seconds = float(seconds)
        self.until = float(until) if until is not None else PollingTrigger.clock.time() + seconds

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {"seconds": self.seconds, "until": self.until},
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while (left := self.until - PollingTrigger.clock.time()) > 0:
            await sleep_async(PollingTrigger.clock, left)
        yield TriggerEvent({"status": "done", "waited_s": self.seconds})


class WorkloadTrigger(PollingTrigger):
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
        super().__init__(poll_interval, timeout, started, carry)
        self.cluster = cluster
        self.kind = kind
        self.name = name
        self.namespace = namespace
        self.until = until

    def _workload(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "kind": self.kind,
            "name": self.name,
            "namespace": self.namespace,
        }

    def _own_kwargs(self) -> dict[str, Any]:
        return {**self._workload(), "until": self.until}

    def poll(self):
        """The workload's status now."""
        from gpufleet.backends import polling_cluster_backend
        from gpufleet.config.catalog import load_catalog

        backend = polling_cluster_backend(load_catalog().cluster(self.cluster))
        return backend.workload_status(self.kind, self.name, self.namespace)

    def event_base(self) -> dict[str, Any]:
        return {**self._workload(), "carry": self.carry}

    def settled(self, status) -> dict[str, Any] | None:
        """The event this workload status ends the wait with, or None to keep waiting."""
        if status.phase == "Failed" and self.until == "running":
            return {
                **self.event_base(),
                "status": "failed",
                "phase": status.phase,
                "message": status.message,
            }
        if status.done:
            return {
                **self.event_base(),
                "status": "done",
                "phase": status.phase,
                "message": status.message,
            }
        if self.until == "running" and status.phase == "Running":
            return {**self.event_base(), "status": "running", "phase": status.phase}
        return None

    def observed(self, status, previous) -> None:
        if previous is None or status.phase != previous.phase:
            self.log.info(
                "%s %s/%s: %s %s",
                self.kind,
                self.namespace,
                self.name,
                status.phase,
                status.message or "",
            )

    def timed_out(self, last) -> dict[str, Any]:
        phase = last.phase if last is not None else None
        return {
            **self.event_base(),
            "status": "timeout",
            "phase": phase,
            "message": f"still {phase} after {self.timeout:.0f} s",
        }


class CloudResourcesTrigger(PollingTrigger):
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
        super().__init__(poll_interval, timeout, started, carry)
        self.resources = [list(r) for r in resources]

    def _own_kwargs(self) -> dict[str, Any]:
        return {"resources": self.resources}

    def poll(self) -> dict[str, Any]:
        """Every resource's status now; ``status`` set when the wait is over."""
        from gpufleet.backends import cloud_backend, cluster_backend
        from gpufleet.backends.base import ResourceStatus
        from gpufleet.config.catalog import load_catalog
        from gpufleet.services.infrastructure.onboarding import resource_status

        catalog = load_catalog()
        statuses: dict[str, str] = {}
        notes: list[str] = []
        for cluster_name, kind, name in self.resources:
            cluster = catalog.cluster(cluster_name)
            try:
                status, note = resource_status(
                    cloud_backend(cluster), partial(cluster_backend, cluster), kind, name
                )
            except TransientBackendError as exc:
                status, note = "UNKNOWN", str(exc)
            statuses[f"{cluster_name}/{kind}/{name}"] = status
            if note:
                notes.append(note)
        base = {"statuses": statuses, "notes": notes, "carry": self.carry}
        failed = [
            k for k, v in statuses.items() if v in (ResourceStatus.ERROR, ResourceStatus.ABSENT)
        ]
        if failed:
            return {**base, "status": "failed", "message": f"{', '.join(failed)}: failed"}
        if all(v == ResourceStatus.READY for v in statuses.values()):
            return {**base, "status": "ready"}
        return base

    def settled(self, look: dict[str, Any]) -> dict[str, Any] | None:
        """The event when the wait is over (every resource READY, or one failed), else None."""
        return look if look.get("status") else None

    def timed_out(self, last: dict[str, Any] | None) -> dict[str, Any]:
        return {
            **(last or {}),
            "status": "timeout",
            "message": f"not ready after {self.timeout:.0f} s",
            "carry": self.carry,
        }
