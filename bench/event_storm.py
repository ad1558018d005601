"""An event storm at fleet scale (issue 33): a generated sim fleet (``bench.fleetgen``: 2,000
pools of 16 nodes by default), one real ``NodeWatchTrigger`` per cluster, all run concurrently
in ONE asyncio loop of this process as Airflow's triggerer runs them; first a quiet simulated
hour, then a storm: 10% of all nodes log a fatal GPU Xid (79, 48, 64, 74, 95, 119, mixed) at
seeded times within 5 simulated minutes, each the sim's own action (``SimNodeActions.gpu_fault``,
at its time: the bench performs it when it moves the clock past that time, before the triggers
wake, so the cluster's next watch round sees it).

    python -m bench.event_storm [--pools 2000] [--per-cluster 10] [--nodes 16]
                                [--fraction 0.1] [--quiet-s 3600] [--storm-s 300]
                                [--settle-s 300] [--flush-s 10] [--seed 7]
                                [--exporter-interval-s 60]

Time is simulated and deterministic: the sim's clock is frozen and only this bench moves it.
``PollingTrigger.clock`` is a ``StormClock``: a trigger's sleep (``sleep_async``: in a thread)
waits on it; once every trigger waits, every batch yielded meanwhile has been handled and
nothing else can happen, the bench moves the clock (and the sim's) to the earliest wake-up.
Every batch yielded is handled as the DAG's ``respond`` task handles it
(``EventResponse.respond``, one run id per batch, on a temp SQLite ledger), while every trigger
waits: its CPU and wall time are measured apart from the triggers'.

Reported: the faulted nodes quarantined (ledger row out of service and the quarantine taint on
the node: must equal the faults), the triggers' CPU seconds (``time.process_time`` of this
process over the phase, less the response's and less the sim's own work inside the API calls,
which a real API server does elsewhere: both shown) and the API calls per cluster in the storm
against the quiet hour (per simulated minute, and the ratio), the most watch calls in flight
at once per cluster (bound: 2, the nodes watch and the Events watch: the interval readings'
calls are not watches, counted apart), the interval readings' calls per cluster by kind
(``--exporter-interval-s``: one list of the exporter pods, one read per node, and on an
EKS-shaped cluster one DescribeInstanceStatus per 100 nodes, each round; 0: none) and their
share of the calls, batches per cluster, and the response's time per batch (p50/p95). Exits 1
when a faulted node is not quarantined, a healthy node was taken out, or a cluster had more
watch calls in flight than its bound.

The sim's cluster backend is built once per cluster and kept (``polling_cluster_backend`` keeps
a real cluster's clients the same way; the sim's is otherwise built anew every round).

Wall time on the project's 2-core machines, shared, with ``--exporter-interval-s 0`` (no
interval readings): ``--pools 200`` about 1.5 minutes; ``--pools 2000`` is bound by the sim
answering the watches (5 to 9 ms of CPU a call, 144,000 calls in a quiet hour): about 8
minutes with ``--quiet-s 300`` and 19 with the whole hour (docs/PERFORMANCE.md, "Event storm at
fleet scale"). With the readings (the trigger's default, 60 s) every GPU node's exporter is
read and parsed once a simulated minute: ``--pools 40 --quiet-s 600`` takes about 5 minutes
(about 6.6 ms of the triggers' CPU per exporter read), ``--pools 200`` over 15.
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import logging
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

FATAL_XIDS = (79, 48, 64, 74, 95, 119)  # NVIDIA's Xids that take a GPU out of service
WATCH_BOUND = 2  # watch calls in flight per cluster: nodes + Events
WATCHES = ("watch_nodes", "watch_node_events")
READING_CALLS = ("list_exporters", "scrape_exporter", "describe_instance_status")
WALL_WAIT_S = 120.0  # the longest the bench waits, on the wall clock, for the triggers to rest


class StuckError(RuntimeError):
    """The triggers did not all come to rest in time (a trigger hung or died)."""


class StormClock:
    """``PollingTrigger.clock`` for the bench: the sim's frozen time, kept here and moved only by
    the bench (``advance_to``, which moves the sim's clock too). ``sleep`` (run in a worker
    thread by ``sleep_async``) waits until the clock has reached the time asked for; the
    bench moves the clock only when every trigger sleeps (``rest``). Each sleeper waits on
    its own event, woken only when its time has come."""

    def __init__(self, sim_clock):
        self.sim = sim_clock
        self._now = sim_clock.freeze()
        self._lock = threading.Lock()
        self._rested = threading.Condition(self._lock)  # the bench waits on it
        self._sleepers: list[tuple[float, int, threading.Event]] = []  # a heap, by wake-up
        self._seq = 0
        self._closed = False

    def time(self) -> float:
        return self._now

    def now(self) -> datetime:
        return datetime.fromtimestamp(self._now, UTC)

    def monotonic(self) -> float:
        return self._now

    def sleep(self, seconds: float) -> None:
        woken = threading.Event()
        with self._lock:
            if self._closed:
                return
            self._seq += 1
            heapq.heappush(self._sleepers, (self._now + max(seconds, 0.0), self._seq, woken))
            self._rested.notify()
        woken.wait()

    def rest(self, sleepers: int, timeout_s: float = WALL_WAIT_S) -> float:
        """Wait until ``sleepers`` sleep; the earliest time one of them wakes at."""
        with self._rested:
            if not self._rested.wait_for(lambda: len(self._sleepers) >= sleepers, timeout_s):
                raise StuckError(
                    f"{len(self._sleepers)} of {sleepers} trigger(s) asleep after {timeout_s} s"
                )
            return self._sleepers[0][0]

    def advance_to(self, until: float, then: Callable[[float], None] | None = None) -> None:
        """Move the time (and the sim's) to ``until``, call ``then`` with it (every trigger
        still sleeping), and wake the sleepers whose time came."""
        with self._lock:
            if until > self._now:
                self._now = self.sim.advance(until - self._now)
            if then is not None:
                then(self._now)
            while self._sleepers and self._sleepers[0][0] <= self._now:
                heapq.heappop(self._sleepers)[2].set()

    def close(self) -> None:
        """Wake every sleeper; later sleeps return at once (the triggers are being stopped)."""
        with self._lock:
            self._closed = True
            for _, _, woken in self._sleepers:
                woken.set()
            self._sleepers.clear()


class CountingBackend:
    """A cluster's backend as the trigger sees it, counting the watch calls in flight (the most
    at once) and the CPU the sim spends answering them and the interval readings' calls (the
    API server's and the exporters' work, not the trigger's: ``time.thread_time`` of the
    call's own thread)."""

    def __init__(self, backend, probe: Probe):
        self._backend = backend
        self._probe = probe

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self._backend, name)
        reading = name in ("dcgm_exporters", "exporter_metrics")  # not watches: not in flight
        if name not in (*WATCHES, "list_nodes_versioned", "list_node_events") and not reading:
            return fn
        probe = self._probe

        def call(*args: Any) -> Any:
            if not reading:
                probe.enter(name)
            began = time.thread_time()
            try:
                return fn(*args)
            finally:
                probe.leave(name, time.thread_time() - began, counted=not reading)

        return call


