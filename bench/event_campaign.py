"""An event campaign (issue 33): a simulated day of node events on the simulated fleet, watched by
the real ``NodeWatchTrigger`` in a child process that is SIGKILLed at random points, and handled
by the real response and re-admission sessions.

Events (``--events``, 100 by default) come in bursts at random times of the day, on nodes chosen
when each happens (a node still in service for a fault; the cloud's auto-repair replaces a
node gpufleet took out, when there is one): fatal Xids (79 fallen off the bus, 48 double-bit
ECC, 64 row-remap failure, 74 NVLink, 95 uncontained ECC, 119 GSP timeout), Xids NVIDIA leaves to
the application or to nothing (13, 31, 63 remapping event, 94 contained ECC: the node stays in
service), reboots, replacements (a cloud's auto-repair: a node under a new name), nodes the
autoscaler adds, host maintenance announced, GKE's prediction label set to false on the
GKE-shaped cluster, and the faults only the interval readings see (docs/events.md): a GPU's
memory failing (``row-remap-failed``, ``ecc-dbe``) with no Event nor condition, seen in its
dcgm-exporter's metrics; and, on the EKS-shaped cluster, EC2's system status check impaired
and an ``instance-retirement`` scheduled event, seen in DescribeInstanceStatus. Each is the
sim's own action (``backends.sim.node_actions``), writing what the
real components write.

The watcher is ``bench.event_watcher``: every cluster's ``NodeWatchTrigger`` as the triggerer
runs it, each payload a JSON line. Only this process moves the frozen sim clock, in step with the
watcher (it advances to the time the watcher sleeps until while changes are unacknowledged, and
jumps when nothing is). Each batch is handled as the DAG's ``respond`` task handles it
(``EventResponse.respond``, one run id per batch); each re-admission session is run when its
window closes (claim, the pool's fabric validation with its GPU health round, judge). The watcher
is SIGKILLed ``--kills`` times at seeded points (idle between rounds, mid-round, or with a batch
yielded but not handled) and restarted: it resumes from the acknowledged cursors. It reports, in
simulated time:

- for every faulty node, the time from the event to the node being out of schedulable capacity
  (quarantine taint, or not ``NodeInfo.free``): p50/p95/max, each at most 300 s;
- healthy nodes taken out (quarantined, or left pending after their session): 0;
- replaced or new nodes schedulable before their session passed (``NodeInfo.free``, read at
  every step): 0;
- events lost (an action whose signal, or the new node's admission, is not in the ledger): 0;

and the wall time and the watcher's API calls (its own counter).

    python -m bench.event_campaign [--events 100] [--kills 10] [--seed 7]

Exits 1 when a promise is broken.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import queue
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

CLUSTERS = ("a3u-sim", "p5-sim")  # a GKE-shaped and an EKS-shaped sim cluster
GKE_SHAPED = "a3u-sim"
DAY_S = 86400.0
FLUSH_S = 10.0  # the watcher's flush (the DAG's watchers' default)
LIMIT_S = 300.0  # a faulty node out of schedulable capacity within 5 minutes
STEP_S = 0.5  # the clock's step while a validation's workload runs
SETTLE_S = 1800.0  # after the last event: its sessions are judged
WALL_WAIT_S = 120.0  # the longest the campaign waits on the watcher (wall)

# Xid -> NVIDIA's meaning (its Xid catalog); the node is faulty (must go out) or not
FATAL_XIDS = {
    79: "GPU has fallen off the bus",
    48: "double-bit ECC error",
    64: "row-remap failure",
    74: "NVLink error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
}
BENIGN_XIDS = {  # the application's error, or nothing to do: the node stays in service
    13: "graphics engine exception",
    31: "GPU memory page fault",
    63: "row-remapping event",
    94: "contained ECC error",
}
# every class once (the first ones first, for a small campaign), then by weight
COVER = [
    ("xid", 79),
    ("xid", 13),
    ("reboot", None),
    ("replace", None),
    ("add-node", None),
    ("maintenance", None),
    ("prediction", None),
    ("xid", 48),
    ("xid", 94),
    ("xid", 64),
    ("xid", 31),
    ("xid", 74),
    ("xid", 63),
    ("xid", 95),
    ("xid", 119),
    ("maintenance", None),
    ("memory", None),
    ("ec2-impaired", None),
    ("retirement", None),
]
WEIGHTS = {  # as many auto-repairs as faults, or the small sim fleet runs out of nodes
    "fatal": 22,
    "benign": 14,
    "reboot": 12,
    "replace": 27,
    "add-node": 8,
    "maintenance": 11,
    "prediction": 6,
    "memory": 8,  # only dcgm-exporter's metrics show it
    "ec2-impaired": 4,  # only EC2's status checks show it (the EKS-shaped cluster)
    "retirement": 4,  # EC2's scheduled event (and aws-node-termination-handler's Event)
}
MEMORY_FAULTS = ("row-remap-failed", "ecc-dbe")
EKS_SHAPED = "p5-sim"
EKS_ONLY = ("ec2-impaired", "retirement")
KILL_MODES = ("idle", "mid-round", "batch-unhandled")


@dataclass
class Planned:
    at: float  # seconds into the day
    kind: str
    xid: int | None = None

    @property
    def label(self) -> str:
        if self.kind != "xid":
            return self.kind
        return f"Xid {self.xid} ({'fatal' if self.xid in FATAL_XIDS else 'benign'})"


@dataclass
class Done:
    """An action as it happened: when (sim time), on which node, the signals it must leave."""

    planned: Planned
    at: float
    cluster: str
    node: str
    expect: list[tuple[str, str, str]] = field(default_factory=list)  # (node, source, what)
    new: str | None = None
    lost: list[str] = field(default_factory=list)


def plan(n: int, rng: random.Random, day_s: float = DAY_S) -> list[Planned]:
    """``n`` events in bursts of 1-4 a few minutes long, at random times of the day."""
    kinds: list[tuple[str, int | None]] = list(COVER[:n])
    fatal, benign = sorted(FATAL_XIDS), sorted(BENIGN_XIDS)
    names, weights = list(WEIGHTS), list(WEIGHTS.values())
    while len(kinds) < n:
        pick = rng.choices(names, weights)[0]
        if pick == "fatal":
            kinds.append(("xid", rng.choice(fatal)))
        elif pick == "benign":
            kinds.append(("xid", rng.choice(benign)))
        else:
            kinds.append((pick, None))
    rng.shuffle(kinds)
    times: list[float] = []
    while len(times) < n:
        start = rng.uniform(600.0, day_s - SETTLE_S)
        times += [start + rng.uniform(0.0, 240.0) for _ in range(rng.choice((1, 1, 2, 3, 4)))]
    return [Planned(t, k, x) for t, (k, x) in zip(sorted(times[:n]), kinds, strict=True)]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


class HarnessError(RuntimeError):
    """The campaign itself went wrong (the watcher died, never answered): a broken run."""


class Watcher:
    """The watcher processes: the current one, and a spare already imported that starts its
    triggers when told (a restart after a kill then costs the triggers' own start)."""

    def __init__(self, env: dict[str, str], log_dir: Path, flush_s: float):
        self.env, self.log_dir, self.flush_s = env, log_dir, flush_s
        self.started = 0
        self.current = self._spawn()
        self.current_go()
        self.spare = self._spawn()

    def _spawn(self) -> tuple[subprocess.Popen, queue.Queue]:
        self.started += 1
        log = open(self.log_dir / f"watcher-{self.started}.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.event_watcher",
                *CLUSTERS,
                "--flush-s",
                str(self.flush_s),
                "--wait-for-go",
            ],
            cwd=ROOT,
            env=self.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
        )
        lines: queue.Queue = queue.Queue()

        def read() -> None:
            assert proc.stdout is not None
            for raw in proc.stdout:
                lines.put(json.loads(raw))
            lines.put(None)

        threading.Thread(target=read, daemon=True).start()
        return proc, lines

    def current_go(self) -> None:
        proc, _ = self.current
        assert proc.stdin is not None
        proc.stdin.write(b"go\n")
        proc.stdin.flush()

    def next_line(self, timeout: float) -> dict[str, Any]:
        proc, lines = self.current
        try:
            line = lines.get(timeout=max(timeout, 0.0))
        except queue.Empty:
            raise HarnessError(
                f"the watcher (pid {proc.pid}) said nothing for {timeout:.0f} s"
            ) from None
        if line is None:
            raise HarnessError(
                f"the watcher (pid {proc.pid}) exited ({proc.wait()}): see {self.log_dir}"
            )
        return line

    def kill_and_restart(self) -> None:
        """SIGKILL the current watcher (its pid, nothing else); the spare takes over."""
        proc, _ = self.current
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        self.current = self.spare
        self.current_go()
        self.spare = self._spawn()

    def stop(self) -> None:
        for proc, _ in (self.current, self.spare):
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()


