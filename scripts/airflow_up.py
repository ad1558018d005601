"""Run a command (``airflow standalone`` for ``make up``) so that stopping it stops everything
it started, and so that the Airflow UI binds 127.0.0.1 unless told otherwise.

    python scripts/airflow_up.py [--host 127.0.0.1] [--grace 20] -- airflow standalone

- ``--host`` is exported as ``AIRFLOW__API__HOST``: the api-server (UI, REST API and the
  plugin's pages and ``/metrics``) listens there. ``make up HOST=0.0.0.0`` serves every
  interface, on purpose.
- The command runs in a session of its own. ``airflow standalone`` stopped by a signal left its
  scheduler, api-server, triggerer and LocalExecutor workers running, and the Task SDK puts each
  task process in a process group of its own: so on Ctrl-C (SIGINT), SIGTERM or SIGHUP, or
  when the command exits, every process still in that session gets SIGTERM, then SIGKILL after
  ``--grace`` seconds, and this script returns only once none is left (Linux: it reads
  ``/proc``; elsewhere it signals the command's process group).

Exit status: the command's own when it exited by itself, 0 when stopped by a signal.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

PROC = Path("/proc")


def session_members(sid: int) -> list[int]:
    """The live processes of session ``sid`` (zombies left to an init that does not reap them
    run nothing: they are not counted)."""
    if not PROC.is_dir():  # not Linux: the command's process group stands for its session
        try:
            os.killpg(sid, 0)
        except (ProcessLookupError, PermissionError):
            return []
        return [sid]
    members = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # it ended while we looked
            continue
        fields = stat.rsplit(")", 1)[1].split()  # after "pid (comm)": state ppid pgrp session
        if fields[0] != "Z" and int(fields[3]) == sid:
            members.append(int(entry.name))
    return members


def signal_session(sid: int, sig: int) -> None:
    if not PROC.is_dir():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(sid, sig)
        return
    for pid in session_members(sid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def stop_session(sid: int, grace: float, child: subprocess.Popen | None = None) -> None:
    """SIGTERM every process of the session; SIGKILL what is left after ``grace`` seconds;
    return when none is left."""
    signal_session(sid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while session_members(sid) and time.monotonic() < deadline:
        if child is not None:
            child.poll()  # reap our own child, or it would count as alive
        time.sleep(0.1)
    while session_members(sid):
        signal_session(sid, signal.SIGKILL)
        if child is not None:
            child.poll()
        time.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1", help="the api-server's address")
    parser.add_argument(
        "--grace", type=float, default=20.0, help="seconds between SIGTERM and SIGKILL"
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- the command to run")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("name the command to run after --, e.g. -- airflow standalone")
    if args.grace < 0 or args.grace != args.grace:
        parser.error(f"--grace must be a number of seconds >= 0, not {args.grace}")
    env = {**os.environ, "AIRFLOW__API__HOST": args.host}
    stopped: list[int] = []

    def stop(signum, _frame):
        stopped.append(signum)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop)
    try:
        child = subprocess.Popen(command, env=env, start_new_session=True)
    except OSError as exc:
        print(f"airflow_up: cannot run {command[0]!r}: {exc}", file=sys.stderr)
        return 127
    sid = child.pid  # the session leader: its id is the session's
    while not stopped and child.poll() is None:
        time.sleep(0.2)
    how = f"signal {signal.Signals(stopped[0]).name}" if stopped else "the command exited"
    print(f"airflow_up: {how}; stopping every process it started", file=sys.stderr, flush=True)
    stop_session(sid, args.grace, child)
    code = child.wait()
    return 0 if stopped else (code if code >= 0 else 128 - code)  # killed by a signal: 128+N


if __name__ == "__main__":
    sys.exit(main())