@dataclass
class Probe:
    """One cluster's watch calls: in flight now, the most at once, the sim's CPU."""

    cluster: str
    lock: threading.Lock = field(default_factory=threading.Lock)
    in_flight: int = 0
    most: int = 0
    sim_cpu_s: float = 0.0

    def enter(self, name: str) -> None:
        with self.lock:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)

    def leave(self, name: str, cpu_s: float, counted: bool = True) -> None:
        with self.lock:
            self.in_flight -= 1 if counted else 0
            self.sim_cpu_s += cpu_s


@dataclass
class Phase:
    """What one phase (the quiet hour, the storm) cost."""

    name: str
    seconds: float  # simulated
    cpu_s: float = 0.0  # the process's, over the phase
    respond_cpu_s: float = 0.0
    sim_cpu_s: float = 0.0  # the sim answering the API calls (an API server's work)
    harness_cpu_s: float = 0.0  # the bench moving the clock
    wall_s: float = 0.0
    calls: dict[str, int] = field(default_factory=dict)  # cluster -> API calls
    readings: dict[str, int] = field(default_factory=dict)  # interval readings' calls, by kind
    watch_calls: dict[str, int] = field(default_factory=dict)  # cluster -> calls but readings
    batches: dict[str, int] = field(default_factory=dict)  # cluster -> batches yielded
    respond_s: list[float] = field(default_factory=list)  # wall time per batch

    @property
    def trigger_cpu_s(self) -> float:
        return self.cpu_s - self.respond_cpu_s - self.sim_cpu_s - self.harness_cpu_s

    def per_min(self, value: float) -> float:
        return value / (self.seconds / 60.0)


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


