"""The programs the simulated fleet runs in a workload's pods, and what each pod ends with.

Design: docs/design/simulated-fleet.md.
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
import re
import shlex
from dataclasses import dataclass, field, replace
from typing import Any

from gpufleet.backends.sim.faults import DEGRADED_BUSBW_FACTOR, DEGRADED_LATENCY_FACTOR, PoolFaults
from gpufleet.backends.sim.gpu_health import health_check_output
from gpufleet.backends.sim.launch_model import GANG_LINE, gang_seconds, step_waits
from gpufleet.backends.sim.nccl import NcclOutcome, debug_lines, nccl_outcome
from gpufleet.backends.sim.nights import lustre_clients, pair_link
from gpufleet.backends.sim.output import LinkModel, fio_json, nccl_tests_text
from gpufleet.backends.sim.performance import (
    fabric_noise,
    filesystem_tier,
    rdma_link,
    socket_link,
    storage_noise,
)
from gpufleet.backends.sim.seeds import seed
from gpufleet.backends.sim.topology import crossing_factor
from gpufleet.backends.sim.work_model import work_seconds
from gpufleet.domain.fleet import Cluster, NodePool
from gpufleet.domain.plumbing import NCCL_LOG_CONTAINER, inspect_pod

# Delays in seconds before GPUFLEET_SIM_SPEED scaling: scheduling + image pull, one nccl-tests
# pair, one fio pass, a training job's life.
START_DELAY_S = 0.5
NCCL_RUN_S = 1.5
FIO_RUN_S = 1.5
HEALTH_RUN_S = 1.5  # one node's GPU health check, whatever its dcgmi diag level
# an init container run as a step before the main container, by its program (0: not modelled)
STEP_RUN_S = {"gpu-health": HEALTH_RUN_S, "fio": FIO_RUN_S}
TRAINING_RUN_S = 45.0
# How long a training job runs in the sim (seconds, before GPUFLEET_SIM_SPEED) when its pod
# template says so: the sim cannot know a real job's length; tests and demos set it.
RUN_SECONDS_ANNOTATION = "sim.gpufleet.io/run-seconds"
# Qwen2.5-14B FSDP on 16 H200: median step over RDMA vs after a silent TCP fallback
# (shared/FACTS.md "Anchor figures")
STEP_S_RDMA = 6.07
STEP_S_SOCKETS = 12.36
NO_GPU = "no CUDA-capable device is detected"
_SIZE = re.compile(r"^(\d+)([KMGT]?)B?$", re.I)


@dataclass(frozen=True)
class PodRun:
    """How one pod ends: its phase, when, its logs per container, and the reason shown."""

    outcome: str  # Succeeded | Failed
    end_at: float
    # container -> log, main container first (its init steps' and sidecar's after it)
    logs: dict[str, str] = field(default_factory=dict)
    message: str | None = None


def speed() -> float:
    """``GPUFLEET_SIM_SPEED``: the factor on every simulated delay (default 1.0)."""
    try:
        return max(float(os.environ.get("GPUFLEET_SIM_SPEED", "1")), 0.0)
    except ValueError:
        return 1.0


def _size(text: str) -> int:
    m = _SIZE.fullmatch(text)
    if not m:
        raise ValueError(text)
    return int(m.group(1)) * 1024 ** " KMGT".index(m.group(2).upper() or " ")


def program_of(template: dict[str, Any]) -> dict[str, Any]:
    """Which program the main container runs (``container_program``)."""
    containers = (template.get("spec") or {}).get("containers") or [{}]
    return container_program(containers[0])


def container_program(container: dict[str, Any]) -> dict[str, Any]:
    """Which program a container runs, read from its command and args: nccl-tests (with its
    collective and message sizes), the GPU health check (``dcgmi diag -r N``: its level and
    timeout), fio (its sizes and runtime), or a training job (whatever else)."""
    words = " ".join([*(container.get("command") or ()), *(container.get("args") or ())])
    return dict(_program(words))


@functools.lru_cache(maxsize=256)
def _program(words: str) -> dict[str, Any]:
    """``container_program`` of a command line, read once per process: the sim reads a pod's
    program at every look at it, and a pair's launcher script takes ``shlex`` milliseconds."""
    m = re.search(r"\b(\w+)_perf\b", words)
    if m:
        tokens = shlex.split(words.replace("\n", " "), posix=True) if words else []
        sizes = {"-b": 8, "-e": 8 * 2**30}
        for flag in sizes:
            if flag in tokens and tokens.index(flag) + 1 < len(tokens):
                with contextlib.suppress(ValueError):
                    sizes[flag] = _size(tokens[tokens.index(flag) + 1])
        return {
            "kind": "nccl-tests",
            "collective": m.group(1),
            "min_bytes": sizes["-b"],
            "max_bytes": sizes["-e"],
            # nccl-tests' own defaults when the command does not say: -n 20 -w 5 -c 1
            "iters": _int_flag(tokens, "-n", 20),
            "warmup": _int_flag(tokens, "-w", 5),
            "check": _int_flag(tokens, "-c", 1),
        }
    diag = re.search(r"\bdcgmi diag -r (\d)\b", words)
    if diag:
        # the hard timeout it runs under (the health manifest's ``timeout --kill-after=K S``)
        limit = re.search(r"\btimeout --kill-after=\d+ (\d+) dcgmi diag\b", words)
        timeout_s = int(limit.group(1)) if limit else None
        return {"kind": "gpu-health", "level": int(diag.group(1)), "timeout_s": timeout_s}
    if re.search(r"\bfio\b", words):
        return {
            "kind": "fio",
            "size_mib": _int_option(words, "size", 1024, unit=True),  # per fio job
            "numjobs": _int_option(words, "numjobs", 1),
            "runtime_s": _int_option(words, "runtime", 0),  # 0: no cap
        }
    return {"kind": "training"}


