"""The simulated fleet judges the manifests it is given, as NCCL on a real cluster would.

Each workload we render (the nightly nccl-tests pair JobSet, the storage validation Job, the
training JobSet) is rendered for a GKE-shaped pool (gIB) and an EKS-shaped pool (EFA), one piece
of plumbing is removed, the result runs on the sim, and the real verdict code judges it
(``domain.verdicts.judge_pair`` over ``services.common.collect.read_nccl_pair``,
``services.launch.submit.TrainingLaunch.confirm``,
``services.validation.storage.StorageValidation.finish``).
Whatever is removed, the pool never passes as its expected transport, unless the removal does
not matter to NCCL, which the case says with its source.

Sources cited below:
- [NCCL_NET] NCCL docs, environment variables, NCCL_NET: "Forces NCCL to use a specific
  network ... doesn't automatically fall back on the internal IB or Socket implementation ...
  has to match exactly the name of the NCCL network used (case-insensitive). Internal network
  names are "IB" (generic IB verbs) and "Socket" (TCP/IP sockets)."
  https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-net
- [PLUGIN] NCCL docs, NCCL_NET_PLUGIN: NCCL loads its net plugin library (libnccl-net.so) from
  the library search path; without one it uses its internal IB, then Socket networks.
  https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-net-plugin
- [GKE-RDMA] GKE, "Maximize GPU network bandwidth ... with GPUDirect RDMA" (A3 Ultra, A4): the
  pod gets its RDMA NICs only through the networking.gke.io/interfaces annotation; the gIB
  NCCL plugin is mounted from the host's /home/kubernetes/bin/gib at /usr/local/gib and found
  through LD_LIBRARY_PATH. https://cloud.google.com/kubernetes-engine/docs/how-to/gpu-bandwidth-gpudirect-rdma
- [EKS-EFA] Amazon EKS, "Run machine learning training on Amazon EKS with Elastic Fabric
  Adapter": a pod gets EFA devices only by requesting vpc.amazonaws.com/efa.
  https://docs.aws.amazon.com/eks/latest/userguide/node-efa.html
- [OFI-INIT] aws-ofi-nccl, doc/plugin-initialization.md, "Platform integration": the AWS
  platform code "forces FI_PROVIDER=efa unless overridden".
- [OFI-IMAGE] aws-samples/awsome-distributed-training, micro-benchmarks/nccl-tests/
  nccl-tests.Dockerfile: the AWS nccl-tests image builds aws-ofi-nccl into
  /opt/aws-ofi-nccl/install (--enable-platform-aws), a folder the nccl-tests launcher appends
  to the library path (gpufleet.manifests.nccl_validation.NCCL_TESTS_IMAGE_LIBS).
- [GPU] Kubernetes, "Schedule GPUs": containers get GPUs by requesting nvidia.com/gpu from the
  device plugin. https://kubernetes.io/docs/tasks/manage-gpus/scheduling-gpus/ (Where a
  container runtime leaks every GPU into a container that requests none, those GPUs are still
  not the pod's: the sim models the enforced case.)
- [NCCL_DEBUG] NCCL docs, NCCL_DEBUG: INFO prints debug information; unset, NCCL prints
  nothing. https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-debug
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from gpufleet.backends import cluster_backend
from gpufleet.backends.sim.programs import START_DELAY_S, speed
from gpufleet.backends.sim.state import SimState
from gpufleet.config.baselines import find_baseline
from gpufleet.config.catalog import load_catalog
from gpufleet.domain.plumbing import (
    EFA_RESOURCE,
    GIB_MOUNT,
    GKE_INTERFACES_ANNOTATION,
    GPU_RESOURCE,
    NCCL_LOG_CONTAINER,
    OFI_LIB,
    inspect_pod,
)
from gpufleet.domain.verdicts import judge_pair
from gpufleet.domain.workloads import workload_pod_templates, workload_selector
from gpufleet.errors import BackendError
from gpufleet.manifests.nccl_validation import render_nccl_validation
from gpufleet.manifests.storage_validation import render_storage_validation
from gpufleet.manifests.training import TrainingJobSpec, render_training_job
from gpufleet.services.common.collect import Workload, read_nccl_pair
from tests.support.fleet import frozen_sim_clock

GKE = ("a3u-sim", "h200-b")  # gib
EKS = ("p5-sim", "h100-a")  # ofi-efa


# --- editing a rendered pod template ------------------------------------------------------------


def _main(t: dict[str, Any]) -> dict[str, Any]:
    return t["spec"]["containers"][0]


def drop_annotation(key: str) -> Callable:
    def edit(t):
        t["metadata"]["annotations"].pop(key)

    return edit


def drop_mount(path: str) -> Callable:
    def edit(t):
        main = _main(t)
        main["volumeMounts"] = [m for m in main["volumeMounts"] if m["mountPath"] != path]

    return edit


def replace_volume(name: str, volume: dict) -> Callable:
    def edit(t):
        t["spec"]["volumes"] = [
            {"name": name, **volume} if v["name"] == name else v for v in t["spec"]["volumes"]
        ]

    return edit


def drop_env(name: str) -> Callable:
    def edit(t):
        main = _main(t)
        main["env"] = [e for e in main["env"] if e["name"] != name]

    return edit


def set_env(name: str, value: str) -> Callable:
    def edit(t):
        drop_env(name)(t)
        _main(t)["env"].append({"name": name, "value": value})

    return edit


def drop_library_dir(folder: str) -> Callable:
    def edit(t):
        for e in _main(t)["env"]:
            if e["name"] == "LD_LIBRARY_PATH":
                e["value"] = ":".join(p for p in e["value"].split(":") if p != folder)

    return edit


def drop_resource(resource: str) -> Callable:
    def edit(t):
        for kind in ("limits", "requests"):
            _main(t)["resources"][kind].pop(resource, None)

    return edit


def drop_sidecar(t):
    t["spec"]["initContainers"] = [
        c for c in t["spec"].get("initContainers", []) if c["name"] != NCCL_LOG_CONTAINER
    ]


def edit_pods(manifest: dict, *edits: Callable) -> dict:
    for _, _, template in workload_pod_templates(manifest):
        for edit in edits:
            edit(template)
    return manifest


# --- what NCCL would do, per removal --------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    name: str
    edits: tuple[Callable, ...]
    transport: str | None  # the transport NCCL ends up on; None: the pod fails, no figure
    failure: str | None = None  # words the failure carries
    matters: bool = True  # False: the removal does not matter to NCCL (the case says why)


GKE_VALIDATION = [
    # [GKE-RDMA] no RDMA NIC attached; [PLUGIN] gIB and IB find no device, NCCL uses Socket
    Case("no RDMA NIC attachment", (drop_annotation(GKE_INTERFACES_ANNOTATION),), "socket"),
    # [PLUGIN] the gIB plugin is not found; [GKE-RDMA] the RoCE NICs are attached, so NCCL's
    # internal IB transport runs over them: IB/RoCE, not the expected gib
    Case("no gIB plugin mount", (drop_mount(GIB_MOUNT),), "roce"),
    # the volume at /usr/local/gib is not the host's /home/kubernetes/bin/gib: no plugin there
    Case("gIB mount from an empty volume", (replace_volume("gib", {"emptyDir": {}}),), "roce"),
    Case(
        "gIB mount from the wrong host path",
        (replace_volume("gib", {"hostPath": {"path": "/home/kubernetes/bin/nvidia"}}),),
        "roce",
    ),
    # [PLUGIN] dlopen looks on the library path: without /usr/local/gib/lib64 no plugin loads
    Case("gIB not on LD_LIBRARY_PATH", (drop_library_dir(f"{GIB_MOUNT}/lib64"),), "roce"),
    Case("no LD_LIBRARY_PATH", (drop_env("LD_LIBRARY_PATH"),), "roce"),
    # [GPU] no GPU requested: no CUDA device, the program fails before NCCL starts
    Case("no GPU request", (drop_resource(GPU_RESOURCE),), None, "no CUDA-capable device"),
    # [NCCL_NET] Socket is an internal network: sockets even with the full plumbing
    Case("NCCL_NET=Socket", (set_env("NCCL_NET", "Socket"),), "socket"),
    Case("NCCL_NET=socket (any case)", (set_env("NCCL_NET", "socket"),), "socket"),
    # [NCCL_NET] a name no loaded network has: NCCL fails instead of falling back
    Case("NCCL_NET unknown plugin", (set_env("NCCL_NET", "FooNet"),), None, "network FooNet"),
    # [NCCL_NET] pinned to the gIB network while the plugin is absent: NCCL fails
    Case(
        "NCCL_NET=gIB without the plugin",
        (set_env("NCCL_NET", "gIB"), drop_mount(GIB_MOUNT)),
        None,
        "network gIB not found",
    ),
    # [NCCL_NET] pinned to NCCL's own IB over the RoCE NICs: IB, not the expected gib
    Case("NCCL_NET=IB", (set_env("NCCL_NET", "IB"),), "roce"),
    # [NCCL_DEBUG] no NCCL_DEBUG: no INFO log, so the transport cannot be confirmed
    Case("no NCCL_DEBUG", (drop_env("NCCL_DEBUG"),), "unknown"),
]

EKS_VALIDATION = [
    # [EKS-EFA] no EFA devices; [OFI-INIT] the efa provider has no device; [PLUGIN] NCCL's IB
    # transport cannot use EFA (no reliable-connected queue pairs): Socket
    Case("no EFA device request", (drop_resource(EFA_RESOURCE),), "socket"),
    # [OFI-INIT] the plugin sets FI_PROVIDER=efa itself when the pod does not: no difference
    Case("no FI_PROVIDER", (drop_env("FI_PROVIDER"),), "ofi-efa", matters=False),
    # [OFI-INIT] an explicit FI_PROVIDER overrides: libfabric over TCP, not EFA
    Case("FI_PROVIDER=tcp", (set_env("FI_PROVIDER", "tcp"),), "ofi-tcp"),
    # [OFI-IMAGE] the default nccl-tests image carries aws-ofi-nccl itself and the launcher
    # appends that folder to the library path: the platform's entry does not matter here
    Case("no LD_LIBRARY_PATH", (drop_env("LD_LIBRARY_PATH"),), "ofi-efa", matters=False),
    # ... but without the image's folder as well, no plugin loads: Socket
    Case(
        "no library path to aws-ofi-nccl",
        (drop_env("LD_LIBRARY_PATH"), drop_env("GPUFLEET_IMAGE_LIBS")),
        "socket",
    ),
    Case("no GPU request", (drop_resource(GPU_RESOURCE),), None, "no CUDA-capable device"),
    Case("NCCL_NET=Socket", (set_env("NCCL_NET", "Socket"),), "socket"),
    Case("NCCL_NET unknown plugin", (set_env("NCCL_NET", "gIB"),), None, "network gIB not found"),
    # [NCCL_NET] pinned to Libfabric while EFA is absent: NCCL fails instead of falling back
    Case(
        "NCCL_NET=Libfabric without EFA",
        (set_env("NCCL_NET", "Libfabric"), drop_resource(EFA_RESOURCE)),
        None,
        "network Libfabric not found",
    ),
    # [NCCL_NET] IB is an internal network, but EFA gives it no device: NCCL fails
    Case("NCCL_NET=IB", (set_env("NCCL_NET", "IB"),), None, "network IB not found"),
    Case("no NCCL_DEBUG", (drop_env("NCCL_DEBUG"),), "unknown"),
]


@pytest.fixture
def catalog(fleet_state):
    frozen_sim_clock()
    return load_catalog()


def _wait(backend, kind: str, name: str, namespace: str, started_only: bool = False):
    """The workload's status once done (or, ``started_only``, once its pods started),
    advancing the sim's clock a tenth of a second at a time."""
    for _ in range(600):
        status = backend.workload_status(kind, name, namespace)
        if status.done or (
            started_only and status.pods and all(p.phase != "Pending" for p in status.pods)
        ):
            return status
        SimState().clock.advance(0.1)
    raise AssertionError(f"{kind} {name} did not finish in 60 simulated seconds: {status}")