@dataclass
class StormResult:
    spec: StormSpec
    clusters: int
    nodes: int
    faulted: dict[tuple[str, str], int]  # (cluster, node) -> Xid
    out_after_s: list[float]  # simulated seconds from each fault to its node's quarantine
    quarantined: int
    missed: list[tuple[str, str]]
    healthy_out: list[tuple[str, str]]
    most_watches: dict[str, int]
    quiet: Phase
    storm: Phase
    setup_s: float
    wall_s: float

    @property
    def ok(self) -> bool:
        return (
            not self.missed
            and not self.healthy_out
            and self.quarantined == len(self.faulted)
            and max(self.most_watches.values(), default=0) <= WATCH_BOUND
        )


class Storm:
    """The fleet, its triggers on one loop, the clock and the response."""

    def __init__(
        self,
        clusters: list[str],
        flush_s: float,
        executor: ThreadPoolExecutor,
        ledger_url: str,
        exporter_interval_s: float = 60.0,
    ):
        from gpufleet.airflow.event_triggers import NodeWatchTrigger
        from gpufleet.airflow.triggers import PollingTrigger
        from gpufleet.backends import polling_cluster_backend
        from gpufleet.backends.sim.state import SimState
        from gpufleet.config.catalog import load_catalog
        from gpufleet.services.nodes.events import EventResponse
        from gpufleet.store import Ledger

        self.catalog = load_catalog()
        self.sim = SimState()
        self.clock = StormClock(self.sim.clock)
        PollingTrigger.clock = self.clock
        self.ledger = Ledger(ledger_url, clock=self.clock)
        self.probes = {c: Probe(c) for c in clusters}
        self.backends = {
            c: CountingBackend(polling_cluster_backend(self.catalog.cluster(c)), self.probes[c])
            for c in clusters
        }
        backends = self.backends

        class StormTrigger(NodeWatchTrigger):  # the real trigger, its backend kept
            def backend(self):
                return backends[self.cluster]

        # its log is the trigger's own (``gpufleet.airflow.event_triggers.StormTrigger``)
        StormTrigger.__module__ = NodeWatchTrigger.__module__

        NodeWatchTrigger.calls.clear()
        self.triggers = [
            StormTrigger(cluster=c, flush_s=flush_s, exporter_interval_s=exporter_interval_s)
            for c in clusters
        ]
        self.response = EventResponse(self.ledger, self.catalog)
        self.executor = executor
        self.pending: deque[dict[str, Any]] = deque()  # payloads yielded, not handled yet
        self.runs = 0
        self.respond_cpu_s = 0.0
        self.respond_s: list[float] = []
        self.harness_cpu_s = 0.0
        self.world: dict[str, Any] = {}  # cluster -> the sim's own backend (its node actions)
        self.faults: deque[tuple[float, str, str, int]] = deque()  # (at, cluster, node, xid)

    def _happen(self, now: float) -> None:
        """The faults whose time has come, each the sim's own action at its time: while every
        trigger sleeps, so each cluster's next watch round sees them (a fault the sim fired
        itself on a read could land between the round's two watch calls, or not)."""
        while self.faults and self.faults[0][0] <= now:
            at, cluster, node, xid = self.faults.popleft()
            self.world[cluster].gpu_fault(node, xid=xid, at=at)

    async def _watch(self, trigger) -> None:
        async for event in trigger.run():
            self.pending.append(event.payload)  # the triggerer hands it on; the DAG responds

    def _respond_all(self) -> None:
        from gpufleet.services.nodes.watch_batch import Batch

        while self.pending:
            payload = self.pending.popleft()
            self.runs += 1
            began, cpu = time.perf_counter(), time.process_time()
            self.response.respond(Batch.from_dict(payload), f"storm-{self.runs}")
            self.respond_cpu_s += time.process_time() - cpu
            self.respond_s.append(time.perf_counter() - began)

    async def run_until(self, until: float) -> None:
        """Run the triggers, handle their batches, and move the clock until ``until``: each
        time every trigger sleeps, the batches they yielded are handled, then the clock moves
        to the earliest wake-up. Returns with every trigger asleep at ``until``."""
        loop = asyncio.get_running_loop()
        while True:
            wake = await loop.run_in_executor(self.executor, self.clock.rest, len(self.triggers))
            self._respond_all()
            if self.clock.time() >= until:
                return
            cpu = time.process_time()
            self.clock.advance_to(min(wake, until), self._happen)
            self.harness_cpu_s += time.process_time() - cpu

    def start(self) -> list[asyncio.Task]:
        return [asyncio.ensure_future(self._watch(t)) for t in self.triggers]

    def calls(self) -> dict[str, int]:
        from gpufleet.airflow.event_triggers import NodeWatchTrigger

        return {c: sum(n.values()) for c, n in NodeWatchTrigger.calls.items()}

    def watch_calls(self) -> dict[str, int]:
        """Per cluster, the calls that are not the interval readings' (lists and watches)."""
        from gpufleet.airflow.event_triggers import NodeWatchTrigger

        return {
            c: sum(v for k, v in n.items() if k not in READING_CALLS)
            for c, n in NodeWatchTrigger.calls.items()
        }

    def reading_calls(self) -> Counter[str]:
        """Every cluster's interval readings' calls, by kind."""
        from gpufleet.airflow.event_triggers import NodeWatchTrigger

        out: Counter[str] = Counter()
        for counted in NodeWatchTrigger.calls.values():
            out.update({k: v for k, v in counted.items() if k in READING_CALLS})
        return out

    def batches(self) -> dict[str, int]:
        return {t.cluster: t.batches for t in self.triggers}

    async def phase(self, name: str, seconds: float) -> Phase:
        """Run ``seconds`` of simulated time, measured."""
        calls0, batches0, readings0 = self.calls(), self.batches(), self.reading_calls()
        watches0 = self.watch_calls()
        sim0 = {c: p.sim_cpu_s for c, p in self.probes.items()}
        respond0, harness0, runs0 = self.respond_cpu_s, self.harness_cpu_s, len(self.respond_s)
        cpu0, wall0 = time.process_time(), time.perf_counter()
        await self.run_until(self.clock.time() + seconds)
        phase = Phase(name, seconds)
        phase.cpu_s = time.process_time() - cpu0
        phase.wall_s = time.perf_counter() - wall0
        phase.respond_cpu_s = self.respond_cpu_s - respond0
        phase.harness_cpu_s = self.harness_cpu_s - harness0
        phase.sim_cpu_s = sum(p.sim_cpu_s - sim0[c] for c, p in self.probes.items())
        phase.calls = {c: n - calls0.get(c, 0) for c, n in self.calls().items()}
        phase.batches = {c: n - batches0.get(c, 0) for c, n in self.batches().items()}
        phase.readings = dict(self.reading_calls() - readings0)
        phase.watch_calls = {c: n - watches0.get(c, 0) for c, n in self.watch_calls().items()}
        phase.respond_s = self.respond_s[runs0:]
        return phase


