"""One cluster's interval readings, for its ``NodeWatchTrigger`` (docs/events.md).

Every ``interval_s`` (60 s), between the watch's rounds: the cluster's dcgm-exporter pods
listed once (``ClusterBackend.dcgm_exporters``) and each pod's ``/metrics`` read through the
API server's proxy (``exporter_metrics``), at most ``SCRAPES_AT_ONCE`` at once, decided by the
nightly's passive rule (``services.nodes.readings``); and, on an EKS cluster, EC2's
``DescribeInstanceStatus`` of the nodes' instances (``backends.instance_status``), one request
per 100 nodes. Only the nodes the watcher knows in a pool and not NotReady are read (the
ledger's nodes as last seen, then the watch's: ``know``/``forget``). The readings that say
something (a bad or unknown exporter reading, an impaired check, a scheduled event) are a
snapshot put in the watch's batch when it differs from the last one handed on
(``Batch.read``); ``again`` hands the next one on whatever it holds (the watch went back to the
acknowledged versions).

The calls go through the trigger's ``call`` (counted with its own, run in its ``scrape``
threads); the time is ``PollingTrigger.clock``'s. Kept apart from the watch: the watch follows
two streams of changes, this reads a state at an interval.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from gpufleet.airflow.triggers import PollingTrigger

if TYPE_CHECKING:  # imported where used: a DAG file builds the trigger at every parse
    from gpufleet.services.nodes.watch_batch import Batch

INTERVAL_S = 60.0  # dcgm-exporter and EC2 status read this often (docs/events.md)
SCRAPES_AT_ONCE = 16  # one cluster's exporter reads in flight at once
SOURCE_TTL_S = 600.0  # a cloud's instance status client is built again this often

Call = Callable[..., Awaitable[Any]]  # the trigger's counted call: (what, fn, *args, pool=)


class IntervalReadings:
    """The interval readings of ``cluster`` every ``interval_s`` seconds (0: never), through
    ``call`` (the trigger's ``_call``); ``log``: the trigger's."""

    def __init__(self, cluster: str, interval_s: float, call: Call, log: Any):
        self.cluster = cluster
        self.interval_s = interval_s
        self._call = call
        self.log = log
        # the nodes the watcher knows: name -> {"pool", "provider_id", "ready"}
        self.nodes: dict[str, dict[str, Any]] = {}
        self._next_at: float | None = None  # when the next round is due (None: never)
        self._shipped: str | None = None  # the key of the last snapshot handed on
        self._source: tuple[float, Any] | None = None  # (built at, instance status source)
        self._exporters_seen: bool | None = None  # the cluster runs dcgm-exporter pods

    # --- the nodes -------------------------------------------------------------------------------

    def know(self, nodes: Iterable[Any], whole: bool = False) -> None:
        """Keep what the readings need of ``nodes`` (``whole``: they are every node)."""
        known = {
            n.name: {"pool": n.pool, "provider_id": n.provider_id, "ready": n.ready} for n in nodes
        }
        self.nodes = known if whole else {**self.nodes, **known}

    def forget(self, node: str) -> None:
        self.nodes.pop(node, None)

    # --- when ------------------------------------------------------------------------------------

    def start(self) -> None:
        """The first round with the watch's first round (none when off)."""
        if self.interval_s:
            self._next_at = PollingTrigger.clock.time()

    def due(self) -> bool:
        """Whether a round is due now; if so, the next one is scheduled an interval on."""
        clock = PollingTrigger.clock
        if self._next_at is None or clock.time() < self._next_at:
            return False
        self._next_at = clock.time() + self.interval_s
        return True

    def again(self) -> None:
        """The next snapshot is handed on even when it is the last one's."""
        self._shipped = None

    # --- a round ---------------------------------------------------------------------------------

    async def round(self, backend: Any, batch: Batch) -> bool:
        """One round; the snapshot put in ``batch`` when it differs from the last one handed
        on. Whether it did."""
        from gpufleet.services.nodes.readings import key_of

        clock = PollingTrigger.clock
        read = {
            n: v for n, v in self.nodes.items() if v.get("pool") and v.get("ready") is not False
        }
        exporters, instances = await asyncio.gather(
            self._scrape(backend, read), self._instances(read)
        )
        key = key_of([exporters, instances])
        if key == self._shipped or (self._shipped is None and not exporters and not instances):
            return False
        self._shipped = key
        batch.read(exporters, instances, str(int(clock.time() * 1000)))
        return True

    async def _scrape(self, backend: Any, nodes: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """Every node's dcgm-exporter reading that is not healthy (one list of the pods, one
        read of each). A cluster that runs no exporter pod at all has no such source."""
        from gpufleet.services.nodes.readings import unknown_reading

        pods = await self._call("list_exporters", backend.dcgm_exporters, pool="scrape")
        if not pods:
            if self._exporters_seen is not False:
                self.log.info("%s runs no dcgm-exporter: its metrics are not read", self.cluster)
            self._exporters_seen = False
            return {}
        self._exporters_seen = True
        out: dict[str, Any] = {}
        targets = []
        for node in sorted(nodes):
            pod = pods.get(node)
            if pod is None:
                out[node] = unknown_reading("no dcgm-exporter pod runs on the node", "no-pod")
            elif pod.phase != "Running":
                why = f"its dcgm-exporter pod {pod.namespace}/{pod.name} is {pod.phase}"
                out[node] = unknown_reading(why, "not-running")
            else:
                targets.append((node, pod))
        gate = asyncio.Semaphore(SCRAPES_AT_ONCE)

        async def one(node: str, pod: Any) -> tuple[str, Any]:
            async with gate:
                try:
                    return node, await self._call(
                        "scrape_exporter", _read_exporter, backend, pod, node, pool="scrape"
                    )
                except Exception as exc:  # noqa: BLE001 - unknown, never healthy
                    why = f"its dcgm-exporter could not be read ({exc})"
                    return node, unknown_reading(why, "unreadable")

        for node, reading in await asyncio.gather(*(one(n, p) for n, p in targets)):
            if reading is not None:
                out[node] = reading
        return dict(sorted(out.items()))

    def instance_source(self) -> Any:
        """The cluster's EC2 instance status source (None: its cloud has none, GKE), built
        again every ``SOURCE_TTL_S``."""
        from gpufleet.backends.instance_status import instance_status_source
        from gpufleet.config.catalog import load_catalog

        now = PollingTrigger.clock.monotonic()
        if self._source is None or now - self._source[0] >= SOURCE_TTL_S:
            self._source = (now, instance_status_source(load_catalog().cluster(self.cluster)))
        return self._source[1]

    async def _instances(self, nodes: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """Every node's EC2 instance status that says something (one request per 100
        instances); none on a cloud without the source."""
        from gpufleet.backends.base import INSTANCE_STATUS_BATCH
        from gpufleet.services.nodes.readings import instance_reading

        source = await asyncio.to_thread(self.instance_source)
        if source is None:
            return {}
        by_pid = {v["provider_id"]: n for n, v in nodes.items() if v.get("provider_id")}
        pids = sorted(by_pid)
        out: dict[str, Any] = {}
        for i in range(0, len(pids), INSTANCE_STATUS_BATCH):
            chunk = pids[i : i + INSTANCE_STATUS_BATCH]
            found = await self._call(
                "describe_instance_status", source.instance_statuses, chunk, pool="scrape"
            )
            for pid, status in found.items():
                reading = instance_reading(status)
                if reading is not None and pid in by_pid:
                    out[by_pid[pid]] = reading
        return dict(sorted(out.items()))


def _read_exporter(backend: Any, pod: Any, node: str) -> dict[str, Any] | None:
    """Read one exporter pod and decide (in a scrape thread: parsing is CPU, off the loop)."""
    from gpufleet.services.nodes.readings import exporter_reading

    return exporter_reading(backend.exporter_metrics(pod), node)
