"""What validation costs, from the workloads' own durations: the pods' container start/finish
times (Kubernetes ``containerStatuses``; the sim's modelled clock), summed per validation as
GPU-minutes and GPU-minutes per node; and the fabric row's small-message latency."""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from gpufleet.backends.base import PodInfo
from gpufleet.backends.sim.programs import PodRun
from gpufleet.backends.sim.run_times import MPIRUN_START_S, RENDEZVOUS_S, run_times
from gpufleet.backends.sim.state import SimState
from gpufleet.config.catalog import load_catalog
from gpufleet.config.paths import include_dir
from gpufleet.domain.workloads import workload_pod_templates, workload_selector
from gpufleet.parsing import parse_fio_json, parse_nccl_tests
from gpufleet.services.common.collect import gpu_seconds
from gpufleet.services.validation.fabric import FabricValidation
from gpufleet.services.validation.storage import StorageValidation
from gpufleet.store import Ledger
from tests.support.fleet import _wait

CLUSTER, POOL = "a3u-sim", "h200-a"  # 6 nodes of 8xH200 with an 18 TiB Lustre at 1000 MB/s/TiB
GPUS = 8
ROOT = include_dir().parent
# what a pair's launcher runs before its first operation, NCCL's init aside (1-2.2 s)
NCCL_SETUP_S = RENDEZVOUS_S + MPIRUN_START_S


# --- the kube backend reads the containers' own times ----------------------------------------


@pytest.fixture(scope="module")
def kube() -> Iterator:
    from gpufleet.manifests.labels import VALIDATION_NAMESPACE
    from tests.support.kube_emulator import KubeEmulator

    with KubeEmulator(conn_id="kmock_cost", namespace=VALIDATION_NAMESPACE) as emulator:
        yield emulator


def terminated(name: str, start: str, end: str) -> dict:
    return {"name": name, "state": {"terminated": {"startedAt": start, "finishedAt": end}}}


def test_kube_pods_carry_their_containers_start_and_finish(kube, fleet_state):
    from gpufleet.backends.kube.cluster import KubeClusterBackend

    kube.reset()
    statuses = {
        # both containers done: from the first start to the last finish
        "done": [
            terminated("nccl-tests", "2026-11-30T02:00:05Z", "2026-11-30T02:01:35Z"),
            terminated("nccl-log", "2026-11-30T02:00:04Z", "2026-11-30T02:01:36Z"),
        ],
        # the sidecar still runs: the pod still holds its node
        "sidecar": [
            terminated("nccl-tests", "2026-11-30T02:00:00Z", "2026-11-30T02:00:30Z"),
            {"name": "nccl-log", "state": {"running": {"startedAt": "2026-11-30T02:00:00Z"}}},
        ],
        "garbled": [terminated("nccl-tests", "yesterday", "2026-11-30T02:00:30Z")],
    }
    for name, containers in statuses.items():
        kube.seed_pod(name, node=f"node-{name}", labels={"cost": "yes"}, phase="Succeeded")
        kube.patch_status("v1/pods", kube.namespace, name, {"containerStatuses": containers})
    # a native sidecar (an init container that keeps running) starts first, ends last
    kube.seed_pod("native", node="node-native", labels={"cost": "yes"}, phase="Succeeded")
    kube.patch_status(
        "v1/pods",
        kube.namespace,
        "native",
        {
            "initContainerStatuses": [
                terminated("nccl-log", "2026-11-30T02:00:00Z", "2026-11-30T02:01:02Z")
            ],
            "containerStatuses": [
                terminated("nccl-tests", "2026-11-30T02:00:02Z", "2026-11-30T02:01:00Z")
            ],
        },
    )
    kube.seed_pod("pending", labels={"cost": "yes"}, phase="Pending")
    backend = KubeClusterBackend(conn_id="kmock_cost")
    pods = {p.name: p for p in backend.list_pods(kube.namespace, "cost=yes")}
    done = pods["done"]
    assert done.started_at == datetime(2026, 11, 30, 2, 0, 4, tzinfo=UTC)
    assert done.finished_at == datetime(2026, 11, 30, 2, 1, 36, tzinfo=UTC)
    assert done.run_seconds == 92.0
    assert pods["sidecar"].started_at is not None and pods["sidecar"].finished_at is None
    assert pods["garbled"].started_at is None and pods["garbled"].run_seconds is None
    assert pods["pending"].started_at is None and pods["pending"].finished_at is None
    assert pods["native"].run_seconds == 62.0
    # only the pods that finished have cost anything yet: (92 + 62) s x 8 GPUs
    assert gpu_seconds(list(pods.values()), GPUS) == (92.0 + 62.0) * GPUS