def plan_faults(
    catalog, clusters: list[str], fraction: float, start: float, window_s: float, seed: int
) -> list[tuple[float, str, str, int]]:
    """(at, cluster, node, xid): ``fraction`` of every node, at seeded times in the window."""
    from gpufleet.backends.sim.state import SimState

    rng = random.Random(seed)
    nodes = [
        (c, SimState.node_name(c, p.name, i))
        for c in clusters
        for p in catalog.cluster(c).node_pools
        for i in range(p.nodes)
    ]
    chosen = rng.sample(nodes, max(1, round(fraction * len(nodes))))
    return sorted(
        (start + rng.uniform(0.0, window_s), c, n, rng.choice(FATAL_XIDS)) for c, n in chosen
    )


@dataclass(frozen=True)
class StormSpec:
    """The fleet (``pools`` of ``nodes`` nodes, ``per_cluster`` pools a cluster), the quiet
    period (``quiet_s``), the storm (``fraction`` of every node faulted within ``storm_s``,
    then ``settle_s`` more, measured with it), the triggers' ``flush_s`` and the ``seed``."""

    pools: int = 2000
    per_cluster: int = 10
    nodes: int = 16
    fraction: float = 0.1
    quiet_s: float = 3600.0
    storm_s: float = 300.0
    settle_s: float = 300.0
    flush_s: float = 10.0
    seed: int = 7
    exporter_interval_s: float = 60.0


