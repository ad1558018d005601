"""gpufleet gate and gpufleet status against the simulated fleet and a real ledger."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.store import Ledger
from tests.support.fleet import named_ledger_env, validate
from tests.support.ledger_helpers import start_transition

CLI = [sys.executable, "-c", "import sys; from gpufleet.cli import main; sys.exit(main())"]


def gpufleet(*args, **env):
    """The CLI in a subprocess, on this test's ledger named directly (``named_ledger_env``)."""
    full = {**os.environ, **named_ledger_env(), **env}
    return subprocess.run([*CLI, *args], capture_output=True, text=True, env=full)


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
    assert "the job needs 7 nodes; the pool has 6 schedulable" in too_many.stdout
    both = gpufleet(  # pools are alternatives: h200-b is skipped, with its reason
        "gate", "--cluster", "a3u-sim", "--pool", "h200-b", "--pool", "h200-a", "--nodes", "2"
    )
    assert both.returncode == 0 and "a3u-sim/h200-b: no fabric validation" in both.stdout


def test_gate_unknown_names_and_unreadable_ledger_are_errors_recording_nothing(fleet_state):
    out = gpufleet("gate", "--cluster", "nope", "--pool", "x", "--nodes", "1")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.splitlines() == [out.stderr.strip()]
    assert "unknown cluster 'nope'" in out.stderr
    pool = gpufleet("gate", "--cluster", "a3u-sim", "--pool", "no-such", "--nodes", "1")
    assert pool.returncode == 2 and "no node pool 'no-such'" in pool.stderr
    assert Ledger().gate_decisions() == []  # a refused argument leaves no ledger row
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
    assert down.returncode == 2 and down.stdout == ""
    assert len(down.stderr.splitlines()) == 1 and "127.0.0.1:1" in down.stderr


def test_gate_and_status_name_the_fleet_state_they_read(fleet_state):
    found = {"GPUFLEET_LEDGER_URL": ""}  # the ledger as a user's command finds it
    gate = gpufleet("gate", "--cluster", "a3u-sim", "--pool", "h200-a", "--nodes", "1", **found)
    assert gate.returncode == 1
    ledger = Ledger().safe_url
    line = f"fleet state: {fleet_state} (ledger {ledger}; from GPUFLEET_STATE_DIR)"
    assert gate.stderr.splitlines() == [line]
    assert gate.stdout.startswith("REFUSE\n")  # stdout stays the decision alone
    assert gpufleet("status", **found).stdout.splitlines()[0] == line
    assert gpufleet("sim", "show", **found).stdout.splitlines()[0] == (
        f"fleet state: {fleet_state} (from GPUFLEET_STATE_DIR)"
    )


def test_outside_the_checkout_without_airflow_home_status_says_it_read_the_default(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("AIRFLOW_HOME", "GPUFLEET_STATE_DIR")}
    out = subprocess.run(
        [*CLI, "status"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**env, "HOME": str(tmp_path)},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0].startswith(
        f"fleet state: {tmp_path / 'airflow' / 'gpufleet'} (ledger sqlite:///"
    )
    assert out.stdout.splitlines()[0].endswith("AIRFLOW_HOME unset: Airflow's default ~/airflow)")


def test_inside_the_checkout_without_airflow_home_the_checkout_state_is_named(monkeypatch):
    from gpufleet.cli.fleet_state import describe

    root = Path(__file__).resolve().parents[2]
    if not (root / ".airflow").is_dir():
        pytest.skip("the checkout has no .airflow/ (make has not set it up)")
    monkeypatch.delenv("AIRFLOW_HOME")
    monkeypatch.delenv("GPUFLEET_STATE_DIR", raising=False)
    monkeypatch.chdir(root / "dags")
    state = root / ".airflow" / "gpufleet"
    assert describe() == f"fleet state: {state} (this checkout's .airflow/)"


def test_status_prints_the_readiness_table(fleet_state):
    validate("a3u-sim", "h200-a")
    out = gpufleet("status")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("fleet state: ") and lines[1].startswith("gpufleet readiness, ")
    assert lines[2].split()[:4] == ["REGION", "POOL", "GPU", "EXPECT"]
    row = next(ln for ln in lines if "a3u-sim/h200-a" in ln).split()
    assert row[-1] == "yes" and "validated" in row
    other = next(ln for ln in lines if "p5-sim/h100-a" in ln)
    assert other.rstrip().endswith("no lifecycle state recorded")
    new = next(ln for ln in lines if "a3u-euw4-sim/h200-eu" in ln)  # preexisting: false
    assert new.rstrip().endswith("not onboarded (run region_onboarding)")
    planned = next(ln for ln in lines if "a3u-sim/h200-c" in ln)  # state: planned
    assert planned.rstrip().endswith("a reservation transition creates it")
    assert lines[-1] == "1 of 5 pools ready for training"


def test_gate_refuses_while_a_transition_is_in_flight(fleet_state):
    validate("a3u-sim", "h200-a")
    tid = start_transition(Ledger(), "a3u-sim", "h200-b", "h200-a")
    out = gpufleet("gate", "--cluster", "a3u-sim", "--pool", "h200-a", "--nodes", "2")
    assert out.returncode == 1
    assert "a3u-sim/h200-a: a reservation transition is in flight" in out.stdout
    Ledger().finish_transition(tid, "done")
    assert (
        gpufleet("gate", "--cluster", "a3u-sim", "--pool", "h200-a", "--nodes", "2").returncode == 0
    )