def _int_flag(tokens: list[str], flag: str, default: int) -> int:
    """The integer after ``flag`` in a command's tokens (``default`` when absent or unreadable)."""
    if flag in tokens and tokens.index(flag) + 1 < len(tokens):
        with contextlib.suppress(ValueError):
            return int(tokens[tokens.index(flag) + 1])
    return default


def _int_option(words: str, name: str, default: int, unit: bool = False) -> int:
    """fio's ``--name=<int>`` (``unit``: an ``M`` suffix, MiB, is allowed) or ``default``."""
    m = re.search(rf"--{name}=(\d+)({'M' if unit else ''})?\b", words)
    return int(m.group(1)) if m else default


def main_container(template: dict[str, Any]) -> str:
    """The name of the pod template's main (first) container."""
    containers = (template.get("spec") or {}).get("containers") or [{}]
    return containers[0].get("name") or "main"


@dataclass(frozen=True)
class InitStep:
    """An init container run as a step, to its end, before the main container starts."""

    name: str
    container: dict[str, Any]
    program: dict[str, Any]  # container_program


def init_steps(template: dict[str, Any]) -> list[InitStep]:
    """The pod template's init containers that run as steps, in the order they run: every one
    but a native sidecar (``restartPolicy: Always``, such as the NCCL log sidecar, which runs
    beside the main container). Each is known by its command, not its name."""
    inits = (template.get("spec") or {}).get("initContainers") or ()
    return [
        InitStep(c.get("name") or f"init-{i}", c, container_program(c))
        for i, c in enumerate(inits)
        if isinstance(c, dict) and c.get("restartPolicy") != "Always"
    ]


def step_seconds(steps: list[InitStep], logs: dict[str, str]) -> dict[str, float]:
    """Each init step's run on the modelled clock (``work_model.work_seconds``), given one
    pod's ``logs``: 0 where the model has no figure (a program it does not know; fio that
    printed no JSON, refused before any I/O)."""
    return {s.name: work_seconds(s.program, logs.get(s.name, "")) or 0.0 for s in steps}