def run_storm(spec: StormSpec, work: Path | None = None) -> StormResult:
    """The bench, in a fresh sim state and ledger under ``work`` (a temp folder when None).
    Sets ``GPUFLEET_CATALOG_DIR``, ``GPUFLEET_STATE_DIR`` and ``GPUFLEET_LEDGER_URL`` and
    ``PollingTrigger.clock`` for its run and puts them back after."""
    from bench.fleetgen import generate_catalog
    from gpufleet.airflow.triggers import PollingTrigger

    clock = PollingTrigger.clock

    own = work is None
    work = Path(tempfile.mkdtemp(prefix="gpufleet-event-storm-")) if work is None else work
    saved = {
        k: os.environ.get(k)
        for k in (
            "GPUFLEET_CATALOG_DIR",
            "GPUFLEET_STATE_DIR",
            "GPUFLEET_LEDGER_URL",
            "AIRFLOW_CONN_GPUFLEET_LEDGER",
            "GPUFLEET_SIM_SPEED",
            "GPUFLEET_SIM_CALL_LOG",
        )
    }
    generate_catalog(work / "fleet", spec.pools, per_cluster=spec.per_cluster)
    text = (work / "fleet" / "fleet.yaml").read_text()
    text = text.replace("nodes: 16", f"nodes: {spec.nodes}")
    (work / "fleet" / "fleet.yaml").write_text(text)
    for k in saved:
        os.environ.pop(k, None)
    os.environ["GPUFLEET_CATALOG_DIR"] = str(work / "fleet")
    os.environ["GPUFLEET_STATE_DIR"] = str(work / "state")
    ledger_url = f"sqlite:///{work / 'ledger.db'}"
    os.environ["GPUFLEET_LEDGER_URL"] = ledger_url
    try:
        return asyncio.run(_run(spec, ledger_url))
    finally:
        PollingTrigger.clock = clock
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if own:
            shutil.rmtree(work, ignore_errors=True)