class Campaign:
    def __init__(self, args: argparse.Namespace, env: dict[str, str], log_dir: Path):
        from gpufleet.backends import cluster_backend
        from gpufleet.backends.sim.cluster import SimClusterBackend
        from gpufleet.backends.sim.state import SimState
        from gpufleet.config.catalog import load_catalog
        from gpufleet.store import Ledger

        self.args = args
        self.rng = random.Random(args.seed)
        self.catalog = load_catalog()
        self.ledger = Ledger()
        self.sim = SimState()
        self.clock = self.sim.clock
        self.clock.freeze()
        self.backend = {c: cluster_backend(self.catalog.cluster(c)) for c in CLUSTERS}
        # the sim's own node actions (a GPU fault, a reboot, ...): what happens to the cluster
        self.world = {c: SimClusterBackend(self.catalog.cluster(c)) for c in CLUSTERS}
        self.pools = {
            c: [p.name for p in self.catalog.cluster(c).node_pools if p.state != "planned"]
            for c in CLUSTERS
        }
        self.start = self.clock.time()
        self.plan = plan(args.events, self.rng)
        kill_times = sorted(
            self.rng.uniform(300.0, max(p.at for p in self.plan)) for _ in range(args.kills)
        )
        self.kills = [(self.start + t, self.rng.choice(KILL_MODES)) for t in kill_times]
        self.kills_done: Counter[str] = Counter()
        self.drop_next_batch = False
        self.watcher = Watcher(env, log_dir, FLUSH_S)
        self.target: dict[str, float | None] = dict.fromkeys(CLUSTERS)
        # the watcher's API calls: the last count each incarnation reported, per cluster
        self.calls: dict[tuple[int, str], dict[str, int]] = {}
        self.batches = 0
        self.done: list[Done] = []
        self.faulty: dict[tuple[str, str], float] = {}  # node -> when its fault happened
        self.out_at: dict[tuple[str, str], float] = {}
        self.new_nodes: dict[tuple[str, str], float] = {}  # replaced or added -> when
        self.rebooted: dict[tuple[str, str], float] = {}
        self.passed: dict[tuple[str, str], float] = {}  # released by a session -> when
        self.early: dict[tuple[str, str], float] = {}  # a new node free before it passed
        self.reboot_windows: list[float] = []
        self.reboot_free: dict[tuple[str, str], float] = {}
        self.healthy_out: dict[tuple[str, str], str] = {}
        self.nodes: dict[str, dict[str, Any]] = {}
        self.wakeups: list[float] = []  # when a machine's boot ends (the nodes turn Ready)
        self.sessions_run: Counter[str] = Counter()
        self.in_session = False
        self.session_runs = 0
        self.fallbacks = 0  # events that found no node in service: a node added instead
        # faults no watch sees (the interval readings do): the clock steps with the watcher
        # until each is out
        self.silent: set[tuple[str, str]] = set()

    # --- the clock, in step with the watcher --------------------------------------------------

    def now(self) -> float:
        return self.clock.time()

    def wait_idle(self) -> None:
        """Until every trigger sleeps until a time still to come (what it printed before is
        handled: batches responded to)."""
        deadline = time.monotonic() + WALL_WAIT_S
        while True:
            now = self.now()
            if all(t is not None and t > now for t in self.target.values()):
                return
            self.handle(self.watcher.next_line(deadline - time.monotonic()))

    def handle(self, line: dict[str, Any]) -> None:
        kind = line.get("kind")
        if kind in ("sleep", "batch"):
            self.calls[(self.watcher.started, line["cluster"])] = line["calls"]
        if kind == "sleep":
            self.target[line["cluster"]] = float(line["until"])
        elif kind == "batch":
            if self.drop_next_batch:  # yielded, never handled: the triggerer died first
                self.drop_next_batch = False
                self.restart("batch-unhandled")
                return
            self.respond(line["payload"])

    def restart(self, mode: str) -> None:
        self.watcher.kill_and_restart()
        self.kills_done[mode] += 1
        self.target = dict.fromkeys(CLUSTERS)

    def dirty(self) -> bool:
        """Whether some change of a cluster is not acknowledged yet (the watcher must see it:
        the clock then moves round by round)."""
        from gpufleet.backends.base import WatchExpired
        from gpufleet.backends.sim import watch_log

        if any(k not in self.out_at for k in self.silent):
            return True
        for c in CLUSTERS:
            for stream, kind in (("nodes", "node"), ("events", "event")):
                acked = self.ledger.watch_cursor(c, stream)
                if acked is None:
                    return True
                try:
                    with self.sim.read() as conn:
                        if watch_log.changes_after(conn, c, kind, acked):
                            return True
                except WatchExpired:
                    return True
        return False

    def advance_to(self, t: float) -> None:
        while (now := self.now()) < t:
            self.wait_idle()
            kill = self.kills[0] if self.kills and self.kills[0][0] <= now else None
            if kill is not None and kill[1] == "idle":
                self.kills.pop(0)
                self.restart("idle")
                continue
            if kill is not None and kill[1] == "batch-unhandled":
                self.kills.pop(0)
                self.drop_next_batch = True
            wake = min(t for t in self.target.values() if t is not None)
            lockstep = kill is not None or self.dirty()  # a mid-round kill: at the next wake
            step_to = min(t, wake) if lockstep else t
            self.clock.advance(step_to - now)
            if kill is not None and kill[1] == "mid-round" and step_to >= wake:
                self.kills.pop(0)
                time.sleep(self.rng.uniform(0.0, 0.03))  # somewhere in the watcher's round
                self.restart("mid-round")
            self.tick()

    # --- the response, as the DAG's tasks do it -----------------------------------------------

    def respond(self, payload: dict[str, Any]) -> None:
        from gpufleet.services.nodes.events import EventResponse
        from gpufleet.services.nodes.watch_batch import Batch

        self.batches += 1
        batch = Batch.from_dict(payload)
        EventResponse(self.ledger, self.catalog).respond(batch, f"respond-{self.batches}")
        self.check()

    def run_due_sessions(self) -> None:
        if self.in_session:
            return
        for c in CLUSTERS:
            for s in self.ledger.sessions(c, states=("open",)):
                if _ts(s.closes_at) <= self.now():
                    self.run_session(s)

    def run_session(self, session) -> None:
        """Claim, validate the pool (fabric with its GPU health round), judge."""
        from gpufleet.domain.validation_kinds import ValidationKind
        from gpufleet.services.nodes.admission import AdmissionSessions
        from gpufleet.services.validation.fabric import FabricValidation

        self.session_runs += 1
        run_id = f"session-{self.session_runs}"
        ref = self.catalog.pool(session.cluster, session.pool)
        sessions = AdmissionSessions(ref, self.ledger, self.backend[session.cluster])
        if sessions.claim(session.id, run_id) is None:
            return
        self.in_session = True
        try:
            fab = FabricValidation(ref, self.ledger)
            state = fab.begin(run_id)
            while state.workload or state.health_recheck_at is not None:
                if state.workload is None:
                    self.advance_to(state.health_recheck_at)
                    state = fab.recheck(state)
                    continue
                wl = state.workload
                waited = 0.0
                while not fab.backend.workload_status(wl.kind, wl.name, wl.namespace).done:
                    if waited > 7200:
                        raise HarnessError(f"{wl.name} did not finish in 2 simulated hours")
                    self.advance_to(self.now() + STEP_S)
                    waited += STEP_S
                state = fab.collect(state)
            summary = fab.finish(state)
            rows = [
                r
                for r in self.ledger.validations_for_run(run_id)
                if (r["cluster"], r["pool"], r["kind"])
                == (session.cluster, session.pool, ValidationKind.FABRIC)
            ]
            verdict = sessions.judge(session.id, run_id, summary, rows[-1] if rows else None)
        finally:
            self.in_session = False
        now = self.now()
        row = rows[-1] if rows else None
        proven = set((row or {}).get("details", {}).get("passed_nodes") or [])
        for node in verdict.released:  # passed: released, and named by the validation's row
            if row is not None and row["passed"] and node in proven:
                self.passed[(session.cluster, node)] = now
        self.sessions_run["released"] += len(verdict.released)
        self.sessions_run["quarantined"] += len(verdict.quarantined)
        self.sessions_run["carried"] += len(verdict.carried)
        self.sessions_run["sessions"] += 1
        self.check()

    # --- the world: actions and what they left ---------------------------------------------

    def check(self) -> None:
        """Read every node: faulty ones out yet? new ones schedulable before they passed?
        healthy ones quarantined?"""
        from gpufleet.domain.admission import PENDING_KEY

        now = self.now()
        self.nodes = {c: {n.name: n for n in self.backend[c].list_nodes()} for c in CLUSTERS}
        for key, t0 in self.faulty.items():
            n = self.nodes[key[0]].get(key[1])
            if key not in self.out_at and n is not None and (n.quarantined or not n.free):
                self.out_at[key] = now - t0
        for key in self.new_nodes:
            n = self.nodes[key[0]].get(key[1])
            if n is not None and n.free and key not in self.passed and key not in self.early:
                self.early[key] = now
        for key in list(self.rebooted):  # Ready again: how long until the watcher held it
            n = self.nodes[key[0]].get(key[1])
            if n is not None and any(t.key == PENDING_KEY for t in n.taints):
                self.reboot_windows.append(now - self.reboot_free.pop(key, now))
                del self.rebooted[key]
            elif n is not None and n.free:
                self.reboot_free.setdefault(key, now)
        for c, nodes in self.nodes.items():
            for name, n in nodes.items():
                if n.quarantined and (c, name) not in self.faulty:
                    self.healthy_out.setdefault((c, name), "quarantined")

    def tick(self) -> None:
        """What is due at this moment: the planned actions, then a look at every node."""
        while self.plan and self.start + self.plan[0].at <= self.now():
            self.check()
            self.act(self.plan.pop(0))
        self.check()

    def in_service(self, clusters=CLUSTERS) -> list[tuple[str, str]]:
        out = []
        for c in clusters:
            for name, n in self.nodes[c].items():
                held = self.ledger.node_state(c, name)
                if (
                    n.free
                    and (c, name) not in self.faulty
                    and (held is None or held["state"] == "released")
                ):
                    out.append((c, name))
        return sorted(out)

    def act(self, p: Planned) -> None:  # noqa: C901  one branch per kind of event
        now = self.now()
        kind = p.kind
        only = [GKE_SHAPED] if kind == "prediction" else [EKS_SHAPED] if kind in EKS_ONLY else None
        targets = self.in_service(only or CLUSTERS)
        if kind not in ("add-node", "replace") and not targets:
            kind = "add-node"  # nothing in service to hit: the autoscaler adds one instead
            p = Planned(p.at, kind)
            self.fallbacks += 1
        if kind == "add-node":
            c = self.rng.choice(CLUSTERS)
            result = self.world[c].add_node(self.rng.choice(self.pools[c]))
            new = result["new"]
            self.new_nodes[(c, new)] = now
            self.wakeups.append(now + _boot_s("replace"))
            self.done.append(Done(p, now, c, new, [(new, "lifecycle", "appeared")], new=new))
            return
        if kind == "replace":
            out = [(c, n) for c in CLUSTERS for n in self.nodes[c] if (c, n) in self.out_at]
            c, node = self.rng.choice(out or targets or [(None, None)])
            if c is None:
                self.fallbacks += 1
                return self.act(Planned(p.at, "add-node"))
            new = self.world[c].replace(node)["new"]
            self.new_nodes[(c, new)] = now
            self.wakeups.append(now + _boot_s("replace"))
            self.done.append(
                Done(
                    p,
                    now,
                    c,
                    node,
                    [(node, "lifecycle", "gone"), (new, "lifecycle", "appeared")],
                    new=new,
                )
            )
            return
        c, node = self.rng.choice(targets)
        b = self.world[c]
        if kind == "xid":
            assert p.xid is not None
            b.gpu_fault(node, xid=p.xid, gpu=self.rng.randrange(8))
            expect = [(node, "xid", str(p.xid))]
            if p.xid in FATAL_XIDS:
                self.faulty[(c, node)] = now
        elif kind == "reboot":
            b.reboot(node)
            self.rebooted[(c, node)] = now
            self.wakeups.append(now + _boot_s("reboot"))
            expect = [(node, "lifecycle", "rebooted")]
        elif kind == "maintenance":
            b.maintenance(node, start=now + self.rng.uniform(3600.0, 6 * 3600.0))
            expect = [(node, "maintenance", "scheduled")]
        elif kind == "memory":  # no Event, no condition: dcgm-exporter's metrics show it
            b.gpu_memory_fault(node, self.rng.choice(MEMORY_FAULTS))
            self.faulty[(c, node)] = now
            self.silent.add((c, node))
            expect = [(node, "exporter", "gpu-health")]
        elif kind == "ec2-impaired":  # EC2's system status check of the host
            b.instance_status(node, system="impaired")
            self.faulty[(c, node)] = now
            self.silent.add((c, node))
            expect = [(node, "ec2", "system-impaired")]
        elif kind == "retirement":  # EC2 will stop the instance: out ahead of it
            b.maintenance(
                node, start=now + self.rng.uniform(86400.0, 3 * 86400.0), code="instance-retirement"
            )
            self.faulty[(c, node)] = now
            expect = [(node, "ec2", "instance-retirement"), (node, "maintenance", "scheduled")]
        else:  # prediction
            b.prediction(node, recommended=False)
            self.faulty[(c, node)] = now
            expect = [(node, "prediction", "degradation")]
        self.done.append(Done(p, now, c, node, expect))

    # --- the run ---------------------------------------------------------------------------

    def run(self) -> None:
        # the baseline: the first list of each cluster, handled and acknowledged
        while any(self.ledger.watch_cursor(c, "nodes") is None for c in CLUSTERS):
            self.wait_idle()
            self.advance_to(min(t for t in self.target.values() if t is not None))
        self.check()
        end = self.start + max(p.at for p in self.plan) + SETTLE_S
        while True:
            self.tick()
            self.run_due_sessions()
            now = self.now()
            if now >= end:
                break
            ahead = [self.start + p.at for p in self.plan[:1]]
            ahead += [_ts(s.closes_at) for c in CLUSTERS for s in self.ledger.sessions(c)]
            ahead += self.wakeups + [k[0] for k in self.kills[:1]]
            self.advance_to(min([t for t in ahead if t > now] + [end]))
        self.wait_idle()

    def lost(self) -> int:
        """Every action's signals in ``node_signals`` (one row each, observed no earlier than
        the action), or the new node in a re-admission session."""
        from datetime import timedelta

        used: set[int] = set()
        admitted = {
            (c, n) for c in CLUSTERS for s in self.ledger.sessions(c, states=_ALL) for n in s.nodes
        }
        rows = {  # oldest first: each action takes the first row at or after it
            c: sorted(
                self.ledger.node_signals(c, limit=100_000),
                key=lambda r: (_aware(r["observed_at"]), r["id"]),
            )
            for c in CLUSTERS
        }
        lost = 0
        for d in sorted(self.done, key=lambda d: d.at):
            since = datetime.fromtimestamp(d.at, UTC) - timedelta(seconds=1)
            for node, source, what in d.expect:
                match = next(
                    (
                        r
                        for r in rows[d.cluster]
                        if r["id"] not in used
                        and (r["node"], r["source"], r["what"]) == (node, source, what)
                        and _aware(r["observed_at"]) >= since
                    ),
                    None,
                )
                if match is not None:
                    used.add(match["id"])
                elif not (what == "appeared" and (d.cluster, node) in admitted):
                    d.lost.append(f"{source}:{what} of {node}")
            lost += bool(d.lost)
        return lost

    def held_at_end(self) -> None:
        """Healthy nodes still held ``validation-pending`` with no session of theirs to come."""
        from gpufleet.domain.admission import PENDING_KEY

        waiting = {(c, n) for c in CLUSTERS for s in self.ledger.sessions(c) for n in s.nodes}
        for c, nodes in self.nodes.items():
            for name, n in nodes.items():
                key = (c, name)
                pending = any(t.key == PENDING_KEY for t in n.taints)
                if pending and key not in self.faulty and key not in waiting:
                    self.healthy_out.setdefault(key, "validation-pending after its session")

    def api_calls(self) -> dict[str, Counter[str]]:
        out: dict[str, Counter[str]] = {c: Counter() for c in CLUSTERS}
        for (_, c), calls in self.calls.items():
            out[c].update(calls)
        return out


