"""One pod per node: a pair pod's init containers run as steps before its main container
(``programs.init_steps``), each known by its command. The GPU health check prints its node's
tools as the health JobSet's pod does, fio prints its JSON as the storage Job's pod does (only
the error when that container does not mount the Lustre PVC; the pod does not fail). On the
modelled clock each step takes what the same program takes as a main container, the pair's
main containers start after the steps and, the launcher waiting for the slower pod's steps in
its ``gang``, finish together; the wall clock adds each step's delay.

The templates are built by hand (the steps inserted into a rendered pair's pod template from
the health JobSet's and storage Job's own pods), as ``manifests.nccl_validation`` will render
them.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any

import pytest

from gpufleet.backends import cluster_backend
from gpufleet.backends.sim.programs import (
    FIO_RUN_S,
    HEALTH_RUN_S,
    NCCL_RUN_S,
    START_DELAY_S,
    PodRun,
    init_steps,
    program_of,
    speed,
)
from gpufleet.backends.sim.run_times import (
    COLD_PULL_S,
    DIAG_S,
    GANG_LINE,
    HEALTH_TOOLS_S,
    gang_seconds,
    image_class,
    pod_images,
    run_times,
)
from gpufleet.backends.sim.state import SimState
from gpufleet.config.catalog import load_catalog
from gpufleet.domain.health import HealthAction, decide_health
from gpufleet.domain.plumbing import NCCL_LOG_CONTAINER
from gpufleet.domain.workloads import (
    REPLICATED_JOB_LABEL,
    workload_pod_templates,
    workload_selector,
)
from gpufleet.errors import BackendError, ParseError
from gpufleet.manifests.gpu_health import HEALTH_CONTAINER, render_gpu_health
from gpufleet.manifests.nccl_validation import render_nccl_validation
from gpufleet.manifests.storage_validation import render_storage_validation
from gpufleet.parsing import parse_fio_json
from gpufleet.parsing.health import parse_node_health
from gpufleet.services.common.collect import gang_mark
from tests.support.fleet import frozen_sim_clock

CLUSTER, POOL = "a3u-sim", "h200-a"  # 6 nodes of 8xH200, an 18 TiB Lustre at /mnt/lustre
NODES = [f"{CLUSTER}-{POOL}-{i}" for i in range(4)]
PAIRS = [(NODES[0], NODES[1]), (NODES[2], NODES[3])]
FIO = "fio"


@pytest.fixture
def ref(fleet_state):
    return load_catalog().pool(CLUSTER, POOL)


def health_step(ref, level: int = 1, name: str = HEALTH_CONTAINER) -> dict[str, Any]:
    """The GPU health JobSet's container, as the pair pod's init container ``name``."""
    jobset = render_gpu_health(ref, {NODES[0]: level}, "steps")
    (_, _, template), *_ = workload_pod_templates(jobset)
    container = copy.deepcopy(template["spec"]["containers"][0])
    container["name"] = name
    return container


def fio_step(ref) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The storage Job's fio container and its Lustre PVC volume (256 GiB a node: a couple of
    minutes, so that the two clients' jitter parts their steps by a good fraction of a
    second)."""
    job = render_storage_validation(ref, NODES[:2], "steps", size_gib_per_node=256)
    spec = job["spec"]["template"]["spec"]
    return copy.deepcopy(spec["containers"][0]), copy.deepcopy(spec["volumes"])


def nightly(
    ref, *, level: int = 1, fio: bool = True, mount_fio: bool = True, run_id: str = "steps"
) -> dict:
    """Two pairs; ``pair-0``'s pods run the health step (and fio) before nccl-tests, ahead of
    the log sidecar; ``pair-1``'s run no step."""
    manifest = render_nccl_validation(ref, PAIRS, f"{run_id}-{level}-{fio}-{mount_fio}")
    groups = {group: template for group, _, template in workload_pod_templates(manifest)}
    spec = groups["pair-0"]["spec"]
    steps = [health_step(ref, level)]
    if fio:
        container, volumes = fio_step(ref)
        assert not {v["name"] for v in volumes} & {v["name"] for v in spec["volumes"]}
        spec["volumes"].extend(volumes)
        if not mount_fio:  # the volume is the pod's, mounted by nccl-tests, not by fio
            spec["containers"][0]["volumeMounts"].extend(container.pop("volumeMounts"))
        steps.append(container)
    spec["initContainers"] = steps + spec.get("initContainers", [])
    return manifest