async def _run(spec: StormSpec, ledger_url: str) -> StormResult:
    from gpufleet.backends.sim.cluster import SimClusterBackend
    from gpufleet.config.catalog import load_catalog
    from gpufleet.domain.nodes import NodeState
    from gpufleet.domain.workloads import QUARANTINE_KEY

    began = time.perf_counter()
    catalog = load_catalog()
    clusters = sorted(catalog.clusters)
    # a thread for each trigger's sleep and its other off-loop work, and the bench's own
    executor = ThreadPoolExecutor(2 * len(clusters) + 8, thread_name_prefix="storm")
    loop = asyncio.get_running_loop()
    loop.set_default_executor(executor)
    storm = Storm(clusters, spec.flush_s, executor, ledger_url, spec.exporter_interval_s)
    world = {c: SimClusterBackend(catalog.cluster(c), storm.sim) for c in clusters}  # seeds
    total_nodes = sum(p.nodes for c in clusters for p in catalog.cluster(c).node_pools)
    tasks = storm.start()
    try:
        # the first list of every cluster (its baseline), handled before the quiet hour
        await storm.run_until(storm.clock.time() + spec.flush_s)
        setup_s = time.perf_counter() - began
        quiet = await storm.phase("quiet", spec.quiet_s)
        start = storm.clock.time()
        faults = plan_faults(catalog, clusters, spec.fraction, start, spec.storm_s, spec.seed)
        storm.world, storm.faults = world, deque(faults)
        storm_phase = await storm.phase("storm", spec.storm_s + spec.settle_s)
    finally:
        for task in tasks:
            task.cancel()
        storm.clock.close()
        await asyncio.gather(*tasks, return_exceptions=True)
    faulted = {(c, n): xid for _, c, n, xid in faults}
    fault_at = {(c, n): at for at, c, n, _ in faults}
    out_of_service = {str(s) for s in NodeState if s is not NodeState.RELEASED}
    since = {
        (r["cluster"], r["node"]): _unix(r["since"])
        for r in storm.ledger.node_states(clusters, states=out_of_service)
    }
    rows = set(since)
    tainted = set()
    for c in clusters:
        for n in world[c].nodes():
            if any(t.key == QUARANTINE_KEY for t in n.taints):
                tainted.add((c, n.name))
    handled = rows & tainted
    executor.shutdown(wait=False, cancel_futures=True)
    return StormResult(
        spec=spec,
        clusters=len(clusters),
        nodes=total_nodes,
        faulted=faulted,
        out_after_s=sorted(since[k] - fault_at[k] for k in handled & set(faulted)),
        quarantined=len(handled & set(faulted)),
        missed=sorted(set(faulted) - handled),
        healthy_out=sorted((rows | tainted) - set(faulted)),
        most_watches={c: p.most for c, p in storm.probes.items()},
        quiet=quiet,
        storm=storm_phase,
        setup_s=setup_s,
        wall_s=time.perf_counter() - began,
    )


def _unix(value: Any) -> float:
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.timestamp()


def _share(phase: Phase) -> float:
    total = sum(phase.calls.values())
    return sum(phase.readings.values()) / total if total else 0.0