_ALL = ("open", "validating", "done")


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _ts(value: datetime) -> float:
    return _aware(value).timestamp()


def _boot_s(action: str) -> float:
    from gpufleet.backends.sim.node_actions import HOST_REBOOT_S, REPLACE_BOOT_S
    from gpufleet.backends.sim.programs import speed

    return (REPLACE_BOOT_S if action == "replace" else HOST_REBOOT_S) * speed() + 0.001


def report(c: Campaign, wall_s: float, lost: int) -> bool:  # noqa: C901  a report read top down
    args = c.args
    print(
        f"Event campaign: {len(c.done)} events over a simulated day, {sum(c.kills_done.values())} "
        f"watcher SIGKILLs ({', '.join(f'{k} {m}' for m, k in sorted(c.kills_done.items()))}), "
        f"seed {args.seed}, {wall_s:.0f} s wall"
    )
    by_class: dict[str, list[Done]] = {}
    for d in c.done:
        by_class.setdefault(d.planned.label, []).append(d)
    print(f"  {'event':30s} {'n':>3s} {'recorded':>8s}  outcome")
    for label, ds in sorted(by_class.items()):
        keys = [(d.cluster, d.node) for d in ds]
        outs = [c.out_at[k] for k in keys if k in c.out_at]
        if label.endswith("(fatal)") or label in ("prediction", "memory", *EKS_ONLY):
            what = f"out in {max(outs):.0f} s at most" if outs else "never out"
            what = f"{len(outs)}/{len(ds)} {what}"
        elif label in ("replace", "add-node"):
            news = [(d.cluster, d.new) for d in ds]
            what = f"{sum(k in c.passed for k in news)}/{len(ds)} new nodes passed a session"
        elif label == "reboot":
            what = f"{sum(k in c.passed for k in keys)}/{len(ds)} back after a session"
        else:
            what = f"{sum(k in c.healthy_out for k in keys)} taken out"
        recorded = sum(not d.lost for d in ds)
        print(f"  {label:30s} {len(ds):3d} {recorded:8d}  {what}")
    latencies = [c.out_at.get(k) for k in c.faulty]
    never = [k for k, v in zip(c.faulty, latencies, strict=True) if v is None]
    outs = [v for v in latencies if v is not None]
    ok_latency = not never and bool(outs) and max(outs) <= LIMIT_S
    # a rebooted node free (Ready, untainted) before the pending taint: a job could land on it
    early_reboots = [w for w in c.reboot_windows if w > 0]
    rows = [
        (
            f"faulty nodes out of schedulable capacity ({len(c.faulty)})",
            (
                f"p50 {pct(outs, 0.5):.0f} s, p95 {pct(outs, 0.95):.0f} s, max {max(outs):.0f} s"
                if outs
                else "none measured"
            )
            + (f", {len(never)} never out" if never else ""),
            f"<= {LIMIT_S:.0f} s",
            ok_latency,
        ),
        ("healthy nodes taken out", str(len(c.healthy_out)), "0", not c.healthy_out),
        (
            "replaced/new nodes schedulable before their session passed",
            f"{len(c.early)} of {len(c.new_nodes)}",
            "0",
            not c.early,
        ),
        (
            "rebooted nodes schedulable before held pending",
            f"{len(early_reboots)} of {len(c.reboot_windows)}"
            + (f" (at most {max(early_reboots):.0f} s)" if early_reboots else ""),
            "0",
            not early_reboots,
        ),
        (
            "events lost (no signal nor admission recorded)",
            f"{lost} of {len(c.done)}",
            "0",
            not lost,
        ),
    ]
    print(f"  {'promise':58s} {'figure':40s} {'limit':8s}")
    for name, figure, limit, ok in rows:
        print(f"  {name:58s} {figure:40s} {limit:8s} {'ok' if ok else 'BROKEN'}")
    for key, why in sorted(c.healthy_out.items()):
        print(f"    healthy node taken out: {key[0]}/{key[1]}: {why}")
    for key, at in sorted(c.early.items()):
        print(
            f"    schedulable before its session passed: {key[0]}/{key[1]} at +{at - c.start:.0f} s"
        )
    for key in never:
        print(f"    faulty, never out: {key[0]}/{key[1]}")
    for d in c.done:
        if d.lost:
            print(f"    lost: {d.planned.label} at +{d.at - c.start:.0f} s: {', '.join(d.lost)}")
    calls = c.api_calls()
    hours = (c.now() - c.start) / 3600
    for cluster, counted in calls.items():
        total = sum(v for k, v in counted.items() if k != "errors")
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(counted.items()))
        print(
            f"  watcher API calls, {cluster}: {total} ({total / hours:.0f} per simulated hour; "
            f"{kinds})"
        )
    s = c.sessions_run
    print(
        f"  batches handled {c.batches}; re-admission sessions {s['sessions']}: "
        f"{s['released']} node(s) released, {s['quarantined']} quarantined, "
        f"{s['carried']} carried; watcher processes started {c.watcher.started}"
    )
    if c.fallbacks:
        print(f"  events that found no node in service (a node added instead): {c.fallbacks}")
    ok = ok_latency and not c.healthy_out and not c.early and not lost and not early_reboots
    print("PASS" if ok else "FAIL")
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    if args.events < 1 or args.kills < 0:
        parser.error("--events must be at least 1 and --kills at least 0")
    state = Path(tempfile.mkdtemp(prefix="gpufleet-event-campaign-"))
    os.environ["GPUFLEET_STATE_DIR"] = str(state)
    os.environ["GPUFLEET_LEDGER_URL"] = f"sqlite:///{state / 'ledger.db'}"
    for var in ("AIRFLOW_CONN_GPUFLEET_LEDGER", "GPUFLEET_SIM_SPEED"):
        os.environ.pop(var, None)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    logging.getLogger("gpufleet").setLevel(logging.ERROR)  # the table is the output
    began = time.monotonic()
    campaign = Campaign(args, env, state)
    try:
        campaign.run()
        campaign.check()
        campaign.held_at_end()
        lost = campaign.lost()
    except HarnessError as exc:
        print(f"the campaign broke: {exc} (its state and logs: {state})")
        return 1
    finally:
        campaign.watcher.stop()
    if not report(campaign, time.monotonic() - began, lost):
        print(f"the sim state, the ledger and the watchers' logs: {state}")
        return 1
    shutil.rmtree(state, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
