"""A bounded slice of the overlap and crash campaign (``bench/overlap_campaign.py``): the two
lock-holding DAGs once each, two runs at once or a run SIGKILLed at a random step and run
again, each a real ``dag.test()`` in its own process, then the campaign's invariants over the
ledger and the simulated fleet. The bench runs every DAG x scenario x ledger over many seeds.

Here a case's processes are forked from one warm interpreter per case (``WarmCaseEnv``) instead
of each starting Python afresh: the bench's own steps (``run_case``) and modes (``--run``,
``--reap``, ``--check``) in the case's own environment, each its own process in its own process
group (the kill takes all of it), only without paying Airflow's import and the in-process
execution API's start-up (about half of a run's CPU) once per process."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bench import overlap_campaign as campaign
from tests.support.fleet import short_idle_waits
from tests.support.postgres import require_postgres
from tests.support.procfs import open_files_under

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.slow]

# The two DAGs that hold a ledger lock and that broke before issue 16, one per scenario and
# ledger (the slowest part of make test: two real dag.test() processes a case). The nightly's
# kill and the launch's overlap run in the bench; their promises are proven below the DAG too
# (test_run_faults: a killed run's faults are swept; test_ledger: one launch per run).
# The kill's seed: its delay, 1.5 s after the run exists (of the bench's 0.5-25 s window), lands
# inside the run, about where the cluster is being created (a whole run takes 4-10 s here, by
# load), and the test checks that it did. Seed 1's 22 s outlasted the whole run: it killed
# nothing.
SLICE = [
    ("reservation_transition", "overlap", "postgresql", 0),
    ("region_onboarding", "kill", "sqlite", 132),
]
ENDED = "nothing: the run had ended"  # the bench's killed_in when the delay outlasted the run


@pytest.mark.parametrize(("dag", "scenario", "ledger", "seed"), SLICE, ids=lambda v: str(v))
def test_overlapping_and_killed_runs_keep_every_invariant(
    tmp_path, monkeypatch, dag, scenario, ledger, seed
):
    if ledger == "postgresql":
        require_postgres()
    monkeypatch.setattr(campaign, "CaseEnv", WarmCaseEnv)
    case = campaign.run_case(campaign.Case(dag, scenario, ledger, seed), tmp_path)
    assert not case.violations, (case.outcomes, case.killed_in, case.violations)
    runs = [o.split(": ")[1] for o in case.outcomes]
    if scenario == "kill":  # a run was killed in flight, and the run after it finishes the work
        assert runs[0] == "killed" and case.killed_in != [ENDED], (case.outcomes, case.killed_in)
        assert runs[-1] == "success", case.outcomes
    else:  # of two runs at once, one does the work
        assert "success" in runs, case.outcomes


def test_the_invariants_see_a_broken_promise(fleet_state):
    """The checker is not blind: a run-scoped fault left behind and a second transition opened
    onto a pool already in service are both reported."""
    from bench.overlap_invariants import violations
    from gpufleet.backends.sim.state import SimState
    from gpufleet.domain.faults import RunLease
    from gpufleet.store import Ledger
    from tests.support.ledger_helpers import start_transition

    SimState().inject("a3u-sim", "h200-a", "fabric-down", lease=RunLease("nightly", "killed"))
    ledger = Ledger()
    conf = campaign.CONF["reservation_transition"]
    for run in ("run-1", "run-2"):
        tid = start_transition(ledger, conf["cluster"], conf["old_pool"], conf["new_pool"], run)
        ledger.finish_transition(tid, "done")
    found = violations("reservation_transition", conf)
    assert any("run-scoped faults outlived their runs" in v for v in found), found
    assert any("2 transitions h200-b -> h200-c" in v for v in found), found


# --- a case's processes, forked from a warm interpreter ----------------------------------------


class WarmCaseEnv(campaign.CaseEnv):
    """The bench's ``CaseEnv`` whose ``start`` and ``call`` fork the mode's process from a
    zygote: a Python started once per case in the case's environment (Airflow reads its
    configuration at import, so one per case), which has imported Airflow, the DAGs' modules
    and the invariants, and built the in-process execution API, and holds nothing open on the
    case's databases. Each fork is a process of its own in a session of its own."""

    def __init__(self, case: campaign.Case, workdir: Path):
        super().__init__(case, workdir)
        self.zygote = Zygote(self.env, self.logs)

    def start(self, mode: str, *args: str, log: str) -> Forked:
        (self.logs / log).write_text("")  # there before it runs, as the bench's Popen has it
        return self.zygote.fork(mode, *args, out=self.logs / log)

    def call(self, mode: str, *args: str, timeout: float = 300) -> dict:
        out = self.logs.parent / f"call{mode}.out"
        proc = self.zygote.fork(mode, *args, out=out)
        proc.wait(timeout=timeout)
        text = out.read_text(errors="replace")
        lines = [ln for ln in text.splitlines() if ln.startswith("{")]
        if proc.returncode != 0 or not lines:
            raise RuntimeError(f"{mode} failed ({proc.returncode}): {text[-3000:]}")
        return json.loads(lines[-1])

    def close(self, keep: bool) -> None:
        self.zygote.stop()
        super().close(keep)


class Forked:
    """What ``run_case`` needs of a ``subprocess.Popen``: ``pid`` (its process group's id too),
    ``poll``, ``wait`` and ``returncode`` (negative: the signal that ended it), reported by the
    zygote that reaps it."""

    def __init__(self, zygote: Zygote, pid: int):
        self.zygote, self.pid = zygote, pid

    @property
    def returncode(self) -> int | None:
        return self.zygote.exits.get(self.pid)

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.zygote.changed:
            while self.pid not in self.zygote.exits:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise subprocess.TimeoutExpired(f"forked {self.pid}", timeout)
                if self.zygote.gone:
                    raise RuntimeError(f"the zygote died before {self.pid} ended")
                self.zygote.changed.wait(left)
        return self.zygote.exits[self.pid]