def run_pair(catalog, where: tuple[str, str], *edits: Callable):
    """Render a one-pair validation JobSet, edit its pods, run it, judge it for real."""
    ref = catalog.pool(*where)
    backend = cluster_backend(ref.cluster)
    nodes = (f"{ref.cluster.name}-{ref.pool.name}-0", f"{ref.cluster.name}-{ref.pool.name}-1")
    manifest = edit_pods(render_nccl_validation(ref, [nodes], f"judge-{time.time()}"), *edits)
    backend.apply(manifest)
    meta = manifest["metadata"]
    _wait(backend, "JobSet", meta["name"], meta["namespace"])
    wl = Workload(kind="JobSet", name=meta["name"], namespace=meta["namespace"])
    run, info, failure = read_nccl_pair(backend, wl, 0, NCCL_LOG_CONTAINER)
    return judge_pair(
        nodes,
        run=run,
        log=info,
        expected_transport=ref.pool.transport,
        expect_gdrdma=ref.pool.gdrdma,
        baseline=find_baseline(
            ref.pool.gpu.model, ref.pool.gpu.count, 2, "all_reduce", ref.pool.transport
        ),
        tolerance=ref.pool.tolerance,
        failure=failure,
    )


def _check(verdict, case: Case, expected: str):
    if case.transport is None:  # a failed pod, not a figure
        assert not verdict.passed
        assert verdict.busbw_gbps is None, "a pod that cannot run must not report bandwidth"
        assert any(case.failure in r for r in verdict.reasons), verdict.reasons
    elif case.transport == "unknown":
        assert not verdict.passed and verdict.transport is None
        assert any("no NCCL INFO log" in r for r in verdict.reasons), verdict.reasons
    else:
        assert verdict.transport == case.transport, verdict.reasons
    if case.matters:
        assert not (verdict.passed and verdict.transport == expected), (case.name, verdict)
    else:
        assert verdict.passed and verdict.transport == expected, verdict.reasons