def report(r: StormResult) -> str:
    q, s = r.quiet, r.storm

    def per_cluster(values: dict[str, int]) -> str:
        v = list(values.values()) or [0]
        return f"mean {statistics.fmean(v):.1f}, max {max(v)}"

    def ratio(a: float, b: float) -> str:
        return f"{a / b:.2f}x" if b else "n/a"

    qc, sc = statistics.fmean(q.calls.values()), statistics.fmean(s.calls.values())
    lines = [
        f"fleet: {r.spec.pools} pools in {r.clusters} clusters, {r.nodes} nodes; "
        f"{r.clusters} NodeWatchTriggers on one asyncio loop",
        f"storm: {len(r.faulted)} nodes ({len(r.faulted) / r.nodes:.1%}) logged a fatal Xid "
        f"({', '.join(f'{x}: {n}' for x, n in sorted(Counter(r.faulted.values()).items()))}) "
        f"within {r.spec.storm_s:.0f} s (measured over {s.seconds:.0f} simulated s)",
        f"quarantined: {r.quarantined} of {len(r.faulted)} faulted"
        + (f"; NOT handled: {len(r.missed)} (first {r.missed[:5]})" if r.missed else "")
        + f"; healthy nodes taken out: {len(r.healthy_out)}",
        f"fault to quarantine (simulated): p50 {_pct(r.out_after_s, 0.5):.0f} s, "
        f"p95 {_pct(r.out_after_s, 0.95):.0f} s, max {max(r.out_after_s, default=0):.0f} s",
        f"watch calls in flight per cluster, most at once: {max(r.most_watches.values())} "
        f"(bound {WATCH_BOUND})",
        "",
        f"{'':28} {'quiet':>12} {'storm':>12} {'ratio/min':>10}",
        f"{'simulated seconds':28} {q.seconds:12.0f} {s.seconds:12.0f}",
        f"{'API calls/cluster (mean)':28} {qc:12.1f} {sc:12.1f} "
        f"{ratio(s.per_min(sc), q.per_min(qc)):>10}",
        f"{'API calls/cluster (max)':28} {max(q.calls.values()):12d} {max(s.calls.values()):12d}",
        f"{'batches/cluster (mean)':28} {statistics.fmean(q.batches.values()):12.2f} "
        f"{statistics.fmean(s.batches.values()):12.2f}",
        f"{'batches/cluster (max)':28} {max(q.batches.values()):12d} "
        + f"{max(s.batches.values()):12d}",
        f"{'triggers CPU s':28} {q.trigger_cpu_s:12.2f} {s.trigger_cpu_s:12.2f} "
        f"{ratio(s.per_min(s.trigger_cpu_s), q.per_min(q.trigger_cpu_s)):>10}",
        f"{'  + sim answering calls':28} {q.sim_cpu_s:12.2f} {s.sim_cpu_s:12.2f}",
        f"{'response CPU s':28} {q.respond_cpu_s:12.2f} {s.respond_cpu_s:12.2f}",
        f"{'wall s':28} {q.wall_s:12.1f} {s.wall_s:12.1f}",
        "",
        f"response per batch (wall): storm {len(s.respond_s)} batches, "
        f"p50 {_pct(s.respond_s, 0.5) * 1000:.0f} ms, p95 {_pct(s.respond_s, 0.95) * 1000:.0f} ms,"
        f" max {max(s.respond_s, default=0) * 1000:.0f} ms; quiet {len(q.respond_s)} batches",
        f"API calls per cluster: quiet {per_cluster(q.calls)}; storm {per_cluster(s.calls)}",
        f"interval readings (every {r.spec.exporter_interval_s:.0f} s; 0: off), calls per "
        f"cluster per simulated minute: quiet "
        + ", ".join(f"{k} {q.per_min(v) / r.clusters:.1f}" for k, v in sorted(q.readings.items()))
        + "; storm "
        + ", ".join(f"{k} {s.per_min(v) / r.clusters:.1f}" for k, v in sorted(s.readings.items()))
        + f"; their share of the quiet calls: {_share(q):.0%}",
        f"wall: setup (sim seeded, baselines listed) {r.setup_s:.1f} s, all {r.wall_s:.1f} s",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", type=int, default=2000)
    parser.add_argument("--per-cluster", type=int, default=10)
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--fraction", type=float, default=0.1)
    parser.add_argument("--quiet-s", type=float, default=3600.0)
    parser.add_argument("--storm-s", type=float, default=300.0)
    parser.add_argument("--settle-s", type=float, default=300.0)
    parser.add_argument("--flush-s", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--exporter-interval-s", type=float, default=60.0)
    args = parser.parse_args(argv)
    if args.pools < 1 or args.per_cluster < 1 or args.nodes < 1 or not 0 < args.fraction <= 1:
        parser.error("--pools, --per-cluster, --nodes at least 1; --fraction in (0, 1]")
    # the table is the output: the triggers' lines (one per batch) and the response's (one
    # per quarantine) are not written
    os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "ERROR")
    logging.getLogger("gpufleet").setLevel(logging.WARNING)
    try:
        result = run_storm(
            StormSpec(
                pools=args.pools,
                per_cluster=args.per_cluster,
                nodes=args.nodes,
                fraction=args.fraction,
                quiet_s=args.quiet_s,
                storm_s=args.storm_s,
                settle_s=args.settle_s,
                flush_s=args.flush_s,
                seed=args.seed,
                exporter_interval_s=args.exporter_interval_s,
            )
        )
    except StuckError as exc:
        print(f"the storm bench broke: {exc}")
        return 1
    print(report(result))
    print("PASS" if result.ok else "FAIL")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