class Zygote:
    """The warm interpreter (``zygote_main`` in a process of its own), spoken to over a pipe:
    a line ``MODE ARG OUT`` forks that mode's process (output to the file OUT) and is answered
    ``pid PID``; ``exit PID CODE`` follows when that process ends. Its own output: zygote.log."""

    def __init__(self, env: dict[str, str], logs: Path):
        self.log = open(logs.parent / "zygote.log", "w")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(
            [campaign.PY, "-c", "from tests.test_overlap_campaign import zygote_main as z; z()"],
            env=env,
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            bufsize=1,
        )
        self.changed = threading.Condition()
        self.exits: dict[int, int] = {}
        self.pids: list[int] = []
        self.started: list[int] = []
        self.gone = False
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            word, *numbers = line.split()
            with self.changed:
                if word == "pid":
                    self.started.append(int(numbers[0]))
                elif word == "exit":
                    self.exits[int(numbers[0])] = int(numbers[1])
                self.changed.notify_all()
        with self.changed:
            self.gone = True
            self.changed.notify_all()

    def fork(self, mode: str, *args: str, out: Path, timeout: float = 180) -> Forked:
        """One mode's process; returns once it runs (the zygote warms up first, once)."""
        with self.changed:
            seen = len(self.started)
            self.proc.stdin.write(" ".join([mode, *args, str(out)]) + "\n")
            self.proc.stdin.flush()
            deadline = time.monotonic() + timeout
            while len(self.started) == seen:
                left = deadline - time.monotonic()
                if self.gone or left <= 0:
                    self.log.flush()
                    raise RuntimeError(
                        "the zygote did not fork: "
                        + Path(self.log.name).read_text(errors="replace")[-3000:]
                    )
                self.changed.wait(left)
            pid = self.started[seen]
        self.pids.append(pid)
        return Forked(self, pid)

    def stop(self) -> None:
        for pid in self.pids:  # a process still running when its case ends: its whole group
            if pid not in self.exits:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.reader.join(timeout=5)
        self.proc.stdout.close()
        self.log.close()


def _warm_up() -> None:
    """What every mode's process would import and build first, done once before any fork: no
    thread is started and no database opened (checked by ``zygote_main``)."""
    import airflow  # noqa: F401  (configuration, settings, the ORM engine: no connection yet)
    from airflow.dag_processing.dagbag import DagBag
    from airflow.models import DagRun, TaskInstance  # noqa: F401  (--reap)
    from airflow.sdk.execution_time import supervisor, task_runner  # noqa: F401
    from airflow.utils.session import create_session  # noqa: F401

    # the in-process execution API dag.test() serves its tasks from, with Cadwyn's versioned
    # routers built (done otherwise on the first request of every run)
    supervisor.in_process_api_server().app._cadwyn_initialize()
    # every DAG's modules (dag.test() parses the whole folder) and the invariants (--check)
    DagBag(dag_folder=str(ROOT / "dags"))
    import bench.overlap_invariants  # noqa: F401
    from gpufleet.store import Ledger  # noqa: F401


def zygote_main() -> None:
    """The zygote's loop: warm up, then fork one process per ``MODE ARG OUT`` line read."""
    import selectors

    reply = os.fdopen(os.dup(1), "w", buffering=1)  # the protocol's own copy of stdout
    os.dup2(2, 1)  # what anything prints from here (the warm-up's logs): the zygote's log
    _warm_up()
    # a fork shares what is open: nothing may be open on the case's databases, and no thread
    # may run (a fork copies only the calling thread, and any lock another one held)
    held = open_files_under(os.environ["AIRFLOW_HOME"], os.environ["GPUFLEET_STATE_DIR"])
    assert not held, f"open before fork: {held}"
    assert threading.active_count() == 1, threading.enumerate()
    modes = {
        "--run": campaign._run_mode,
        "--prep": campaign._prep_mode,
        "--reap": campaign._reap_mode,
        "--check": campaign._check_mode,
    }
    sel = selectors.DefaultSelector()
    sel.register(0, selectors.EVENT_READ, None)
    buffered = b""
    while True:
        for key, _ in sel.select():
            if key.data is None:  # a command, or the end of the case
                chunk = os.read(0, 65536)
                if not chunk:
                    return
                buffered += chunk
                while b"\n" in buffered:
                    line, buffered = buffered.split(b"\n", 1)
                    mode, arg, out = line.decode().split(" ", 2)
                    pid = _fork(modes[mode], mode, arg, out, [reply.fileno()])
                    sel.register(os.pidfd_open(pid), selectors.EVENT_READ, pid)
                    print("pid", pid, file=reply)
            else:  # a child ended
                sel.unregister(key.fd)
                os.close(key.fd)
                _, status = os.waitpid(key.data, 0)
                print("exit", key.data, os.waitstatus_to_exitcode(status), file=reply)


def _fork(run, mode: str, arg: str, out: str, close: list[int]) -> int:
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:  # the child: its own session and process group, stdout and stderr to its log
        os.setsid()
        for fd in close:
            os.close(fd)
        log = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        stdin = os.open(os.devnull, os.O_RDONLY)
        os.dup2(stdin, 0)
        os.close(stdin)
        sys.argv = [campaign.__file__, mode, arg]
        with short_idle_waits(0.1) if mode == "--run" else contextlib.nullcontext():
            # dag.test()'s idle second, 0.1 s here: a retry is still due only after its delay
            run(arg)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return 0