def run(backend, manifest) -> dict[str, list]:
    """Apply, let the sim's clock run until the JobSet is done; each pair's pods, launcher
    first."""
    meta = manifest["metadata"]
    backend.apply(manifest)
    clock = SimState().clock
    for _ in range(200):
        status = backend.workload_status("JobSet", meta["name"], meta["namespace"])
        if status.done:
            break
        clock.advance(0.5 * speed() + 0.01)
    assert status.phase == "Succeeded", status
    pods = backend.list_pods(meta["namespace"], workload_selector("JobSet", meta["name"]))
    out: dict[str, list] = {}
    for pod in sorted(pods, key=lambda p: p.name):
        out.setdefault(pod.labels[REPLICATED_JOB_LABEL], []).append(pod)
    return out


def logs(backend, pod, namespace: str) -> dict[str, str]:
    names = ("nccl-tests", NCCL_LOG_CONTAINER, HEALTH_CONTAINER, FIO)
    out = {}
    for name in names:
        with contextlib.suppress(BackendError):  # a container the pod does not have
            out[name] = backend.pod_logs(pod.name, namespace, name)
    return out


def template_of(manifest: dict, group: str) -> dict:
    return next(t for g, _, t in workload_pod_templates(manifest) if g == group)


def test_the_steps_are_the_init_containers_that_are_not_sidecars_known_by_their_command(ref):
    template = template_of(nightly(ref), "pair-0")
    renamed = copy.deepcopy(template)
    renamed["spec"]["initContainers"][0]["name"] = "preflight"
    renamed["spec"]["initContainers"][1]["name"] = "disk"
    for t, names in ((template, [HEALTH_CONTAINER, FIO]), (renamed, ["preflight", "disk"])):
        steps = init_steps(t)
        assert [s.name for s in steps] == names  # the NCCL log sidecar is no step
        assert [s.program["kind"] for s in steps] == ["gpu-health", "fio"]
        assert steps[0].program["level"] == 1 and steps[0].program["timeout_s"]
        assert program_of(t)["kind"] == "nccl-tests"  # the main program is unchanged
    assert init_steps(template_of(nightly(ref), "pair-1")) == []


def test_a_pair_pod_runs_its_steps_then_nccl_tests_and_both_finish_together(ref):
    backend = cluster_backend(ref.cluster)
    # the two fio clients' figures differ (each its own jitter): the first night (the sim is
    # deterministic) whose worker's steps take longer, so that its launcher waits for them
    for night in range(10):
        manifest = nightly(ref, run_id=f"night-{night}")
        pairs = run(backend, manifest)
        launcher, worker = pairs["pair-0"]
        if sum(worker.init_seconds.values()) > sum(launcher.init_seconds.values()) + 0.1:
            break
    else:
        raise AssertionError("no night's worker took longer over its steps")
    ns = manifest["metadata"]["namespace"]
    template = template_of(manifest, "pair-0")
    read = {p.node: logs(backend, p, ns) for p in pairs["pair-0"]}
    for node, texts in read.items():
        report = parse_node_health(texts[HEALTH_CONTAINER])
        assert (report.node, report.level, report.problems) == (node, 1, ())
        assert decide_health(**report.signals()).action is HealthAction.HEALTHY
        fio = parse_fio_json(texts[FIO])
        assert fio.write_mib_s > 0 and fio.read_mib_s > 0
        assert texts[FIO].startswith(f"{node}: ")
    for pod in (launcher, worker):
        assert list(pod.init_seconds) == [HEALTH_CONTAINER, FIO]  # in the order they ran
        assert pod.init_seconds[HEALTH_CONTAINER] == HEALTH_TOOLS_S + DIAG_S[1] == 33.0
        assert pod.init_seconds[FIO] > 0
    # the main run as it would be without steps: the same pair's output, no step to wait for
    runs = [PodRun("Succeeded", 0.0, read[p.node]) for p in (launcher, worker)]
    bare = copy.deepcopy(template)
    bare["spec"]["initContainers"] = [
        c for c in bare["spec"]["initContainers"] if c.get("restartPolicy") == "Always"
    ]
    (main_s, _) = run_times(bare, runs)
    assert main_s is not None and main_s > 0
    slower = max(sum(p.init_seconds.values()) for p in (launcher, worker))
    for pod in (launcher, worker):
        # the main container starts after the pod's own steps; the launcher waits for the
        # slower pod's: both main containers end together, the pair's run after the slower
        assert pod.main_finished_at is not None and pod.started_at is not None
        held = (pod.main_finished_at - pod.started_at).total_seconds()
        assert held == pytest.approx(slower + main_s, abs=1e-3)
        assert held + 1e-3 >= sum(pod.init_seconds.values()) + main_s  # (datetimes: µs)
    assert (run_times(template, runs)[0] or 0) + sum(launcher.init_seconds.values()) == (
        pytest.approx(slower + main_s, abs=1e-3)
    )
    # what the launcher printed is counted from its main container's start: it covers the
    # wait for the worker's longer steps
    wait = slower - sum(launcher.init_seconds.values())
    assert wait > 0.1
    gang = gang_mark(read[launcher.node]["nccl-tests"])
    assert gang == pytest.approx(gang_seconds(template) + wait, abs=0.005)
    line = GANG_LINE.format(seconds=gang_seconds(template) + wait)
    assert line in read[launcher.node]["nccl-tests"]
    # the pair without steps is as it was: no step, the launcher's rendezvous alone
    plain = pairs["pair-1"]
    assert all(p.init_seconds == {} for p in plain)
    text = backend.pod_logs(plain[0].name, ns)
    assert gang_mark(text) == pytest.approx(gang_seconds(template_of(manifest, "pair-1")))
    with pytest.raises(BackendError, match="not valid"):
        backend.pod_logs(plain[0].name, ns, HEALTH_CONTAINER)