def test_kube_pods_carry_their_life_and_the_kubelet_s_pull_events(kube, fleet_state):
    """Issue 35's stages from a real API's objects: created, bound (``PodScheduled``), the
    main container's finish (the first of ``spec.containers``, whatever the statuses' order),
    and the image pull from the kubelet's ``Pulled`` events, read once per namespace."""
    from gpufleet.backends.kube.cluster import KubeClusterBackend
    from gpufleet.services.common.collect import gpu_seconds, image_pulls, stage_seconds

    kube.reset()
    kube.seed_pod("pair", node="node-a", labels={"life": "yes"}, phase="Succeeded")
    kube.patch_status(
        "v1/pods",
        kube.namespace,
        "pair",
        {
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "True",
                    "lastTransitionTime": "2026-11-30T02:00:01Z",
                },
                {"type": "Ready", "status": "False", "lastTransitionTime": "2026-11-30T02:01:10Z"},
            ],
            "containerStatuses": [  # the sidecar's status first: the main one is found by name
                terminated("nccl-log", "2026-11-30T02:00:10Z", "2026-11-30T02:01:01Z"),
                terminated("main", "2026-11-30T02:00:10Z", "2026-11-30T02:01:00Z"),
            ],
        },
    )
    lines = (ROOT / "tests/data/kube_events/pulled.txt").read_text().splitlines()
    sample = next(ln for ln in lines if "in 4.043s" in ln).split(" | ", 1)[1]
    kube.seed_event(
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": "pair.pulled"},
            "involvedObject": {"kind": "Pod", "name": "pair", "namespace": kube.namespace},
            "reason": "Pulled",
            "message": sample,
            "type": "Normal",
        },
        namespace=kube.namespace,
    )
    backend = KubeClusterBackend(conn_id="kmock_cost")
    (pod,) = backend.list_pods(kube.namespace, "life=yes")
    assert pod.scheduled_at == datetime(2026, 11, 30, 2, 0, 1, tzinfo=UTC)
    assert pod.main_finished_at == datetime(2026, 11, 30, 2, 1, 0, tzinfo=UTC)
    assert pod.created_at is not None  # the API server's creation timestamp
    assert pod.held_seconds == 60.0  # bound 02:00:01, the sidecar done 02:01:01
    assert gpu_seconds([pod], GPUS) == 60.0 * GPUS  # the pull and start count: GPUs held
    pulls = image_pulls(backend, kube.namespace)
    assert pulls == {"pair": 4.043}
    stages = stage_seconds(pod, "sweep", {"gang": 0.4}, pulls)
    assert stages["image_pull"] == 4.043 and stages["container_start"] == pytest.approx(4.957)
    assert stages["gang"] == 0.4 and stages["sweep"] == 49.6 and stages["teardown"] == 1.0


def test_the_kubelet_s_pull_messages_as_printed():
    from gpufleet.backends.kube.pods import pulled_seconds

    lines = (ROOT / "tests/data/kube_events/pulled.txt").read_text().splitlines()
    samples = [ln.split(" | ", 1) for ln in lines if ln and not ln.startswith("#")]
    assert len(samples) == 10
    for want, message in samples:
        got = pulled_seconds(message)
        assert got == (None if want == "None" else pytest.approx(float(want))), message


