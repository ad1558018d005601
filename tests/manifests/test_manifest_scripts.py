"""The scripts inside the rendered pods, run with bash/sh against stub programs: the launcher
prints the results, the marker and the JSON; the peer waits and exits; fio leaves nothing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from gpufleet.domain import workloads as w
from gpufleet.domain.fleet import PoolRef
from gpufleet.manifests.gpu_health import HEALTH_CONTAINER
from gpufleet.manifests.nccl_validation import NCCL_JSON_MARKER, render_nccl_validation
from gpufleet.manifests.storage_validation import (
    FIO_CONTAINER,
    PoolCheck,
    render_storage_validation,
)

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def stub(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text("#!/bin/bash\n" + body + "\n")
    path.chmod(0o755)


def nccl_script(ref: PoolRef, root: Path, **kwargs) -> tuple[str, dict[str, str]]:
    """The launcher/peer script of pair-0 with its absolute paths moved under ``root``."""
    obj = render_nccl_validation(ref, [("node-a", "node-b")], "run-1", **kwargs)
    ((_, _, template),) = w.workload_pod_templates(obj)
    main = template["spec"]["containers"][0]
    script = main["command"][2]
    for path in ("/root/", "/run/sshd", "/tmp/", "/etc/gpufleet/ssh/"):
        script = script.replace(path, f"{root}{path}")
    script = script.replace("/usr/sbin/sshd", "sshd")
    env = {e["name"]: e["value"] for e in main["env"] if "value" in e}
    return script, env


@pytest.fixture
def sandbox(tmp_path: Path) -> tuple[Path, Path]:
    root, bin_dir = tmp_path / "root-fs", tmp_path / "bin"
    for sub in ("root", "run", "tmp", "etc/gpufleet/ssh"):
        (root / sub).mkdir(parents=True)
    (root / "etc/gpufleet/ssh/ssh-privatekey").write_text("key\n")
    bin_dir.mkdir()
    stub(bin_dir, "sshd", "exit 0")
    stub(bin_dir, "ssh-keygen", "echo ssh-ed25519 AAAA")
    # ssh <host> <cmd...>: record it; "touch <file>" really touches (the done marker)
    stub(bin_dir, "ssh", f'echo "$*" >> {root}/ssh.log; [ "$2" = touch ] && touch "$3"; exit 0')
    stub(
        bin_dir,
        "mpirun",
        'echo "MPIRUN $*" >&2; while [ $# -gt 0 ]; do [ "$1" = -J ] && '
        'echo \'{"results": [{"size": 8}]}\' > "$2"; shift; done; '
        'echo "#       size  busbw"; echo "# Avg bus bandwidth    : 1.0"',
    )
    stub(bin_dir, "getent", "exit 2")
    return root, bin_dir


def run(script: str, env: dict[str, str], bin_dir: Path, index: str, timeout: float = 30):
    full = {**os.environ, **env, "GPUFLEET_INDEX": index}
    full.pop("LD_PRELOAD", None)
    full["PATH"] = f"{bin_dir}:{full['PATH']}"
    return subprocess.run(
        ["bash", "-c", script], env=full, capture_output=True, text=True, timeout=timeout
    )


def test_launcher_prints_results_then_marker_then_json(eks_ref: PoolRef, sandbox) -> None:
    root, bin_dir = sandbox
    script, env = nccl_script(eks_ref, root, tests_dir=str(bin_dir))
    stub(bin_dir, "all_reduce_perf", "exit 0")
    env["GPUFLEET_WAIT_SECONDS"] = "5"
    done = run(script, env, bin_dir, "0")
    assert done.returncode == 0, done.stderr
    text, marker, payload = done.stdout.partition(NCCL_JSON_MARKER + "\n")
    assert marker and "# Avg bus bandwidth" in text
    assert json.loads(payload) == {"results": [{"size": 8}]}
    mpirun = next(line for line in done.stderr.splitlines() if line.startswith("MPIRUN"))
    gpus = eks_ref.pool.gpu.count
    assert f"-np {2 * gpus}" in mpirun
    assert f"-H {env['GPUFLEET_LAUNCHER']}:{gpus},{env['GPUFLEET_WORKER']}:{gpus}" in mpirun
    assert "-x FI_PROVIDER" in mpirun and "-x NCCL_DEBUG_FILE" in mpirun
    assert "-x LD_PRELOAD" not in mpirun  # unset variables are not exported
    assert f"{bin_dir}/all_reduce_perf -b 8 -e {8 * 2**30}" in mpirun
    # the launcher told its peer it is done
    assert (
        f"{env['GPUFLEET_WORKER']} touch {root}/tmp/gpufleet-done" in (root / "ssh.log").read_text()
    )


def test_launcher_fails_without_the_binary(gke_ref: PoolRef, sandbox) -> None:
    root, bin_dir = sandbox
    script, env = nccl_script(gke_ref, root, tests_dir=str(root / "nowhere"))
    done = run(script, env, bin_dir, "0")
    assert done.returncode == 1
    assert "all_reduce_perf not found" in done.stderr
    assert NCCL_JSON_MARKER not in done.stdout


def test_peer_exits_when_the_launcher_is_done(gke_ref: PoolRef, sandbox) -> None:
    root, bin_dir = sandbox
    script, env = nccl_script(gke_ref, root)
    (root / "tmp/gpufleet-done").touch()
    done = run(script, env, bin_dir, "1")
    assert done.returncode == 0 and "launcher finished" in done.stderr


def test_launcher_meets_a_late_peer_at_the_rendezvous_without_waiting(
    eks_ref: PoolRef, sandbox
) -> None:
    """The peer is not up when the launcher first tries it: the launcher blocks on the
    rendezvous FIFO, which the peer writes to once its sshd is up, and goes on at once (not at
    the FIFO's 10 s timeout, nor at a poll's next tick), printing the gang stage."""
    root, bin_dir = sandbox
    script, env = nccl_script(eks_ref, root, tests_dir=str(bin_dir))
    stub(bin_dir, "all_reduce_perf", "exit 0")
    up, fifo = root / "peer-up", root / "tmp/gpufleet-rendezvous"
    # ssh to the peer fails until it is up; the first failed try makes the peer arrive (its
    # sshd up, then its word through the launcher's FIFO, as its script does)
    stub(
        bin_dir,
        "ssh",
        f'echo "$*" >> {root}/ssh.log; [ -f {up} ] && exit 0; '
        f"(touch {up}; echo up > {fifo}) & exit 255",
    )
    env["GPUFLEET_WAIT_SECONDS"] = "60"
    done = run(script, env, bin_dir, "0")
    assert done.returncode == 0, done.stderr
    (gang,) = [ln for ln in done.stderr.splitlines() if "stage gang" in ln]
    assert float(gang.rsplit(" ", 1)[1]) < 5  # the 10 s read timeout never ran out
    tries = [ln for ln in (root / "ssh.log").read_text().splitlines() if ln.endswith(" true")]
    assert len(tries) == 2  # one failed try, one after the peer said it is up


def test_peer_leaves_as_soon_as_the_launcher_signals(gke_ref: PoolRef, sandbox) -> None:
    """The launcher's end signals the peer (USR1, by the pid it wrote): it exits at once, not
    at its next 5 s check of the done file."""
    import signal
    import time

    root, bin_dir = sandbox
    script, env = nccl_script(gke_ref, root)
    stub(bin_dir, "getent", 'echo "10.0.0.1 launcher"')
    # the peer's sleeps, recorded from the sleeping process itself: once its 5 s check's sleep
    # runs, the peer waits in its loop
    sleeps = root / "sleeps.log"
    stub(bin_dir, "sleep", f'echo "$1" >> {sleeps}; exec {shutil.which("sleep")} "$1"')
    full = {**os.environ, **env, "GPUFLEET_INDEX": "1"}
    full["PATH"] = f"{bin_dir}:{full['PATH']}"
    peer = subprocess.Popen(["bash", "-c", script], env=full, stderr=subprocess.PIPE, text=True)
    pid_file = root / "tmp/gpufleet-worker.pid"
    deadline = time.monotonic() + 20
    while not sleeps.exists() or "5" not in sleeps.read_text().split():
        assert time.monotonic() < deadline and peer.poll() is None
    os.kill(int(pid_file.read_text()), signal.SIGUSR1)
    _, err = peer.communicate(timeout=3)  # well under the 5 s between its checks
    assert peer.returncode == 0 and "launcher finished" in err


def test_peer_fails_when_the_launcher_vanishes(gke_ref: PoolRef, sandbox) -> None:
    root, bin_dir = sandbox
    script, env = nccl_script(gke_ref, root)
    script = script.replace("sleep 5", "sleep 0.05")
    flag = root / "seen-once"
    stub(bin_dir, "getent", f'[ -f {flag} ] && exit 2; touch {flag}; echo "10.0.0.1 launcher"')
    done = run(script, env, bin_dir, "1")
    assert done.returncode == 1 and "went away without finishing" in done.stderr


def test_fio_writes_json_only_and_cleans_up(gke_ref: PoolRef, tmp_path: Path) -> None:
    mount = tmp_path / "lustre"
    mount.mkdir()
    fs = gke_ref.filesystem.model_copy(update={"mount_path": str(mount)})
    cluster = gke_ref.cluster.model_copy(update={"filesystems": (fs,)})
    ref = PoolRef(region=gke_ref.region, cluster=cluster, pool=gke_ref.pool)
    obj = render_storage_validation(ref, ["node-a"], "run-1", size_gib_per_node=1)
    ((_, _, template),) = w.workload_pod_templates(obj)
    container = template["spec"]["containers"][0]
    assert container["command"][:2] == ["sh", "-c"]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # fio stub: record its argv and where it ran, print JSON like --output-format=json
    stub(
        bin_dir,
        "fio",
        f'echo "$*" > {tmp_path}/fio.args; for a; do case $a in --directory=*) '
        f'd="${{a#--directory=}}"; touch "$d/gpufleet.0.0"; ls -d "$d" > {tmp_path}/fio.dir;; '
        'esac; done; echo \'{"fio version": "fio-3.36", "jobs": []}\'',
    )
    env = {**os.environ, "GPUFLEET_INDEX": "0", "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    done = subprocess.run(
        ["sh", "-c", container["command"][2]], env=env, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["fio version"] == "fio-3.36"
    workdir = Path((tmp_path / "fio.dir").read_text().strip())
    assert workdir == mount / ".gpufleet-validation" / "run-1" / "0"
    assert not workdir.exists()  # removed on exit
    args = (tmp_path / "fio.args").read_text()
    assert "--size=128M" in args and "--numjobs=8" in args  # 1 GiB over 8 GPUs


def test_a_pool_check_caps_each_fio_pass_and_bad_runtimes_are_refused(gke_ref: PoolRef) -> None:
    def args(**kwargs) -> str:
        obj = render_storage_validation(gke_ref, ["node-a"], "run-1", **kwargs)
        ((_, _, template),) = w.workload_pod_templates(obj)
        return template["spec"]["containers"][0]["command"][2]

    assert "--runtime=600" in args()  # the full test
    assert "--runtime=60 " in args(runtime_seconds=60, size_gib_per_node=1)
    for bad in (0, 601, 1.5, True, "60"):
        with pytest.raises(ValueError, match="runtime_seconds must be an integer from 1 to 600"):
            args(runtime_seconds=bad)
    for bad in (0, -1, 1.5, True, "4"):
        with pytest.raises(ValueError, match="size_gib_per_node must be a positive integer"):
            args(size_gib_per_node=bad)


# --- the pair pods' init containers: the GPU health check and fio, both always exiting 0 -----


def _fio_ref(ref: PoolRef, mount: Path) -> PoolRef:
    fs = ref.filesystem.model_copy(update={"mount_path": str(mount)})
    cluster = ref.cluster.model_copy(update={"filesystems": (fs,)})
    return PoolRef(region=ref.region, cluster=cluster, pool=ref.pool)


def _pair_init(ref: PoolRef, name: str, **kwargs) -> dict:
    obj = render_nccl_validation(ref, [("node-a", "node-b")], "run-1", **kwargs)
    ((_, _, template),) = w.workload_pod_templates(obj)
    return next(c for c in template["spec"]["initContainers"] if c["name"] == name)


def _fio_stub(bin_dir: Path, tmp_path: Path, tail: str) -> None:
    """fio: record where it ran (creating a file there), print JSON on stdout or to
    ``--output=<file>``, then ``tail``."""
    stub(
        bin_dir,
        "fio",
        'out=""; for a; do case $a in --directory=*) d="${a#--directory=}"; '
        f'touch "$d/gpufleet.0.0"; ls -d "$d" > {tmp_path}/fio.dir;; '
        '--output=*) out="${a#--output=}";; esac; done; '
        'json=\'{"fio version": "fio-3.36", "jobs": []}\'; '
        'if [ -n "$out" ]; then echo "$json" > "$out"; else echo "$json"; fi; ' + tail,
    )


def _run_sh(script: str, bin_dir: Path, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "GPUFLEET_INDEX": "1", **env}
    full["PATH"] = f"{bin_dir}:{full['PATH']}"
    return subprocess.run(
        ["sh", "-c", script], env=full, capture_output=True, text=True, timeout=30
    )


@pytest.mark.parametrize(
    "tail, ok",
    [("exit 0", True), ("exit 1", False), ("kill -9 $$", False)],
    ids=["fio-ok", "fio-fails", "fio-killed"],
)
def test_the_pair_fio_step_always_exits_0_and_prints_json_only_when_fio_succeeded(
    gke_ref: PoolRef, tmp_path: Path, tail: str, ok: bool
) -> None:
    mount = tmp_path / "lustre"
    mount.mkdir()
    ref = _fio_ref(gke_ref, mount)
    init = _pair_init(ref, FIO_CONTAINER, pool_check=PoolCheck(0, 1))
    assert init["command"][:2] == ["sh", "-c"]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _fio_stub(bin_dir, tmp_path, tail)
    script = init["command"][2].replace("/tmp/gpufleet-fio.json", f"{tmp_path}/fio.json")
    done = _run_sh(script, bin_dir)
    assert done.returncode == 0, done.stderr
    workdir = Path((tmp_path / "fio.dir").read_text().strip())
    assert workdir == mount / ".gpufleet-validation" / "run-1" / "1"  # the pod's index
    assert not workdir.exists()  # removed on exit
    if ok:
        assert json.loads(done.stdout)["fio version"] == "fio-3.36"
        assert "fio failed" not in done.stderr
    else:
        assert done.stdout == ""  # no JSON: the storage verdict reads that
        assert "[gpufleet] fio failed (exit " in done.stderr


def test_the_pair_fio_step_exits_0_when_the_mount_is_not_writable(
    gke_ref: PoolRef, tmp_path: Path
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")  # mkdir -p under a file fails, even as root
    ref = _fio_ref(gke_ref, blocker)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _fio_stub(bin_dir, tmp_path, "exit 0")
    init = _pair_init(ref, FIO_CONTAINER, pool_check=PoolCheck(0, 1))
    done = _run_sh(init["command"][2], bin_dir)
    assert done.returncode == 0 and done.stdout == ""
    assert "cannot create" in done.stderr and not (tmp_path / "fio.dir").exists()
    # the storage Job's own script still fails there
    job = render_storage_validation(ref, ["node-a"], "run-1", size_gib_per_node=1)
    ((_, _, template),) = w.workload_pod_templates(job)
    done = _run_sh(template["spec"]["containers"][0]["command"][2], bin_dir)
    assert done.returncode == 1 and "cannot create" in done.stderr


def test_the_storage_jobs_fio_still_fails_with_fio(gke_ref: PoolRef, tmp_path: Path) -> None:
    mount = tmp_path / "lustre"
    mount.mkdir()
    ref = _fio_ref(gke_ref, mount)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _fio_stub(bin_dir, tmp_path, "exit 3")
    job = render_storage_validation(ref, ["node-a"], "run-1", size_gib_per_node=1)
    ((_, _, template),) = w.workload_pod_templates(job)
    done = _run_sh(template["spec"]["containers"][0]["command"][2], bin_dir)
    assert done.returncode == 3
    assert json.loads(done.stdout)["fio version"] == "fio-3.36"


def _health_stubs(bin_dir: Path, dcgmi: str) -> None:
    stub(bin_dir, "dmesg", 'echo "[ 1.0] NVRM: loading NVIDIA UNIX x86_64 Kernel Module"')
    stub(
        bin_dir,
        "nvidia-smi",
        'case "$*" in *nvlink*) echo "GPU 0: NVIDIA H200";; '
        '*query-gpu*) echo "0, Not Active, Not Active";; *) echo "==== NVSMI LOG ====";; esac',
    )
    stub(bin_dir, "dcgmi", dcgmi)


@pytest.mark.parametrize(
    "dcgmi, diag_exit",
    [
        ("echo '{\"DCGM GPU Diagnostic\": {}}'", 0),
        ("echo dcgmi: cannot reach the host engine >&2; exit 226", 226),
        ("exec sleep 20", 124),  # past its level's 1 s hard timeout (the limits below)
    ],
    ids=["diag-ok", "diag-fails", "diag-times-out"],
)
def test_the_pair_health_step_prints_every_section_and_always_exits_0(
    gke_ref: PoolRef, tmp_path: Path, dcgmi: str, diag_exit: int
) -> None:
    from gpufleet.domain.health.tiers import DEFAULT_DIAG_TIMEOUT_S, DcgmLimits
    from gpufleet.parsing.health.report import parse_node_health

    limits = DcgmLimits("H200", timeouts_s={**DEFAULT_DIAG_TIMEOUT_S, 1: 1})
    init = _pair_init(gke_ref, HEALTH_CONTAINER, health_levels=[1], dcgm_limits=limits)
    assert init["command"][:2] == ["bash", "-c"]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _health_stubs(bin_dir, dcgmi)
    full = {**os.environ, "GPUFLEET_NODE": "node-a", "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    done = subprocess.run(
        init["command"], env=full, capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
    report = parse_node_health(done.stdout)
    assert (report.node, report.level, report.timeout) == ("node-a", 1, 1)
    assert dict(report.exits) == {
        "dmesg": 0,
        "nvidia-smi-remap-ecc": 0,
        "nvidia-smi-nvlink": 0,
        "thermal": 0,
        "dcgmi-diag": diag_exit,
    }