def test_full_plumbing_passes_on_both_shapes(catalog):
    for where in (GKE, EKS):
        verdict = run_pair(catalog, where)
        assert verdict.passed, verdict.reasons
        assert verdict.transport == catalog.pool(*where).pool.transport and verdict.gdrdma


@pytest.mark.parametrize("case", GKE_VALIDATION, ids=lambda c: c.name)
def test_gke_validation_pair_without_one_piece_of_plumbing(catalog, case):
    _check(run_pair(catalog, GKE, *case.edits), case, "gib")


@pytest.mark.parametrize("case", EKS_VALIDATION, ids=lambda c: c.name)
def test_eks_validation_pair_without_one_piece_of_plumbing(catalog, case):
    _check(run_pair(catalog, EKS, *case.edits), case, "ofi-efa")


def test_a_nic_fault_gives_that_nodes_pairs_sockets(catalog):
    """``bad-node:<node>:nic``: NCCL on that node finds no RDMA device, its pairs fall back."""
    from gpufleet.backends.faults import fault_injection

    ref = catalog.pool(*GKE)
    fault_injection(ref.cluster).inject(ref.pool.name, f"bad-node:{ref.cluster.name}-h200-b-1:nic")
    faulted = run_pair(catalog, GKE)  # nodes -0 and -1
    assert faulted.transport == "socket" and not faulted.passed
    backend = cluster_backend(ref.cluster)
    manifest = render_nccl_validation(ref, [("a3u-sim-h200-b-2", "a3u-sim-h200-b-3")], "other")
    backend.apply(manifest)
    _wait(backend, "JobSet", manifest["metadata"]["name"], manifest["metadata"]["namespace"])
    meta = manifest["metadata"]
    wl = Workload(kind="JobSet", name=meta["name"], namespace=meta["namespace"])
    _, info, failure = read_nccl_pair(backend, wl, 0, NCCL_LOG_CONTAINER)
    assert info.transport == "gib" and failure is None  # the other nodes keep RDMA