# --- the simulated fleet: its pods run as long as their programs would -----------------------


def pods_of(backend, wl) -> list[PodInfo]:
    return backend.list_pods(wl.namespace, workload_selector(wl.kind, wl.name))


def nccl_ops_seconds(backend, wl, pod: PodInfo) -> float:
    """The timed iterations alone (-n 20, out-of-place and in-place) of what the pair's
    launcher printed: a lower bound of its run."""
    text = backend.pod_logs(pod.name, wl.namespace)
    rows = parse_nccl_tests(text).runs[-1].rows
    return sum(20 * (r.oop_time_us + r.ip_time_us) for r in rows) / 1e6


def test_a_fabric_validation_costs_what_its_pairs_ran_in_every_round(fleet_state):
    """With a bad node the validation runs pass 1 and localization rounds: each round's pods
    are counted, from their own container times."""
    SimState().inject(CLUSTER, POOL, f"bad-node:{CLUSTER}-{POOL}-3")
    # the GPU health check's cost is its own row's
    # (tests/services/validation/test_gpu_health_nightly.py)
    svc = FabricValidation(load_catalog().pool(CLUSTER, POOL), Ledger(), gpu_health=False)
    state = svc.begin("night-cost")
    expected, rounds = 0.0, 0
    while state.workload:
        wl = state.workload
        _wait(svc.backend, wl)
        pods = pods_of(svc.backend, wl)
        for pair in {p.labels["jobset.sigs.k8s.io/replicatedjob-name"] for p in pods}:
            two = [p for p in pods if p.labels["jobset.sigs.k8s.io/replicatedjob-name"] == pair]
            assert len(two) == 2 and len({(p.started_at, p.finished_at) for p in two}) == 1
            launcher = min(two, key=lambda p: p.name)
            ops = nccl_ops_seconds(svc.backend, wl, launcher)
            # setup, NCCL's init, warm-up, the sync and check operations and the sidecar's stop
            # on top of the timed iterations
            assert ops + NCCL_SETUP_S < launcher.run_seconds < 1.3 * ops + NCCL_SETUP_S + 5
        # a pod holds its node's GPUs from its binding: its image pull and start count too
        assert all(p.held_seconds > p.run_seconds for p in pods)
        expected += sum(p.held_seconds for p in pods) * GPUS
        rounds += 1
        state = svc.collect(state)
    svc.finish(state)
    assert rounds >= 2
    row = Ledger().latest_validation(CLUSTER, POOL, "fabric")
    assert row["details"]["gpu_minutes"] == pytest.approx(expected / 60, abs=0.001)
    assert row["details"]["cost_nodes"] == row["nodes_tested"] == 6
    assert row["details"]["gpu_minutes_per_node"] == pytest.approx(expected / 60 / 6, abs=0.001)
    # the pool's small-message latency: the median over the passing pass-1 pairs only
    pairs = Ledger().pairs(row["id"])
    passing = [p["small_latency_us"] for p in pairs if p["pass_no"] == 1 and p["passed"]]
    failing = [p["small_latency_us"] for p in pairs if p["pass_no"] == 1 and not p["passed"]]
    assert passing and failing
    assert row["details"]["small_latency_us"] == statistics.median(passing)
    assert row["details"]["small_latency_us"] < min(failing)


def test_the_modelled_clock_does_not_follow_the_sims_speed(fleet_state, monkeypatch):
    """GPUFLEET_SIM_SPEED compresses the wall clock only: the same workload costs the same."""
    ref = load_catalog().pool(CLUSTER, POOL)
    costs, walls = [], []
    for speed in ("0.05", "0.6"):
        monkeypatch.setenv("GPUFLEET_SIM_SPEED", speed)
        SimState().reset()
        svc = FabricValidation(ref, Ledger(), gpu_health=False)
        state = svc.begin(f"night-speed-{speed}")
        began = time.monotonic()
        _wait(svc.backend, state.workload)
        walls.append(time.monotonic() - began)
        costs.append(gpu_seconds(pods_of(svc.backend, state.workload), GPUS))
        svc.backend.delete(state.workload.kind, state.workload.name, state.workload.namespace)
    assert walls[1] > walls[0]
    assert costs[0] == pytest.approx(costs[1], rel=0.02)
    assert costs[0] > 6 * NCCL_SETUP_S * GPUS  # six pods, each at least the setup