def test_a_gpu_fault_shows_in_its_nodes_health_step_only_and_the_pair_still_runs(ref):
    SimState().inject(CLUSTER, POOL, f"xid:{NODES[1]}:79")
    backend = cluster_backend(ref.cluster)
    manifest = nightly(ref, level=2, fio=False)
    ns = manifest["metadata"]["namespace"]
    pairs = run(backend, manifest)
    actions = {}
    for pod in pairs["pair-0"]:
        report = parse_node_health(backend.pod_logs(pod.name, ns, HEALTH_CONTAINER))
        assert (report.node, report.level) == (pod.node, 2)
        actions[pod.node] = decide_health(**report.signals()).action
        assert pod.phase == "Succeeded"  # the step exits 0: the pair goes on
        assert pod.init_seconds == {HEALTH_CONTAINER: HEALTH_TOOLS_S + DIAG_S[2]}
    assert actions == {NODES[0]: HealthAction.HEALTHY, NODES[1]: HealthAction.REBOOT}
    assert "Avg bus bandwidth" in backend.pod_logs(pairs["pair-0"][0].name, ns)


def test_fio_not_mounting_the_lustre_pvc_itself_says_so_and_fails_nothing(ref):
    backend = cluster_backend(ref.cluster)
    manifest = nightly(ref, mount_fio=False)  # the pod mounts it, in nccl-tests only
    ns = manifest["metadata"]["namespace"]
    pairs = run(backend, manifest)
    for pod in pairs["pair-0"]:
        text = backend.pod_logs(pod.name, ns, FIO)
        assert "the Lustre PVC is not mounted" in text
        with pytest.raises(ParseError):
            parse_fio_json(text)
        assert pod.phase == "Succeeded" and pod.message is None
        assert pod.init_seconds == {HEALTH_CONTAINER: 33.0, FIO: 0.0}  # refused before any I/O
        parse_node_health(backend.pod_logs(pod.name, ns, HEALTH_CONTAINER))


def test_on_the_wall_clock_each_step_runs_before_nccl_tests(ref):
    clock = frozen_sim_clock()
    backend = cluster_backend(ref.cluster)
    manifest = nightly(ref)
    meta = manifest["metadata"]
    t0 = clock.time()
    backend.apply(manifest)
    pods = backend.list_pods(meta["namespace"], workload_selector("JobSet", meta["name"]))
    stepped = [p.name for p in pods if p.labels[REPLICATED_JOB_LABEL] == "pair-0"]
    s = speed()
    plain_end = t0 + (START_DELAY_S + NCCL_RUN_S) * s
    end = t0 + (START_DELAY_S + HEALTH_RUN_S + FIO_RUN_S + NCCL_RUN_S) * s

    def phases() -> dict[str, str]:
        found = backend.list_pods(meta["namespace"], workload_selector("JobSet", meta["name"]))
        return {p.name: p.phase for p in found}

    clock.advance(plain_end + 0.01 * s - clock.time())
    now = phases()
    assert all(now[p] == "Running" for p in stepped)
    assert all(v == "Succeeded" for k, v in now.items() if k not in stepped)
    clock.advance(end - 0.01 * s - clock.time())
    assert all(phases()[p] == "Running" for p in stepped)
    clock.advance(0.02 * s)
    assert set(phases().values()) == {"Succeeded"}


def test_the_steps_images_are_pulled_with_the_pods(ref):
    backend = cluster_backend(ref.cluster)
    manifest = nightly(ref)
    template = template_of(manifest, "pair-0")
    images = pod_images(template)
    assert {image_class(i) for i in images} >= {"nccl", "dcgm", "small"}
    assert template["spec"]["initContainers"][1]["image"] in images  # fio's
    pairs = run(backend, manifest)
    cold = sum(COLD_PULL_S[image_class(i)] for i in images)
    assert [p.pull_seconds for p in pairs["pair-0"]] == [cold, cold]
    plain = pod_images(template_of(manifest, "pair-1"))
    assert [p.pull_seconds for p in pairs["pair-1"]] == [
        sum(COLD_PULL_S[image_class(i)] for i in plain)
    ] * 2