# --- NCCL's log exists only when the pod asks for it ---------------------------------------------


def _pods_and_backend(catalog, where, *edits):
    ref = catalog.pool(*where)
    backend = cluster_backend(ref.cluster)
    nodes = (f"{ref.cluster.name}-{ref.pool.name}-2", f"{ref.cluster.name}-{ref.pool.name}-3")
    manifest = edit_pods(render_nccl_validation(ref, [nodes], f"log-{time.time()}"), *edits)
    backend.apply(manifest)
    meta = manifest["metadata"]
    _wait(backend, "JobSet", meta["name"], meta["namespace"])
    pods = backend.list_pods(meta["namespace"], workload_selector("JobSet", meta["name"]))
    return backend, meta["namespace"], pods


@pytest.mark.parametrize("where", [GKE, EKS])
def test_nccl_info_lines_need_nccl_debug_info_and_the_sidecar(catalog, where):
    backend, ns, pods = _pods_and_backend(catalog, where)
    assert all(
        "NCCL INFO Using network" in backend.pod_logs(p.name, ns, NCCL_LOG_CONTAINER) for p in pods
    )
    backend, ns, pods = _pods_and_backend(catalog, where, drop_env("NCCL_DEBUG"))
    assert all(backend.pod_logs(p.name, ns, NCCL_LOG_CONTAINER) == "" for p in pods)
    backend, ns, pods = _pods_and_backend(catalog, where, set_env("NCCL_DEBUG", "WARN"))
    assert all("NCCL INFO" not in backend.pod_logs(p.name, ns, NCCL_LOG_CONTAINER) for p in pods)
    backend, ns, pods = _pods_and_backend(catalog, where, drop_sidecar)
    for p in pods:  # as the API server answers for a container the pod does not have
        with pytest.raises(BackendError, match="not valid for pod"):
            backend.pod_logs(p.name, ns, NCCL_LOG_CONTAINER)