def test_a_storage_validation_costs_what_fio_ran(fleet_state):
    svc = StorageValidation(load_catalog().pool(CLUSTER, POOL), Ledger())
    state = svc.begin("night-fio")
    wl = state.workload
    _wait(svc.backend, wl)
    pods = pods_of(svc.backend, wl)
    assert len(pods) == 4
    for pod in pods:  # each client wrote then read 16 GiB at what its own fio output reports
        fio = parse_fio_json(svc.backend.pod_logs(pod.name, wl.namespace))
        expected = 16 * 1024 / fio.write_mib_s + 16 * 1024 / fio.read_mib_s
        assert pod.run_seconds == pytest.approx(expected, rel=1e-6)  # no sidecar: no teardown
    svc.finish(state)
    details = Ledger().latest_validation(CLUSTER, POOL, "storage")["details"]
    total = sum(p.held_seconds for p in pods) * GPUS / 60
    assert details["gpu_minutes"] == pytest.approx(total, abs=0.001)
    assert details["cost_nodes"] == 6  # per node of the pool the night covers, like fabric
    assert details["gpu_minutes_per_node"] == pytest.approx(total / 6, abs=0.001)


def test_fio_passes_are_capped_by_the_job_specs_runtime():
    from gpufleet.backends.sim.output import fio_json
    from gpufleet.manifests.storage_validation import render_storage_validation

    job = render_storage_validation(load_catalog().pool(CLUSTER, POOL), ["n0"], "night-cap")
    (_, _, template), *_ = workload_pod_templates(job)
    run = PodRun(
        "Succeeded",
        0.0,
        {"fio": fio_json(host="n0", write_mib_s=100.0, read_mib_s=200.0)},
    )
    # 16 GiB at 100 then 200 MiB/s: 164 s + 82 s, under the spec's 600 s cap
    assert run_times(template, [run]) == [pytest.approx(16384 / 100 + 16384 / 200)]
    command = template["spec"]["containers"][0]["command"]
    command[-1] = command[-1].replace("--runtime=600", "--runtime=60")
    assert run_times(template, [run]) == [pytest.approx(60 + 60)]


def test_the_launcher_meets_its_peer_without_a_fixed_wait():
    """No ``sleep`` between the launcher's tries of its peer: it blocks on the rendezvous FIFO
    the peer writes to once up, and the sim's ``gang`` stage is the rendezvous alone; a script
    that still polls every second pays half a poll more on the sim's clock."""
    from gpufleet.backends.sim.run_times import POLL_WAIT_S, RENDEZVOUS_MARK, gang_seconds
    from gpufleet.config.paths import include_dir
    from gpufleet.manifests.nccl_validation import render_nccl_validation

    template = (include_dir() / "manifests/nccl-validation.yaml.j2").read_text()
    loop = template[template.index('until ssh "${GPUFLEET_WORKER}"') :].split("done", 1)[0]
    assert "sleep" not in loop and "read -r -t 10 -u 3" in loop
    job = render_nccl_validation(load_catalog().pool(CLUSTER, POOL), [("n0", "n1")], "night-r")
    (_, _, pod), *_ = workload_pod_templates(job)
    assert RENDEZVOUS_MARK in pod["spec"]["containers"][0]["command"][-1]
    assert gang_seconds(pod) == RENDEZVOUS_S
    polling = pod["spec"]["containers"][0]["command"][-1].replace(RENDEZVOUS_MARK, "gpufleet-x")
    pod["spec"]["containers"][0]["command"][-1] = polling
    assert gang_seconds(pod) == RENDEZVOUS_S + POLL_WAIT_S
