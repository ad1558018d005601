"""The sim's modelled run times: how long each simulated pod's program would run on a real
cluster.

The sim's wall clock is compressed (``programs``: ``START_DELAY_S``, ``NCCL_RUN_S`` ... x
``GPUFLEET_SIM_SPEED``), so a validation's pods finish in seconds. The container start/finish
times the sim reports instead follow what the program itself would take (``run_times``: the
ssh wait and NCCL setup, then the operations nccl-tests prints; fio's passes at the throughput
it reports), so what validation costs in GPU-minutes is the figure a real cluster would show.
A pod's init steps (``programs.init_steps``: the GPU health check, fio) run before its main
container, each for what the same program takes as a main container (``work_model``).

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

from gpufleet.backends.sim.launch_model import (
    GANG_LINE,
    POLL_WAIT_S,
    RENDEZVOUS_MARK,
    RENDEZVOUS_S,
    gang_seconds,
    step_waits,
)
from gpufleet.backends.sim.placement import Placement
from gpufleet.backends.sim.programs import (
    PodRun,
    init_steps,
    main_container,
    program_of,
    step_seconds,
)
from gpufleet.backends.sim.work_model import DIAG_S, HEALTH_TOOLS_S, fio_seconds, work_seconds
from gpufleet.domain.workloads import COMPLETION_INDEX_LABEL, REPLICATED_JOB_LABEL

__all__ = [  # the gang and work figures live in launch_model and work_model (programs uses
    # them too): named here
    "DIAG_S",
    "GANG_LINE",
    "HEALTH_TOOLS_S",
    "POLL_WAIT_S",
    "RENDEZVOUS_MARK",
    "RENDEZVOUS_S",
    "gang_seconds",
]

# Pods with their run time on the modelled clock (NULL where the sim has no model of the program)
# and the rest of their modelled life (``facts``: JSON of ``launch_facts``)
POD_ROWS = (
    "SELECT pods.*, pod_runs.run_s, pod_runs.facts FROM pods "
    "LEFT JOIN pod_runs USING (cluster, namespace, name)"
)

# --- the stages of a validation pod (domain.stages), each from a public figure or an assumption

# ``scheduled``: created -> bound. Kueue admits and the scheduler binds at once on an idle pool;
# an assumption of 1 s, inside Kubernetes' pod startup SLO (p99 <= 5 s from creation to every
# container started, image pulls excluded: kubernetes/community sig-scalability/slos/
# pod_startup_latency.md). It holds no GPU and is never counted.
SCHEDULE_S = 1.0
# ``image_pull``, cold (the image is not on the node): a 10 GB ML image pulls in 4-5 minutes on a
# fresh node (Union.ai, "We cut container cold boot from minutes to seconds"; Azure's Artifact
# Streaming page says "minutes" for images under 10 GB; a public ``kubectl describe`` shows a
# 3.07 GB image "Successfully pulled ... in 3m10.96s"). The nccl-tests images bundle CUDA, MPI,
# NCCL and the network plugin: taken as that class, 270 s (an assumption: their sizes are not
# published). The DCGM image is smaller: 60 s (an assumption). fio's and the log sidecar's are
# small (tens of MB: a 10.6 MB image "in 809ms" in a public events listing): 1 s.
# Warm (``Container image ... already present on machine``): 0 s. The kubelet keeps a pulled
# image until its image GC needs the disk, so a node pulls each image once, not each night.
COLD_PULL_S = {"nccl": 270.0, "dcgm": 60.0, "small": 1.0}
# ``container_start``: sandbox, volumes, the runtime starting the containers: "~1 second"
# (Union.ai, the same article's anatomy of a cold boot).
CONTAINER_START_S = 1.0
# ``gang``: the rendezvous of a pair's pods (``launch_model``: RENDEZVOUS_S, POLL_WAIT_S, cited
# there; the sim's launcher prints it as the real one does, from ``programs`` too)
# ``sweep``: mpirun starting 2 x GPUs-per-node ranks over ssh and each rank's CUDA context (3 s,
# an assumption), then the operations nccl-tests prints (its own output), see ``run_times``.
MPIRUN_START_S = 3.0
# ``nccl_init``: what the ranks' ``Init timings`` lines say (the sim prints them:
# ``output.INIT_PHASES_S``, 1.0-2.2 s total at 2 x 8 GPUs in public logs); 2.0 s when a log
# carries none.
NCCL_INIT_DEFAULT_S = 2.0
# ``diag_r<N>`` (``HEALTH_TOOLS_S``, ``DIAG_S``) and ``io``: ``work_model``.
# ``teardown``: the main container finished -> the pod's last container finished: the log
# sidecar (a native sidecar) is stopped once the main container exits (1 s, an assumption);
# a pod without a sidecar ends with its main container.
SIDECAR_STOP_S = 1.0


def _init_seconds(run: PodRun) -> float:
    """The slowest rank's ``Init timings`` total in a pod's NCCL log (its sidecar's)."""
    from gpufleet.domain.plumbing import NCCL_LOG_CONTAINER
    from gpufleet.parsing.nccl_log.init_timings import read_init_timings

    text = run.logs.get(NCCL_LOG_CONTAINER, "")
    summary = read_init_timings(text.splitlines()).summary() if text else {}
    return summary["total"].max if "total" in summary else NCCL_INIT_DEFAULT_S


def init_times(template: dict[str, Any], runs: list[PodRun]) -> list[dict[str, float]]:
    """Each pod's init steps (``programs.init_steps``), container -> seconds on the modelled
    clock, in the order they ran (``programs.step_seconds``: what the same program takes as a
    main container), for one group of ``runs`` of ``template``; empty without steps."""
    steps = init_steps(template)
    return [step_seconds(steps, run.logs) for run in runs]


def run_times(template: dict[str, Any], runs: list[PodRun]) -> list[float | None]:
    """Each pod's main container run in seconds on the modelled clock (it starts after the
    pod's init steps, ``init_times``), for one group of ``runs`` (a pair, a Job's pods) of
    ``template``; None where the sim has no model (a training job, a pod without GPUs: the
    wall clock stands).

    - nccl-tests: every pod of the pair holds its node while the launcher runs: ``gang`` (the
      wait for the other pod's slower init steps, ``launch_model.step_waits``, then the
      rendezvous), then ``MPIRUN_START_S`` and NCCL's init (the slowest rank's ``Init
      timings`` total of the pair), then the operations nccl-tests runs, each taking the time
      its own output prints for that size: ``-w`` warm-up operations at the largest and at the
      smallest size, then per size, out-of-place and in-place, one synchronising operation,
      ``-n`` timed ones and one more when ``-c`` checks the data. A pair that failed at NCCL's
      init ran up to its init.
    - the GPU health check and fio: ``work_model.work_seconds`` (fio refused before any I/O:
      0).
    """
    from gpufleet.errors import ParseError
    from gpufleet.parsing import parse_nccl_tests

    program = program_of(template)
    main = main_container(template)
    if program["kind"] == "nccl-tests":
        waits = step_waits(init_times(template, runs))
        init = max((_init_seconds(r) for r in runs), default=NCCL_INIT_DEFAULT_S)
        setup = gang_seconds(template) + MPIRUN_START_S + init
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
            return [
                w + setup if r.outcome == "Failed" else None
                for r, w in zip(runs, waits, strict=True)
            ]
        per_size = 1 + program["iters"] + (1 if program["check"] else 0)
        ops_us = program["warmup"] * (timed[-1][0] + timed[0][0])
        ops_us += sum(per_size * (oop + ip) for oop, ip in timed)
        return [w + setup + ops_us / 1e6 for w in waits]
    if program["kind"] == "gpu-health":
        return [work_seconds(program, run.logs.get(main, "")) for run in runs]
    if program["kind"] == "fio":  # refused before any I/O (no Lustre mount): 0
        return [
            fio_seconds(program, run.logs.get(main, "")) if run.outcome == "Succeeded" else 0.0
            for run in runs
        ]
    return [None for _ in runs]


def image_class(image: str) -> str:
    """Which ``COLD_PULL_S`` figure an image pulls at: an nccl-tests image, DCGM's, or small."""
    name = image.rsplit("/", 1)[-1].lower()
    if "nccl" in name:
        return "nccl"
    if "dcgm" in name:
        return "dcgm"
    return "small"


def pod_images(template: dict[str, Any]) -> list[str]:
    """The images a pod template's containers (init containers first) run."""
    spec = template.get("spec") or {}
    images = [
        c.get("image")
        for key in ("initContainers", "containers")
        for c in spec.get(key) or ()
        if isinstance(c, dict)
    ]
    return list(dict.fromkeys(i for i in images if isinstance(i, str) and i))


def prepulled_images(conn: sqlite3.Connection, cluster: str) -> set[str]:
    """The images the cluster's pre-pull DaemonSets keep on every node
    (``manifests.addons.prepull``: their init containers' images)."""
    from gpufleet.domain.stages import PREPULL_LABEL, prepull_images

    out: set[str] = set()
    for row in conn.execute(
        "SELECT body FROM objects WHERE cluster=? AND kind='DaemonSet'", (cluster,)
    ).fetchall():
        body = json.loads(row["body"])
        labels = (body.get("metadata") or {}).get("labels") or {}
        if PREPULL_LABEL in labels:
            out.update(prepull_images(body))
    return out


def launch_facts(
    conn: sqlite3.Connection, cluster: str, node: str, template: dict[str, Any]
) -> dict[str, float]:
    """A placed pod's modelled launch and end: ``sched_s``, ``pull_s`` (cold for each image
    not yet on ``node``: neither pre-pulled by a DaemonSet nor pulled by an earlier pod there;
    the images are on the node afterwards), ``start_s`` and ``teardown_s``."""
    present = prepulled_images(conn, cluster)
    pull = 0.0
    for image in pod_images(template):
        if image in present:
            continue
        had = conn.execute(
            "SELECT 1 FROM node_images WHERE cluster=? AND node=? AND image=?",
            (cluster, node, image),
        ).fetchone()
        if had is None:
            pull += COLD_PULL_S[image_class(image)]
            conn.execute(
                "INSERT OR IGNORE INTO node_images VALUES (?, ?, ?)", (cluster, node, image)
            )
    spec = template.get("spec") or {}
    sidecar = any(
        isinstance(c, dict) and c.get("restartPolicy") == "Always"
        for c in spec.get("initContainers") or ()
    )
    return {
        "sched_s": SCHEDULE_S,
        "pull_s": pull,
        "start_s": CONTAINER_START_S,
        "teardown_s": SIDECAR_STOP_S if sidecar else 0.0,
    }


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
    inits: dict[tuple[str, int], dict[str, float]] = {}
    for group, members in groups.items():
        template, group_runs = members[0][0].template, [run for _, run in members]
        times = run_times(template, group_runs)
        seconds.update({(group, p.index): t for (p, _), t in zip(members, times, strict=True)})
        steps = init_times(template, group_runs)
        inits.update({(group, p.index): s for (p, _), s in zip(members, steps, strict=True)})
    templates = {(p.group, p.index): p.template for p in plan}
    for row in conn.execute(
        "SELECT name, labels, node FROM pods WHERE cluster=? AND namespace=? AND "
        "workload_kind=? AND workload=?",
        (cluster, namespace, kind, name),
    ).fetchall():
        labels = json.loads(row["labels"])
        group = labels.get(REPLICATED_JOB_LABEL, name) if kind == "JobSet" else name
        key = (group, int(labels.get(COMPLETION_INDEX_LABEL, "0")))
        run_s = seconds.get(key)
        if run_s is not None and row["node"] is not None:
            facts: dict[str, Any] = {
                **launch_facts(conn, cluster, row["node"], templates[key]),
                "init_s": inits.get(key, {}),  # its init steps' seconds, in order
            }
            conn.execute(
                "INSERT OR REPLACE INTO pod_runs VALUES (?, ?, ?, ?, ?)",
                (cluster, namespace, row["name"], run_s, json.dumps(facts)),
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
    started (wall clock); finished, once it has, its modelled run time and teardown later, or
    at its wall-clock end where the sim has no model of the program."""
    life = pod_life(row, phase)
    return life["started_at"], life["finished_at"]


def pod_life(row: sqlite3.Row, phase: str) -> dict[str, Any]:
    """A pod row's life as ``PodInfo`` carries it (``domain.stages``): its containers' start
    (the wall clock) and, from its modelled facts, the binding and creation before it (its
    image pull and container start, its scheduling), once it finished its init steps' seconds
    (``init_seconds``), its main container's finish (the steps and its run time later) and its
    last container's (the teardown later), and its image pull's seconds as the kubelet's event
    would say. Where the sim has no model of the program only the containers' times are known
    (the wall clock's)."""
    out: dict[str, Any] = {
        "started_at": None,
        "finished_at": None,
        "created_at": None,
        "scheduled_at": None,
        "main_finished_at": None,
        "pull_seconds": None,
        "init_seconds": {},
    }
    if phase == "Pending":
        return out
    started = datetime.fromtimestamp(row["start_at"], UTC)
    out["started_at"] = started
    facts = json.loads(row["facts"]) if row["facts"] else None
    if facts is not None:
        scheduled = started - timedelta(seconds=facts["pull_s"] + facts["start_s"])
        out["scheduled_at"] = scheduled
        out["created_at"] = scheduled - timedelta(seconds=facts["sched_s"])
        out["pull_seconds"] = facts["pull_s"]
    if phase not in ("Succeeded", "Failed"):
        return out
    if row["run_s"] is not None:
        steps: dict[str, float] = dict((facts or {}).get("init_s") or {})
        out["init_seconds"] = steps
        main_end = started + timedelta(seconds=sum(steps.values()) + row["run_s"])
        teardown = facts["teardown_s"] if facts is not None else 0.0
        out["main_finished_at"] = main_end
        out["finished_at"] = main_end + timedelta(seconds=teardown)
    else:
        out["finished_at"] = datetime.fromtimestamp(max(row["end_at"], row["start_at"]), UTC)
    return out
