"""`make up` serves on 127.0.0.1 unless told otherwise, and stopping it stops everything it
started (``scripts/airflow_up.py``).

``airflow standalone`` does neither: the api-server binds ``[api] host`` (0.0.0.0 by default),
and on SIGTERM it left its scheduler, api-server, triggerer and LocalExecutor workers running
(the Task SDK puts each task process in a process group of its own). The wrapper is tested
with a stand-in for ``airflow standalone`` that starts children the same ways: one in the
wrapper's group, one in a group of its own, one that ignores SIGTERM.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WRAPPER = ROOT / "scripts" / "airflow_up.py"

STAND_IN = """
import os, signal, subprocess, sys, time
kids = [
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]),
    # the Task SDK's supervisor puts a task process in a process group of its own
    subprocess.Popen([sys.executable, "-c", "import os, time; os.setpgid(0, 0); time.sleep(600)"]),
    # a worker that ignores SIGTERM
    subprocess.Popen([sys.executable, "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ready', flush=True); time.sleep(600)"], stdout=subprocess.PIPE, text=True),
]
kids[2].stdout.readline()  # its handler is set
pids = [os.getpid(), *(k.pid for k in kids)]
print("pids", *pids, "host", os.environ.get("AIRFLOW__API__HOST"), flush=True)
time.sleep(600)
"""


def _session_of(pid: int) -> int:
    return os.getsid(pid)


def _alive(pid: int) -> bool:
    """Running (a zombie nobody reaped is dead: it holds no port and runs nothing)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _start(tmp_path: Path, *args: str) -> tuple[subprocess.Popen, list[int], str]:
    stand_in = tmp_path / "standalone.py"
    stand_in.write_text(STAND_IN)
    env = {k: v for k, v in os.environ.items() if k != "AIRFLOW__API__HOST"}
    proc = subprocess.Popen(
        [sys.executable, str(WRAPPER), *args, "--grace", "3", "--", sys.executable, str(stand_in)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    line = proc.stdout.readline()  # blocks until the stand-in has started its children
    assert line.startswith("pids "), line
    words = line.split()
    return proc, [int(p) for p in words[1:5]], words[6]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_stopping_the_wrapper_stops_every_process_it_started(tmp_path, stop):
    proc, pids, host = _start(tmp_path)
    try:
        assert host == "127.0.0.1"  # bound to this machine unless told otherwise
        session = _session_of(pids[0])
        assert session != os.getsid(0)  # its own session: a terminal's Ctrl-C reaches only us
        assert all(_alive(p) for p in pids)
        proc.send_signal(stop)  # what Ctrl-C (SIGINT) or `kill` (SIGTERM) sends to `make up`
        assert proc.wait(timeout=60) == 0
        assert [p for p in pids if _alive(p)] == []
    finally:
        for pid in pids:  # never leave one behind, whatever failed above
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        proc.kill()
        proc.wait()
        proc.stdout.close()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_the_host_is_passed_on_when_told_and_an_exit_of_the_command_sweeps_the_rest(tmp_path):
    proc, pids, host = _start(tmp_path, "--host", "0.0.0.0")
    try:
        assert host == "0.0.0.0"
        os.kill(pids[0], signal.SIGKILL)  # the command dies on its own: its children go too
        assert proc.wait(timeout=60) != 0
        assert [p for p in pids if _alive(p)] == []
    finally:
        for pid in pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        proc.kill()
        proc.wait()
        proc.stdout.close()


def test_airflow_reads_the_host_the_wrapper_sets(monkeypatch):
    """The api-server's --host defaults to ``[api] host``, which the environment sets."""
    from airflow.configuration import conf

    monkeypatch.setenv("AIRFLOW__API__HOST", "127.0.0.1")
    assert conf.get("api", "host") == "127.0.0.1"


def _make_up(*args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        ["make", "-n", "-C", str(ROOT), "up", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )
    assert done.returncode == 0, done.stderr
    (line,) = [line for line in done.stdout.splitlines() if "standalone" in line]
    return line


def test_make_up_runs_airflow_through_the_wrapper_on_localhost_unless_told():
    line = _make_up()
    assert "scripts/airflow_up.py --host 127.0.0.1 --" in line, line
    assert line.rstrip().endswith("airflow standalone"), line
    assert "scripts/airflow_up.py --host 0.0.0.0 --" in _make_up("HOST=0.0.0.0")
    # a HOST the shell happens to export (a machine's name) is not an instruction to expose it
    assert "--host 127.0.0.1 --" in _make_up(env={"HOST": "0.0.0.0"})
