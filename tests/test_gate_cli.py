"""gpufleet gate and gpufleet status against the simulated fleet and a real ledger."""

from __future__ import annotations

import os
import subprocess
import sys

from gpufleet.store import Ledger
from tests.support.fleet import validate

CLI = [sys.executable, "-c", "import sys; from gpufleet.cli import main; sys.exit(main())"]


def gpufleet(*args, **env):
    return subprocess.run([*CLI, *args], capture_output=True, text=True, env={**os.environ, **env})


def test_gate_refuses_without_validation_and_records_it(fleet_state):
    out = gpufleet(
        "gate", "--cluster", "a3u-sim", "--pool", "h200-a", "--nodes", "2", "--job", "j1"
    )
    assert out.returncode == 1
    assert out.stdout.splitlines()[0] == "REFUSE"
    assert "- a3u-sim/h200-a: no fabric validation on record" in out.stdout
    (decision,) = Ledger().gate_decisions()
    assert decision["launch"] is False and decision["job"] == "j1"


def test_gate_launches_after_a_validation(fleet_state):
    assert validate("a3u-sim", "h200-a")["passed"]
    out = gpufleet("gate", "--cluster", "a3u-sim", "--pool", "h200-a", "--nodes", "6")
    assert out.returncode == 0, out.stdout
    assert out.stdout.startswith("LAUNCH\n- a3u-sim/h200-a: validated gib")
    too_many = gpufleet("gate", "--cluster", "a3u-sim", "--pool", "h200-a", "--nodes", "7")
    assert too_many.returncode == 1
    assert "the job needs 7 nodes; the target pools have 6 schedulable" in too_many.stdout
    both = gpufleet(
        "gate", "--cluster", "a3u-sim", "--pool", "h200-a", "--pool", "h200-b", "--nodes", "2"
    )
    assert both.returncode == 1 and "a3u-sim/h200-b: no fabric validation" in both.stdout


def test_gate_unknown_names_and_unreadable_ledger_refuse(fleet_state):
    out = gpufleet("gate", "--cluster", "nope", "--pool", "x", "--nodes", "1")
    assert out.returncode == 1 and "nope/x: unknown pool" in out.stdout
    validate("a3u-sim", "h200-a")
    down = gpufleet(
        "gate",
        "--cluster",
        "a3u-sim",
        "--pool",
        "h200-a",
        "--nodes",
        "1",
        GPUFLEET_LEDGER_URL="postgresql+psycopg2://nobody@127.0.0.1:1/none",
    )
    assert down.returncode == 1
    assert "facts unreadable: the ledger could not be read" in down.stdout


def test_status_prints_the_readiness_table(fleet_state):
    validate("a3u-sim", "h200-a")
    out = gpufleet("status")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[1].split()[:4] == ["REGION", "POOL", "GPU", "EXPECT"]
    row = next(ln for ln in lines if "a3u-sim/h200-a" in ln).split()
    assert row[-1] == "yes" and "validated" in row
    other = next(ln for ln in lines if "p5-sim/h100-a" in ln)
    assert other.rstrip().endswith("no lifecycle state recorded")
    assert lines[-1] == "1 of 3 pools ready for training"


def test_gate_refuses_while_a_transition_is_in_flight(fleet_state):
    validate("a3u-sim", "h200-a")
    tid = Ledger().start_transition("a3u-sim", "h200-b", "h200-a")
    out = gpufleet("gate", "--cluster", "a3u-sim", "--pool", "h200-a", "--nodes", "2")
    assert out.returncode == 1
    assert "a3u-sim/h200-a: a reservation transition is in flight" in out.stdout
    Ledger().finish_transition(tid, "done")
    assert (
        gpufleet("gate", "--cluster", "a3u-sim", "--pool", "h200-a", "--nodes", "2").returncode == 0
    )