def test_a_pinned_network_failure_is_warned_at_warn_level(catalog):
    backend, ns, pods = _pods_and_backend(
        catalog, GKE, set_env("NCCL_DEBUG", "WARN"), set_env("NCCL_NET", "FooNet")
    )
    logs = [backend.pod_logs(p.name, ns, NCCL_LOG_CONTAINER) for p in pods]
    assert all("NCCL WARN Error: network FooNet not found." in text for text in logs)
    assert not any("NCCL INFO" in text for text in logs)
    assert all(p.phase == "Failed" for p in pods)


# --- training JobSets: NCCL_NET pinned, so a missing piece fails the job -------------------------


def _training(catalog, where, *edits, name="judge"):
    from gpufleet.services.launch.submit import SubmittedJob, TrainingLaunch

    ref = catalog.pool(*where)
    backend = cluster_backend(ref.cluster)
    spec = TrainingJobSpec(
        name=name,
        namespace="ml",
        image="example/train:1",
        command=["torchrun", "train.py"],
        nodes=2,
        gpus_per_node=ref.pool.gpu.count,
    )
    manifest = edit_pods(render_training_job(ref, spec), *edits)
    backend.apply(manifest)
    _wait(backend, "JobSet", name, "ml", started_only=True)
    SimState().clock.advance(2 * START_DELAY_S * speed())  # a pod failing at NCCL init has failed
    job = {
        "launch_id": 0,
        "pool": ref.pool.name,
        "policy": "fail",
        "cluster": ref.cluster.name,
        "namespace": "ml",
        "kind": "JobSet",
        "name": name,
        "nodes": 2,
        "expected_transport": ref.pool.transport,
        "gdrdma": ref.pool.gdrdma,
    }
    launch = TrainingLaunch(catalog, ledger_factory=None, backend=backend)
    return manifest, launch.confirm(SubmittedJob.from_dict(job)).to_dict()


@pytest.mark.parametrize("where", [GKE, EKS])
def test_training_pods_carry_nccl_debug_info_and_the_log_sidecar(catalog, where):
    ref = catalog.pool(*where)
    spec = TrainingJobSpec("t", "ml", "example/train:1", ["torchrun", "t.py"], 2, 8)
    for _, _, template in workload_pod_templates(render_training_job(ref, spec)):
        fabric = inspect_pod(ref.cluster, ref.pool, template)
        assert fabric.writes_nccl_info and fabric.missing == ()
        assert fabric.pinned_net is not None  # training pins the network
    manifest, result = _training(catalog, where)
    assert result["confirmed"], result["problems"]
    assert result["transport"] == ref.pool.transport