class GroupRun:
    """One group of pods (a pair, a Job's pods) of a workload, placed on ``nodes``: each pod
    runs its init steps (``init_steps``) in order, then its main container's program."""

    def __init__(
        self,
        cluster: Cluster,
        pool: NodePool,
        faults: PoolFaults,
        workload: str,
        group: str,
        template: dict[str, Any],
        nodes: list[str],
        now: float,
        busbw_decay: float = 1.0,
    ):
        """``busbw_decay``: the share of RDMA bus bandwidth the pool's ``drift`` leaves."""
        self.cluster, self.pool, self.faults = cluster, pool, faults
        self.busbw_decay = busbw_decay
        self.workload, self.group, self.template, self.nodes = workload, group, template, nodes
        self.now = now
        self.speed = speed()
        self.steps = init_steps(template)
        self.started = now + START_DELAY_S * self.speed  # the pod's first container
        # the main container's start: after the init steps, on the wall clock
        wall = sum(STEP_RUN_S.get(s.program["kind"], 0.0) for s in self.steps)
        self.start = self.started + wall * self.speed
        self.main = main_container(template)
        self.fabric = inspect_pod(cluster, pool, template)

    def run(self) -> list[PodRun]:
        """How each pod ends: its init steps' logs, then its main program's run."""
        steps = self._run_steps()
        waits = step_waits([step_seconds(self.steps, logs) for logs in steps])
        runs = self._run_main(waits[0] if waits else 0.0)
        return [
            replace(run, logs={**run.logs, **logs}) for run, logs in zip(runs, steps, strict=True)
        ]

    def _run_main(self, launcher_wait: float) -> list[PodRun]:
        """The main container's program; ``launcher_wait``: what the launcher of a pair waits
        for the other pod's slower init steps (in its ``gang``)."""
        program = program_of(self.template)
        if program["kind"] == "fio":
            return self._fio()
        if self.fabric.gpus < 1:
            return self._no_gpu(program["kind"])
        if program["kind"] == "gpu-health":
            return self._gpu_health(program)
        outcome = nccl_outcome(
            self.cluster, self.pool, self.fabric, self.faults.rdma_lost(self.nodes)
        )
        logs = self._nccl_logs(outcome)
        if program["kind"] == "nccl-tests":
            return self._nccl_tests(program, outcome, logs, launcher_wait)
        return self._training(outcome, logs)

    # --- init steps ---------------------------------------------------------------------------

    def _run_steps(self) -> list[dict[str, str]]:
        """Per pod: each init step's log (container -> log), the steps run in turn from the
        pod's start. A step's script exits 0 whatever its program found, so none fails the
        pod: the GPU health check prints as ``_gpu_health`` does, fio as ``_fio`` does (no
        JSON, only the error, when that container does not mount the Lustre PVC); a program
        the sim does not know prints nothing and takes no time."""
        out: list[dict[str, str]] = [{} for _ in self.nodes]
        at = self.started
        for step in self.steps:
            kind = step.program["kind"]
            if kind == "gpu-health":
                texts = [self._health_output(node, step.program, at) for node in self.nodes]
            elif kind == "fio":
                texts, _ = self._fio_outputs(step.container)
            else:
                texts = ["" for _ in self.nodes]
            for logs, text in zip(out, texts, strict=True):
                logs[step.name] = text
            at += STEP_RUN_S.get(kind, 0.0) * self.speed
        return out

    # --- NCCL programs --------------------------------------------------------------------

    def _logs(self, main: str, nccl_log: str) -> dict[str, str]:
        """A pod's logs: the main container's, and the sidecar's if the pod carries one."""
        logs = {self.main: main}
        if self.fabric.log_sidecar:
            logs[NCCL_LOG_CONTAINER] = nccl_log
        return logs

    def _nccl_logs(self, outcome: NcclOutcome) -> list[str]:
        """Per pod: what NCCL writes to its debug file at the pod's NCCL_DEBUG level."""
        gpn = self.pool.gpu.count
        return [
            debug_lines(
                outcome,
                self.fabric.nccl_debug,
                host=node,
                first_rank=i * gpn,
                gpus_per_node=gpn,
                nranks=len(self.nodes) * gpn,
                seed=seed(self.workload, node, self.now),
                slow_init=self.faults.slow_init,
            )
            for i, node in enumerate(self.nodes)
        ]

    def _no_gpu(self, kind: str) -> list[PodRun]:
        end = self.start + START_DELAY_S * self.speed
        if kind == "nccl-tests":
            main = f"{self.nodes[0]}: Test CUDA failure common.cu:1001 '{NO_GPU}'\n"
        else:
            main = "RuntimeError: No CUDA GPUs are available\n"
        message = f"exit code 1: {NO_GPU} (the pod requests no nvidia.com/gpu)"
        return [PodRun("Failed", end, self._logs(main, ""), message) for _ in self.nodes]

    def _failed_init(
        self, outcome: NcclOutcome, logs: list[str], main: str, end: float
    ) -> list[PodRun]:
        message = (
            f"NCCL failed to initialise the network: {outcome.failure} ({'; '.join(outcome.why)})"
        )
        return [PodRun("Failed", end, self._logs(main, log), message) for log in logs]

    def _link(self, outcome: NcclOutcome) -> LinkModel:
        if not outcome.rdma:
            tcp = socket_link()
            return LinkModel(self.faults.socket_busbw_gbps or tcp.busbw_gbps, tcp.latency_us)
        healthy = rdma_link(self.pool, outcome.transport or self.pool.transport)
        rng = random.Random(seed(self.workload, self.group, *self.nodes))
        link = pair_link(healthy, fabric_noise(), rng, self.busbw_decay)
        if any(n in self.faults.degraded_nodes for n in self.nodes):
            link = LinkModel(
                link.busbw_gbps * DEGRADED_BUSBW_FACTOR, link.latency_us * DEGRADED_LATENCY_FACTOR
            )
        crossing = crossing_factor(
            self.pool, self.nodes, self.faults.down_subblocks, self.faults.slow_blocks
        )
        if crossing < 1:
            link = LinkModel(link.busbw_gbps * crossing, link.latency_us)
        return link

    def _nccl_tests(
        self, program, outcome: NcclOutcome, logs: list[str], launcher_wait: float = 0.0
    ) -> list[PodRun]:
        end = self.start + NCCL_RUN_S * self.speed
        if outcome.failure:
            return self._failed_init(outcome, logs, "", end)
        text = nccl_tests_text(
            collective=program["collective"],
            hosts=self.nodes,
            gpus_per_node=self.pool.gpu.count,
            gpu_model=self.pool.gpu.model,
            link=self._link(outcome),
            min_bytes=program["min_bytes"],
            max_bytes=program["max_bytes"],
            row_jitter=fabric_noise().row_jitter,
            seed=seed(self.workload, self.group),
        )
        # the launcher's line at its rendezvous (stderr, in the pod's log as kubectl shows it),
        # counted from its main container's start: it waited for the other pod's init steps too
        gang = GANG_LINE.format(seconds=gang_seconds(self.template) + launcher_wait) + "\n"
        return [
            PodRun(
                "Succeeded",
                end,
                self._logs(gang + text if i == 0 else "waiting for the launcher\n", log),
            )
            for i, log in enumerate(logs)
        ]

    def _training(self, outcome: NcclOutcome, logs: list[str]) -> list[PodRun]:
        if outcome.failure:
            end = self.start + 2 * START_DELAY_S * self.speed
            main = "torch.distributed.DistBackendError: NCCL error: invalid usage\n"
            return self._failed_init(outcome, logs, main, end)
        step_s = STEP_S_RDMA if outcome.rdma else STEP_S_SOCKETS
        annotations = (self.template.get("metadata") or {}).get("annotations") or {}
        run_s = float(annotations.get(RUN_SECONDS_ANNOTATION, TRAINING_RUN_S))
        end = self.start + run_s * self.speed
        steps = "".join(
            f"step {i} loss {2.5 - i * 0.01:.3f} step_time {step_s:.2f}s\n" for i in range(1, 6)
        )
        return [PodRun("Succeeded", end, self._logs(steps, log)) for log in logs]

    # --- the GPU health check -------------------------------------------------------------------

    def _gpu_health(self, program: dict[str, Any]) -> list[PodRun]:
        """Each pod prints its node's GPU health check (``_health_output``)."""
        end = self.start + HEALTH_RUN_S * self.speed
        return [
            PodRun("Succeeded", end, {self.main: self._health_output(node, program, self.start)})
            for node in self.nodes
        ]

    def _health_output(self, node: str, program: dict[str, Any], at: float) -> str:
        """What ``node``'s check prints when it starts ``at``: its health tools' output
        (``gpu_health``) under the check's section markers, as ``include/manifests/
        gpu-health.yaml.j2``'s script does, with the GPU faults in force then, at the ``dcgmi
        diag`` level and hard timeout its command says (None: the model's default)."""
        gpu = self.pool.gpu
        return health_check_output(
            node,
            self.faults.gpu_faults_of(node, at=at),
            gpu_model=gpu.model,
            gpus=gpu.count,
            diag_level=program["level"],
            diag_timeout_s=program["timeout_s"],
        )

    # --- fio --------------------------------------------------------------------------------

    def _fio(self) -> list[PodRun]:
        """Each pod's fio (``_fio_outputs``); a pod without the Lustre mount fails."""
        end = self.start + FIO_RUN_S * self.speed
        main = ((self.template.get("spec") or {}).get("containers") or [{}])[0]
        texts, refusal = self._fio_outputs(main)
        outcome = "Failed" if refusal else "Succeeded"
        return [PodRun(outcome, end, {self.main: text}, refusal) for text in texts]

    def _fio_outputs(self, container: dict[str, Any]) -> tuple[list[str], str | None]:
        """Per node, what fio in ``container`` prints: its JSON at the throughput the pool's
        Lustre delivers to this many clients; or, when ``container`` does not mount the Lustre
        PVC at the filesystem's mount path, only the error (also returned: None when fio ran)."""
        fs = self.cluster.filesystem(self.pool.filesystem) if self.pool.filesystem else None
        if fs is None or not _mounts_pvc(self.template, container, fs.mount_path):
            msg = (
                f"fio: {fs.mount_path if fs else 'the Lustre mount'}: No such file or "
                "directory (the Lustre PVC is not mounted)"
            )
            return [msg + "\n" for _ in self.nodes], msg
        tier = filesystem_tier(fs)
        rng = random.Random(seed(self.workload, self.group))
        expected_mib = fs.expected_mb_s * 1e6 / 2**20
        figures = lustre_clients(
            expected_mib, tier, storage_noise(), rng, len(self.nodes), self.faults.lustre_factor
        )
        texts = [
            fio_json(host=node, write_mib_s=write, read_mib_s=read)
            for node, (read, write) in zip(self.nodes, figures, strict=True)
        ]
        return texts, None


def _mounts_pvc(
    template: dict[str, Any], container: dict[str, Any], mount_path: str | None
) -> bool:
    """``container`` (of ``template``) mounts a PersistentVolumeClaim volume at
    ``mount_path``."""
    spec = template.get("spec") or {}
    pvc_volumes = {v["name"] for v in spec.get("volumes") or () if "persistentVolumeClaim" in v}
    return any(
        m.get("name") in pvc_volumes and m.get("mountPath") == mount_path
        for m in container.get("volumeMounts") or ()
    )
