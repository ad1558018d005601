"""``gpufleet node breaker-reset`` and the tripped breakers in ``gpufleet status``: a person
resets a tripped blast-radius breaker, recorded with who, when and why (docs/remediation.md).
The CLI in a subprocess, on this test's ledger named directly."""

from __future__ import annotations

import os
import subprocess
import sys

from gpufleet.store import Ledger
from tests.support.fleet import named_ledger_env

CLI = [sys.executable, "-c", "import sys; from gpufleet.cli import main; sys.exit(main())"]
KEY = "a3u-sim/h200-a"


def gpufleet(*args):
    env = {**os.environ, **named_ledger_env()}
    return subprocess.run([*CLI, *args], capture_output=True, text=True, env=env)


def test_status_shows_a_tripped_breaker_and_a_person_resets_it(fleet_state):
    ledger = Ledger()
    ledger.trip_breaker("pool", KEY, reason="3 of 10 nodes out of service", affected=3, limit=2)
    shown = gpufleet("status", "--launches", "0")
    assert shown.returncode == 0, shown.stderr
    assert "tripped breakers" in shown.stdout and f"pool {KEY}" in shown.stdout
    assert "3 of 10 nodes out of service" in shown.stdout

    done = gpufleet(
        "node", "breaker-reset", "pool", KEY, "--reason", "driver rolled back", "--by", "alice"
    )
    assert done.returncode == 0, done.stderr
    assert "reset by alice" in done.stdout
    (row,) = ledger.breaker_history("pool", KEY)
    assert (row["reset_by"], row["reset_reason"]) == ("alice", "driver rolled back")
    assert row["reset_at"] >= row["tripped_at"]
    assert ledger.tripped_breakers() == []
    assert "tripped breakers" not in gpufleet("status", "--launches", "0").stdout


def test_resetting_a_breaker_that_is_not_tripped_is_refused(fleet_state):
    Ledger()  # the ledger exists, no breaker tripped
    refused = gpufleet("node", "breaker-reset", "cluster", "a3u-sim", "--reason", "why not")
    assert refused.returncode != 0 and "is not tripped" in refused.stderr
    wrong = gpufleet("node", "breaker-reset", "pool", "a3u-sim", "--reason", "a pool key")
    assert wrong.returncode != 0 and "CLUSTER/POOL" in wrong.stderr
    assert Ledger().breaker_history("cluster", "a3u-sim") == []