TRAINING = [
    # [GKE-RDMA] + [NCCL_NET]: gIB is pinned and has no device without the NICs: NCCL fails
    (GKE, "no RDMA NIC attachment", (drop_annotation(GKE_INTERFACES_ANNOTATION),), "gIB not found"),
    # [PLUGIN] + [NCCL_NET]: gIB pinned, plugin absent: NCCL fails (no silent IB fallback)
    (GKE, "no gIB plugin mount", (drop_mount(GIB_MOUNT),), "gIB not found"),
    (
        GKE,
        "gIB from the wrong host path",
        (replace_volume("gib", {"hostPath": {"path": "/opt/gib"}}),),
        "gIB not found",
    ),
    (GKE, "no LD_LIBRARY_PATH", (drop_env("LD_LIBRARY_PATH"),), "gIB not found"),
    (GKE, "no GPU request", (drop_resource(GPU_RESOURCE),), "no CUDA-capable device"),
    # [NCCL_NET] Socket pinned: sockets, which the transport check refuses
    (GKE, "NCCL_NET=Socket", (set_env("NCCL_NET", "Socket"),), "transport socket"),
    (GKE, "NCCL_NET unknown plugin", (set_env("NCCL_NET", "FooNet"),), "FooNet not found"),
    # [NCCL_DEBUG]: no INFO log, no confirmation
    (GKE, "no NCCL_DEBUG", (drop_env("NCCL_DEBUG"),), "NCCL log is empty"),
    (GKE, "no log sidecar", (drop_sidecar,), "NCCL log unreadable"),
    (EKS, "no EFA device request", (drop_resource(EFA_RESOURCE),), "Libfabric not found"),
    # a training image is not assumed to carry aws-ofi-nccl: without the platform's library
    # path the pinned Libfabric network is absent
    (EKS, "no library path to aws-ofi-nccl", (drop_library_dir(OFI_LIB),), "Libfabric not found"),
    (EKS, "FI_PROVIDER=tcp", (set_env("FI_PROVIDER", "tcp"),), "transport ofi-tcp"),
    (EKS, "no GPU request", (drop_resource(GPU_RESOURCE),), "no CUDA-capable device"),
    (EKS, "NCCL_NET=Socket", (set_env("NCCL_NET", "Socket"),), "transport socket"),
    (EKS, "no NCCL_DEBUG", (drop_env("NCCL_DEBUG"),), "NCCL log is empty"),
]


@pytest.mark.parametrize(
    "where,name,edits,problem", TRAINING, ids=[f"{w[0]}-{n}" for w, n, _, _ in TRAINING]
)
def test_training_job_without_one_piece_of_plumbing_is_not_confirmed(
    catalog, where, name, edits, problem
):
    _, result = _training(catalog, where, *edits)
    assert not result["confirmed"]
    assert any(problem in p for p in result["problems"]), result["problems"]


def test_training_without_fi_provider_still_runs_on_efa(catalog):
    # [OFI-INIT] the plugin sets FI_PROVIDER=efa itself: the removal does not matter
    _, result = _training(catalog, EKS, drop_env("FI_PROVIDER"))
    assert result["confirmed"] and result["transport"] == "ofi-efa", result["problems"]


# --- storage validation: no NCCL, no GPU; the Lustre mount is what it needs -----------------------


def _storage(catalog, where, *edits):
    from gpufleet.services.validation.storage import StorageState, StorageValidation
    from gpufleet.store import Ledger

    ref = catalog.pool(*where)
    backend = cluster_backend(ref.cluster)
    nodes = [f"{ref.cluster.name}-{ref.pool.name}-{i}" for i in range(2)]
    manifest = edit_pods(render_storage_validation(ref, nodes, f"fio-{time.time()}"), *edits)
    backend.apply(manifest)
    meta = manifest["metadata"]
    _wait(backend, "Job", meta["name"], meta["namespace"])
    state = StorageState(
        cluster=ref.cluster.name,
        pool=ref.pool.name,
        run_id="judge",
        started_at="2026-01-01T00:00:00+00:00",
        workload=Workload(kind="Job", name=meta["name"], namespace=meta["namespace"]),
    )
    return manifest, StorageValidation(ref, Ledger(), backend).finish(state).to_dict()


@pytest.mark.parametrize("where", [GKE, EKS])
def test_storage_validation_needs_only_the_lustre_mount(catalog, where):
    ref = catalog.pool(*where)
    manifest, healthy = _storage(catalog, where)
    assert healthy["passed"], healthy["reasons"]
    # fio reads Lustre through the kernel client: the Job carries no GPU request and no NCCL
    # plumbing, so there is none to remove (the rendered pod, read as NCCL would see it)
    [(_, _, template)] = workload_pod_templates(manifest)
    fabric = inspect_pod(ref.cluster, ref.pool, template)
    assert fabric.gpus == 0 and fabric.plugin is None and not fabric.log_sidecar
    mount = ref.filesystem.mount_path
    for edits in (
        (drop_mount(mount),),
        (replace_volume("lustre", {"emptyDir": {}}),),
    ):
        _, result = _storage(catalog, where, *edits)
        assert not result["passed"]
        assert any("not mounted" in r for r in result["reasons"]), result["reasons"]
