"""Event triggers: watch a cluster and hand its node changes to ``node_health_response``.

``NodeWatchTrigger`` is the ``BaseEventTrigger`` behind each cluster's ``node-signals`` asset
(``gpufleet.airflow.assets.node_signals``): Airflow's triggerer runs it for as long as the asset
is watched, and every ``TriggerEvent`` it yields becomes an asset event whose ``extra`` is
``{"from_trigger": True, "payload": <a Batch as a dict>}`` (``models/trigger.py``
``submit_event``), which schedules the response DAG (design: docs/events.md).

List-then-watch, the way Kubernetes clients keep a cache: the cluster's nodes and its Events
about nodes are two streams, each followed from a resource version with bounded watches
(``ClusterBackend.watch_nodes`` / ``watch_node_events``, each in a thread). Every change is folded
into one ``Batch`` (a burst of changes of one node is one entry: its latest state; an Event is
kept by uid), bookmarks move the batch's versions, and the batch is yielded ``flush_s`` after its
first change (so at most every ``flush_s`` seconds). A version the server no longer keeps (410
Gone, ``WatchExpired``) is a relist: the nodes as listed now (``Batch.listed``; a node the
ledger knows that is not in it is gone), and the Events changed since the stream's position,
yielded at once.

Nothing is lost across a restart: ``run`` starts from the versions the response acknowledged
in the ledger (``Ledger.watch_cursor``; the response acks after recording), not from where a
previous run of this trigger got to, so a batch yielded but not handled before a kill is read
again (the response is idempotent). While it runs, a batch yielded ``redeliver_s`` ago (30
minutes) whose versions the response still has not acknowledged (its run failed for good, or
never ran) sends the watch back to the acknowledged versions, as a restart would. A cluster
with no acknowledged cursor starts from its first list: a relist batch of every node at the
list's version (the baseline), and the Events from the Events list's version on (Events from
before gpufleet watched are not replayed).

Between watch rounds, every ``exporter_interval_s`` (60 s), one round of interval readings
(dcgm-exporter, and EC2 instance status on EKS: ``airflow.interval_readings.IntervalReadings``,
which the trigger composes). A snapshot of the readings that say something is handed on in a
batch when it differs from the last one handed on (``Batch.read``; its version, the time read,
is acknowledged as stream ``readings``); a snapshot not acknowledged within ``redeliver_s`` is
handed on again, and a new watcher hands on its first one: the response records each reading
once (docs/events.md, "Coalescing").

Kwargs are plain JSON; ``run`` reads the ledger and the cluster and creates nothing. Time comes
from ``PollingTrigger.clock`` (tests install one they advance). ``api_calls`` counts this
instance's calls to the cluster by kind, ``NodeWatchTrigger.calls`` every instance's in this
process by cluster (what the event-storm bench reads); each yield logs them.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
from collections import Counter
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from gpufleet.airflow.interval_readings import INTERVAL_S, IntervalReadings
from gpufleet.airflow.triggers import PollingTrigger
from gpufleet.domain.clock import sleep_async
from gpufleet.domain.events import later_version
from gpufleet.domain.signals import ready_in

if TYPE_CHECKING:  # imported where used: a DAG file builds these triggers at every parse
    from gpufleet.backends.base import WatchEvent
    from gpufleet.services.nodes.watch_batch import Batch

STREAMS = ("nodes", "events")
READINGS = "readings"  # the stream the interval readings' snapshots are acknowledged as
SCRAPE_THREADS = 64  # the interval scrapes' own threads, every cluster's
ERROR_BACKOFF_S = 30.0  # after an error that is not a 410: look again this much later, at most
REDELIVER_S = 1800.0  # a yielded batch not acknowledged by then is read again
ACK_LOOK_S = 60.0  # how often the acknowledged versions are read while batches are unacked
# A real cluster's watch blocks its thread for up to a round (10 s), two per cluster: they get
# their own threads (made as needed), so a fleet's watches never queue behind each other or
# hold up the default executor the other triggers' polls (``asyncio.to_thread``) run in.
WATCH_THREADS = 512
_executors: dict[str, ThreadPoolExecutor] = {}
_executor_lock = threading.Lock()


def _executor(name: str = "watch") -> ThreadPoolExecutor:
    """The watches' threads (``watch``), or the interval scrapes' (``scrape``)."""
    with _executor_lock:
        if name not in _executors:
            size = WATCH_THREADS if name == "watch" else SCRAPE_THREADS
            _executors[name] = ThreadPoolExecutor(size, thread_name_prefix=f"gpufleet-{name}")
        return _executors[name]


def _watch_executor() -> ThreadPoolExecutor:
    return _executor("watch")


class NodeWatchTrigger(BaseEventTrigger):
    """Watch one cluster's nodes and node Events; yield a ``Batch`` of what changed.

    ``flush_s``: a batch is yielded this long after its first change (a relist at once);
    ``watch_timeout_s``: the longest one watch call may wait for changes (each call waits at
    most ``min(watch_timeout_s, flush_s)``, so a batch is never held longer than that past its
    flush); ``redeliver_s``: a batch yielded this long ago whose versions the response has not
    acknowledged yet (its run failed, or never ran) is read again: the watch goes back to the
    acknowledged versions, as after a restart; ``ledger_conn_id``: the ledger's Airflow
    connection (None: ``gpufleet_ledger``)."""

    # every instance's API calls in this process, by cluster then kind (the storm bench's)
    calls: ClassVar[dict[str, Counter[str]]] = {}

    def __init__(
        self,
        cluster: str,
        flush_s: float = 10.0,
        watch_timeout_s: float = 60.0,
        redeliver_s: float = REDELIVER_S,
        ledger_conn_id: str | None = None,
        exporter_interval_s: float = INTERVAL_S,
    ):
        super().__init__()
        number = isinstance(exporter_interval_s, int | float) and not isinstance(
            exporter_interval_s, bool
        )
        if not (number and math.isfinite(exporter_interval_s) and exporter_interval_s >= 0):
            raise ValueError(
                "NodeWatchTrigger exporter_interval_s must be a number of seconds (0: never), "
                f"not {exporter_interval_s!r}"
            )
        for name, value in (
            ("flush_s", flush_s),
            ("watch_timeout_s", watch_timeout_s),
            ("redeliver_s", redeliver_s),
        ):
            number = isinstance(value, int | float) and not isinstance(value, bool)
            if not (number and math.isfinite(value) and value > 0):
                raise ValueError(
                    f"NodeWatchTrigger {name} must be a positive number, not {value!r}"
                )
        self.cluster = cluster
        self.flush_s = float(flush_s)
        self.watch_timeout_s = float(watch_timeout_s)
        self.redeliver_s = float(redeliver_s)
        self.ledger_conn_id = ledger_conn_id
        self.exporter_interval_s = float(exporter_interval_s)
        self._ledger: Any = None
        # the interval readings, of the nodes the watcher knows (the ledger's as last seen,
        # then the watch's)
        self.readings = IntervalReadings(cluster, self.exporter_interval_s, self._call, self.log)
        self.api_calls: Counter[str] = Counter()
        self.batches = 0  # yielded by this instance
        self.errors = 0  # failed calls (the watch went on)
        self.redeliveries = 0  # times it went back to the acknowledged versions

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "cluster": self.cluster,
                "flush_s": self.flush_s,
                "watch_timeout_s": self.watch_timeout_s,
                "redeliver_s": self.redeliver_s,
                "ledger_conn_id": self.ledger_conn_id,
                "exporter_interval_s": self.exporter_interval_s,
            },
        )

    # --- what it reads ---------------------------------------------------------------------------

    def acked(self) -> dict[str, str | None]:
        """The versions the response acknowledged, per stream (None: never)."""
        from gpufleet.airflow.hooks import LedgerHook

        if self._ledger is None:
            self._ledger = LedgerHook(self.ledger_conn_id).get_conn()
        return {
            stream: self._ledger.watch_cursor(self.cluster, stream)
            for stream in (*STREAMS, READINGS)
        }

    def known_nodes(self) -> dict[str, dict[str, Any]]:
        """The cluster's nodes as the ledger last saw them (gone ones left out), each Ready as
        its kept ``Ready`` condition says (None: none kept): where the interval readings start
        before the watch has said anything, so a node last seen NotReady is not read."""
        if self._ledger is None:
            self.acked()
        return {
            node: {
                "pool": row.get("pool"),
                "provider_id": row.get("provider_id"),
                "ready": ready_in(
                    (str(c.get("type")), str(c.get("status")))
                    for c in row.get("conditions") or ()
                    if isinstance(c, dict)
                ),
            }
            for node, row in self._ledger.watched_nodes(self.cluster).items()
            if not row.get("gone")
        }

    def backend(self):
        """The cluster's backend: its clients (and a cloud's credentials) kept for a while,
        then built again, so a watch that runs for days never holds an expired token."""
        from gpufleet.backends import polling_cluster_backend
        from gpufleet.config.catalog import load_catalog

        return polling_cluster_backend(load_catalog().cluster(self.cluster))

    async def _call(
        self, what: str, fn: Callable[..., Any], *args: Any, pool: str = "watch"
    ) -> Any:
        """One API call to the cluster, in a thread of ``pool`` (the watches', the
        scrapes'), counted."""
        self.api_calls[what] += 1
        NodeWatchTrigger.calls.setdefault(self.cluster, Counter())[what] += 1
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(_executor(pool), partial(fn, *args))

    # --- the loop --------------------------------------------------------------------------------

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from gpufleet.services.nodes.watch_batch import Batch

        clock = PollingTrigger.clock
        backend, at = await self._start()
        self.readings.start()  # the first round with the first watch round
        batch = Batch(self.cluster)
        batch.nodes_from, batch.events_from = at["nodes"], at["events"]
        urgent = await self._first_lists(backend, at, batch)  # a list to hand over at once
        opened: float | None = None  # when the batch got its first change
        # (when, versions) of each batch yielded and not known to be acknowledged yet
        unacked: list[tuple[float, dict[str, str | None]]] = []
        looked = clock.time()  # when the acknowledged versions were last read
        round_s = min(self.watch_timeout_s, self.flush_s)
        while True:
            began = clock.monotonic()
            failed = False
            try:
                backend = await asyncio.to_thread(self.backend)
            except Exception as exc:  # noqa: BLE001 - the one built before serves this round
                self.errors += 1
                self.log.warning("the backend of %s: %s", self.cluster, exc)
            if unacked and clock.time() - looked >= min(self.redeliver_s, ACK_LOOK_S):
                looked = clock.time()
                rewind = await self._unacknowledged(unacked, looked)
                if rewind is not None:
                    at, batch, opened = rewind, Batch(self.cluster), None
                    self.readings.again()  # the readings are handed on again too
                    batch.nodes_from, batch.events_from = at["nodes"], at["events"]
                    urgent = await self._begin(backend, at, batch)
            if not urgent:
                urgent, failed = await self._round(backend, at, batch, round_s)
            now = clock.time()
            if batch and opened is None:
                opened = now
            if batch and (urgent or now - (opened or now) >= self.flush_s):
                self.batches += 1
                self.log.info(
                    "%s: batch %d: %d node(s)%s, %d event(s), at nodes %s / events %s; "
                    "API calls so far: %s",
                    self.cluster,
                    self.batches,
                    len(batch.nodes),
                    " (a relist)" if batch.relist else "",
                    len(batch.events),
                    batch.nodes_version,
                    batch.events_version,
                    dict(self.api_calls),
                )
                yield TriggerEvent(batch.to_dict())
                unacked.append(
                    (
                        clock.time(),
                        {
                            "nodes": batch.nodes_version,
                            "events": batch.events_version,
                            READINGS: batch.readings_version,
                        },
                    )
                )
                batch, opened, urgent = Batch(self.cluster), None, False
                batch.nodes_from, batch.events_from = at["nodes"], at["events"]
                continue
            urgent = False
            pause = ERROR_BACKOFF_S if failed else round_s
            left = pause - (clock.monotonic() - began)
            if left > 0:  # a watch that answered at once (the sim, an error) does not spin
                await sleep_async(clock, left)

    async def _round(
        self, backend, at: dict[str, str | None], batch: Batch, round_s: float
    ) -> tuple[bool, bool]:
        """One round: a bounded watch of each stream (a relist after a 410), and the interval
        readings when they are due, all at once, folded into ``batch``. (Whether the batch is
        to be handed on at once, whether a call failed.)"""
        from gpufleet.backends.base import WatchExpired

        urgent = failed = False
        reading = self.readings.due()
        calls = [
            self._call("watch_nodes", backend.watch_nodes, at["nodes"], round_s),
            self._call("watch_events", backend.watch_node_events, at["events"], round_s),
        ]
        if reading:
            calls.append(self.readings.round(backend, batch))
        results = list(await asyncio.gather(*calls, return_exceptions=True))
        if reading:
            urgent = self._took(results.pop())
        for stream, result in zip(STREAMS, results, strict=True):
            if isinstance(result, WatchExpired):
                self.log.warning("%s %s: %s", self.cluster, stream, result)
                try:
                    at[stream] = await self._relist(backend, stream, at[stream], batch)
                    urgent = True
                except Exception as exc:  # noqa: BLE001 - the next round tries again
                    self.errors += 1
                    self.log.warning("relisting %s %s: %s", self.cluster, stream, exc)
                    failed = True
            elif isinstance(result, BaseException):
                if not isinstance(result, Exception):
                    raise result  # cancelled: the triggerer is stopping this trigger
                self.errors += 1
                self.log.warning("watching %s %s: %s", self.cluster, stream, result)
                failed = True
            else:
                at[stream] = self._fold(stream, result, at[stream], batch)
        return urgent, failed

    async def _start(self) -> tuple[Any, dict[str, str | None]]:
        """The cluster's backend and the acknowledged cursors, looked for until both answer
        (a ledger or catalog that cannot be read now is read again later, never guessed)."""
        clock = PollingTrigger.clock
        while True:
            try:
                at = await asyncio.to_thread(self.acked)
                if self.exporter_interval_s:
                    self.readings.nodes = await asyncio.to_thread(self.known_nodes)
                backend = await asyncio.to_thread(self.backend)
                return backend, at
            except Exception as exc:  # noqa: BLE001 - an asset watcher keeps watching
                self.errors += 1
                self.log.error("starting the watch of %s: %s", self.cluster, exc)
                await sleep_async(clock, ERROR_BACKOFF_S)

    async def _first_lists(self, backend, at: dict[str, str | None], batch: Batch) -> bool:
        """``_begin``, tried again ``ERROR_BACKOFF_S`` later until the cluster answers (a
        cluster of the catalog not onboarded yet, an API server down): an asset watcher keeps
        watching; one that raised would be restarted by the triggerer at once, again and
        again."""
        clock = PollingTrigger.clock
        while True:
            try:
                return await self._begin(backend, at, batch)
            except Exception as exc:  # noqa: BLE001 - listed again later
                self.errors += 1
                self.log.warning("listing %s: %s", self.cluster, exc)
            await sleep_async(clock, ERROR_BACKOFF_S)
            with contextlib.suppress(Exception):  # the one built before serves otherwise
                backend = await asyncio.to_thread(self.backend)

    async def _begin(self, backend, at: dict[str, str | None], batch: Batch) -> bool:
        """Where each stream starts: a stream never acknowledged from its first list (every
        node as listed, a relist; the Events from the list's version on, none replayed).
        Whether ``batch`` is a list to hand over at once."""
        urgent = False
        if at["nodes"] is None:
            nodes, version = await self._call("list_nodes", backend.list_nodes_versioned)
            batch.listed(nodes, version)
            self.readings.know(nodes, whole=True)
            at["nodes"], urgent = version, True
        if at["events"] is None:
            _, version = await self._call("list_events", backend.list_node_events, None)
            batch.reached("events", version)
            at["events"] = version
        return urgent

    async def _unacknowledged(
        self, unacked: list[tuple[float, dict[str, str | None]]], now: float
    ) -> dict[str, str | None] | None:
        """Drop from ``unacked`` the batches the response acknowledged; when the oldest left
        was yielded ``redeliver_s`` ago or more, the acknowledged versions to watch from again
        (``unacked`` emptied), else None. A ledger that cannot be read now is read later."""
        try:
            acked = await asyncio.to_thread(self.acked)
        except Exception as exc:  # noqa: BLE001 - looked at again next time
            self.log.warning("reading %s's acknowledged versions: %s", self.cluster, exc)
            return None
        unacked[:] = [
            (when, versions)
            for when, versions in unacked
            if any(
                v is not None and later_version(acked[stream], v) != acked[stream]
                for stream, v in versions.items()
            )
        ]
        if not unacked or now - unacked[0][0] < self.redeliver_s:
            return None
        self.log.warning(
            "%s: %d batch(es) yielded but not acknowledged for %.0f s (the oldest at nodes %s / "
            "events %s; acknowledged: %s): watching again from the acknowledged versions",
            self.cluster,
            len(unacked),
            now - unacked[0][0],
            unacked[0][1]["nodes"],
            unacked[0][1]["events"],
            acked,
        )
        self.redeliveries += 1
        unacked.clear()
        return dict(acked)

    def _fold(
        self, stream: str, changes: list[WatchEvent], at: str | None, batch: Batch
    ) -> str | None:
        """Every change of one watch call into ``batch``; the stream's position after it."""
        from gpufleet.domain.events import Change

        for change in changes:
            if change.change is Change.BOOKMARK:
                batch.reached(stream, change.version)
            else:
                batch.add(change)
                if change.node is not None:
                    if change.change is Change.DELETED:
                        self.readings.forget(change.node.name)
                    else:
                        self.readings.know([change.node])
            at = later_version(at, change.version)
        return at

    # --- the interval readings' outcome --------------------------------------------------------

    def _took(self, result: Any) -> bool:
        """A readings round's outcome: the snapshot it put in the batch (True), none (False:
        nothing new, or the round failed: the last snapshot stands)."""
        if isinstance(result, BaseException):
            if not isinstance(result, Exception):
                raise result
            self.errors += 1
            self.log.warning("reading %s's exporters and instance status: %s", self.cluster, result)
            return False
        return bool(result)

    async def _relist(self, backend, stream: str, at: str | None, batch: Batch) -> str:
        """After a 410: the nodes as listed now, or the Events changed since ``at`` (all the
        Events the server still keeps when ``at`` itself is too old); the new position."""
        from gpufleet.backends.base import WatchEvent, WatchExpired
        from gpufleet.domain.events import Change

        if stream == "nodes":
            nodes, version = await self._call("list_nodes", backend.list_nodes_versioned)
            batch.listed(nodes, version)
            self.readings.know(nodes, whole=True)
            return version
        try:
            events, version = await self._call("list_events", backend.list_node_events, at)
        except WatchExpired:
            events, version = await self._call("list_events", backend.list_node_events, None)
        for event in events:
            batch.add(WatchEvent(Change.MODIFIED, version, event=event))
        batch.reached("events", version)
        return version
