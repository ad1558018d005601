"""The sim's modelled run times: how long each simulated pod's program would run on a real
cluster.

The sim's wall clock is compressed (``programs``: ``START_DELAY_S``, ``NCCL_RUN_S`` ... x
``GPUFLEET_SIM_SPEED``), so a validation's pods finish in seconds. The container start/finish
times the sim reports instead follow what the program itself would take (``run_times``: the
ssh wait and NCCL setup, then the operations nccl-tests prints; fio's passes at the throughput
it reports), so what validation costs in GPU-minutes is the figure a real cluster would show.

When a Job or JobSet is applied, ``record_run_times`` keeps each placed pod's modelled run time
in the ``pod_runs`` table; ``POD_ROWS`` reads pods with it and ``container_times`` turns a pod
row into the containers' started/finished times. Where the sim has no model of the program (a
training job, a pod without GPUs) the wall clock stands.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime, timedelta
from typing import Any

from gpufleet.backends.sim.placement import Placement
from gpufleet.backends.sim.programs import PodRun, main_container, program_of
from gpufleet.domain.workloads import COMPLETION_INDEX_LABEL, REPLICATED_JOB_LABEL

# Pods with their run time on the modelled clock (NULL where the sim has no model of the program)
POD_ROWS = (
    "SELECT pods.*, pod_runs.run_s FROM pods LEFT JOIN pod_runs USING (cluster, namespace, name)"
)

# Before mpirun starts, the launcher polls its peer's sshd every second (the launcher's
# ``sleep 1`` in include/manifests/nccl-validation.yaml.j2): on average half a poll.
SSH_WAIT_S = 0.5
# mpirun over ssh starting 2 x GPUs-per-node ranks, and NCCL building its communicator and
# connecting the network: an assumption of the simulator (seconds on real clusters), not a
# measurement.
NCCL_SETUP_S = 10.0
# A GPU health check: the tools that read counters and logs (a few seconds, an assumption of the
# simulator), then ``dcgmi diag -r N``: NVIDIA's guidance (DCGM user guide, run levels) is
# "seconds" for level 1 (taken as 15 s), about 2 minutes for level 2, about 15 for level 3 and
# 1.5 to 2 hours for level 4 (taken as 1.75 h).
HEALTH_TOOLS_S = 3.0
DIAG_S = {1: 15.0, 2: 120.0, 3: 900.0, 4: 6300.0}


def run_times(template: dict[str, Any], runs: list[PodRun]) -> list[float | None]:
    """Each pod's run time in seconds on the modelled clock, for one group of ``runs`` (a
    pair, a Job's pods) of ``template``; None where the sim has no model (a training job, a
    pod without GPUs: the wall clock stands).

    - nccl-tests: every pod of the pair holds its node while the launcher runs: the ssh wait,
      ``NCCL_SETUP_S``, then the operations nccl-tests runs, each taking the time its own output
      prints for that size: ``-w`` warm-up operations at the largest and at the smallest size,
      then per size, out-of-place and in-place, one synchronising operation, ``-n`` timed ones
      and one more when ``-c`` checks the data. A pair that failed at NCCL's init ran the setup.
    - the GPU health check: ``HEALTH_TOOLS_S`` then ``DIAG_S`` of its ``dcgmi diag`` level.
    - fio: each client writes then reads its ``--numjobs`` x ``--size`` at the throughput its
      own JSON output reports, each pass capped by ``--runtime``.
    """
    from gpufleet.errors import ParseError
    from gpufleet.parsing import parse_fio_json, parse_nccl_tests

    program = program_of(template)
    main = main_container(template)
    if program["kind"] == "nccl-tests":
        setup = SSH_WAIT_S + NCCL_SETUP_S
        try:
            result = parse_nccl_tests(runs[0].logs.get(main, "")) if runs else None
        except ParseError:
            result = None
        rows = result.runs[-1].rows if result and result.runs else ()
        timed = [  # (out-of-place, in-place) per size
            (r.oop_time_us, r.ip_time_us)
            for r in rows
            if r.oop_time_us is not None and r.ip_time_us is not None
        ]
        if not timed:
            return [setup if r.outcome == "Failed" else None for r in runs]
        per_size = 1 + program["iters"] + (1 if program["check"] else 0)
        ops_us = program["warmup"] * (timed[-1][0] + timed[0][0])
        ops_us += sum(per_size * (oop + ip) for oop, ip in timed)
        return [setup + ops_us / 1e6 for _ in runs]
    if program["kind"] == "gpu-health":
        return [HEALTH_TOOLS_S + DIAG_S[program["level"]] for _ in runs]
    if program["kind"] == "fio":
        out: list[float | None] = []
        mib = program["size_mib"] * program["numjobs"]
        cap = program["runtime_s"] or float("inf")
        for run in runs:
            if run.outcome != "Succeeded":
                out.append(0.0)  # refused before any I/O (no Lustre mount)
                continue
            try:
                fio = parse_fio_json(run.logs.get(main, ""))
            except ParseError:
                out.append(None)
                continue
            passes = [fio.write_mib_s, fio.read_mib_s]
            out.append(sum(min(mib / bw, cap) for bw in passes if bw))
        return out
    return [None for _ in runs]


def record_run_times(
    conn: sqlite3.Connection,
    cluster: str,
    body: dict[str, Any],
    plan: list[Placement],
    runs: list[PodRun | None],
) -> None:
    """Each placed pod's run time on the modelled clock (``run_times``, group by group), keyed
    by the pod names ``placement.record_pods`` gave them."""
    kind, meta = body["kind"], body["metadata"]
    name, namespace = meta["name"], meta.get("namespace") or ""
    groups: dict[str, list[tuple[Placement, PodRun]]] = {}
    for p, run in zip(plan, runs, strict=True):
        if run is not None and p.node is not None:
            groups.setdefault(p.group, []).append((p, run))
    seconds: dict[tuple[str, int], float | None] = {}
    for group, members in groups.items():
        times = run_times(members[0][0].template, [run for _, run in members])
        seconds.update({(group, p.index): t for (p, _), t in zip(members, times, strict=True)})
    for row in conn.execute(
        "SELECT name, labels FROM pods WHERE cluster=? AND namespace=? AND workload_kind=? "
        "AND workload=?",
        (cluster, namespace, kind, name),
    ).fetchall():
        labels = json.loads(row["labels"])
        group = labels.get(REPLICATED_JOB_LABEL, name) if kind == "JobSet" else name
        run_s = seconds.get((group, int(labels.get(COMPLETION_INDEX_LABEL, "0"))))
        if run_s is not None:
            conn.execute(
                "INSERT OR REPLACE INTO pod_runs VALUES (?, ?, ?, ?)",
                (cluster, namespace, row["name"], run_s),
            )


def forget_run_times(
    conn: sqlite3.Connection, cluster: str, namespace: str, kind: str, workload: str
) -> None:
    """Drop the modelled run times of a deleted workload's pods (before its pods go)."""
    conn.execute(
        "DELETE FROM pod_runs WHERE cluster=? AND namespace=? AND name IN (SELECT name "
        "FROM pods WHERE cluster=? AND namespace=? AND workload_kind=? AND workload=?)",
        (cluster, namespace, cluster, namespace, kind, workload),
    )


def container_times(row: sqlite3.Row, phase: str) -> tuple[datetime | None, datetime | None]:
    """A pod row's container times (a ``POD_ROWS`` row) in ``phase``: started when the pod
    started (wall clock); finished, once it has, its modelled run time later, or at its
    wall-clock end where the sim has no model of the program."""
    started = finished = None
    if phase != "Pending":
        started = datetime.fromtimestamp(row["start_at"], UTC)
    if started is not None and phase in ("Succeeded", "Failed"):
        if row["run_s"] is not None:
            finished = started + timedelta(seconds=row["run_s"])
        else:
            finished = datetime.fromtimestamp(max(row["end_at"], row["start_at"]), UTC)
    return started, finished
