"""gpufleet node show|release|quarantine: a person's moves, recorded with who and why."""

from __future__ import annotations

import os
import subprocess
import sys

from gpufleet.backends import cluster_backend
from gpufleet.config.catalog import load_catalog
from gpufleet.store import Ledger
from tests.support.fleet import named_ledger_env

CLI = [sys.executable, "-c", "import sys; from gpufleet.cli import main; sys.exit(main())"]
NODE = "a3u-sim-h200-a-2"


def gpufleet(*args):
    """The CLI in a subprocess, on this test's ledger named directly (``named_ledger_env``)."""
    env = {**os.environ, **named_ledger_env()}
    return subprocess.run([*CLI, *args], capture_output=True, text=True, env=env)


def node():
    nodes = cluster_backend(load_catalog().cluster("a3u-sim")).list_nodes("h200-a")
    return next(n for n in nodes if n.name == NODE)


def test_quarantine_show_release_by_hand(fleet_state):
    out = gpufleet(
        "node",
        "quarantine",
        NODE,
        "--cluster",
        "a3u-sim",
        "--reason",
        "XID 79 in dmesg",
        "--by",
        "alice",
    )
    assert out.returncode == 0, out.stderr
    assert node().quarantined and not node().free
    row = Ledger().node_state("a3u-sim", NODE)
    assert (row["state"], row["reason"]) == ("quarantined", "XID 79 in dmesg")
    status = gpufleet("status")
    row = next(ln for ln in status.stdout.splitlines() if "a3u-sim/h200-a" in ln)
    assert "1 quarantined" in row  # the readiness table counts nodes per lifecycle state
    show = gpufleet("node", "show", NODE, "--cluster", "a3u-sim")
    assert show.returncode == 0
    assert "quarantined since" in show.stdout and "-> quarantined by alice: XID 79" in show.stdout
    out = gpufleet("node", "release", NODE, "--cluster", "a3u-sim", "--reason", "GPU reseated")
    assert out.returncode == 0, out.stderr
    assert node().free
    history = Ledger().node_history("a3u-sim", NODE)
    assert [e["to_state"] for e in history] == ["quarantined", "released"]
    assert history[1]["by"]  # the OS user when --by is not given


def test_bad_input_changes_nothing(fleet_state):
    for args in (
        ["node", "release", NODE, "--cluster", "a3u-sim"],  # no reason
        ["node", "release", NODE, "--cluster", "a3u-sim", "--reason", "  "],
        ["node", "quarantine", "Bad_Node", "--cluster", "a3u-sim", "--reason", "x"],
        ["node", "quarantine", NODE, "--cluster", "a3u-sim", "--reason", "a\nb"],
        ["node", "quarantine", "no-such-node", "--cluster", "a3u-sim", "--reason", "x"],
        ["node", "show", NODE, "--cluster", "no-such-cluster"],
    ):
        out = gpufleet(*args)
        assert out.returncode in (1, 2), args
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert Ledger().node_states() == []
    assert not node().quarantined
