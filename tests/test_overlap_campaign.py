"""A bounded slice of the overlap and crash campaign (``bench/overlap_campaign.py``): the two
lock-holding DAGs once each, two runs at once or a run SIGKILLed at a random step and run
again, each a real ``dag.test()`` in its own process, then the campaign's invariants over the
ledger and the simulated fleet. The bench runs every DAG x scenario x ledger over many seeds."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import overlap_campaign as campaign  # noqa: E402

from tests.support.postgres import require_postgres  # noqa: E402

pytestmark = [pytest.mark.slow]

# The two DAGs that hold a ledger lock and that broke before issue 16, one per scenario and
# ledger (the slowest part of make test: two real dag.test() processes a case). The nightly's
# kill and the launch's overlap run in the bench; their promises are proven below the DAG too
# (test_run_faults: a killed run's faults are swept; test_ledger: one launch per run).
SLICE = [
    ("reservation_transition", "overlap", "postgresql", 0),
    ("region_onboarding", "kill", "sqlite", 1),
]


@pytest.mark.parametrize(("dag", "scenario", "ledger", "seed"), SLICE, ids=lambda v: str(v))
def test_overlapping_and_killed_runs_keep_every_invariant(tmp_path, dag, scenario, ledger, seed):
    if ledger == "postgresql":
        require_postgres()
    case = campaign.run_case(campaign.Case(dag, scenario, ledger, seed), tmp_path)
    assert not case.violations, (case.outcomes, case.killed_in, case.violations)
    runs = [o.split(": ")[1] for o in case.outcomes]
    if scenario == "kill":  # the run after the kill finishes the work
        assert runs[-1] == "success", case.outcomes
    else:  # of two runs at once, one does the work
        assert "success" in runs, case.outcomes


def test_the_invariants_see_a_broken_promise(fleet_state):
    """The checker is not blind: a run-scoped fault left behind and a second transition opened
    onto a pool already in service are both reported."""
    from overlap_invariants import violations

    from gpufleet.backends.sim.state import SimState
    from gpufleet.domain.faults import RunLease
    from gpufleet.store import Ledger

    SimState().inject("a3u-sim", "h200-a", "fabric-down", lease=RunLease("nightly", "killed"))
    ledger = Ledger()
    conf = campaign.CONF["reservation_transition"]
    for run in ("run-1", "run-2"):
        tid = ledger.start_transition(conf["cluster"], conf["old_pool"], conf["new_pool"], run)
        ledger.finish_transition(tid, "done")
    found = violations("reservation_transition", conf)
    assert any("run-scoped faults outlived their runs" in v for v in found), found
    assert any("2 transitions h200-b -> h200-c" in v for v in found), found
