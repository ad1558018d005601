"""Two nights of `nightly_fabric_validation` for the browser tests, run in their own process.

Run by tests/browser/conftest.py with the throwaway Airflow's environment (its AIRFLOW_HOME,
metadata DB and GPUFLEET_STATE_DIR), so this process's Airflow configuration is that one and
not the pytest session's. Night 1 validates every pool, clean; night 2 validates FLAGGED_POOL
only (half the work: the browser module must stay short on two cores) with ``fabric-down``
injected for that night (as ``gpufleet sim inject`` does, cleared after it). Prints one JSON
line: each night's run id and state, and what the ledger recorded for the flagged pool (its
fabric verdict's reasons and figures, and the pool's state and reason), so the tests assert
on what the nightly wrote.
"""

from __future__ import annotations

import json
import sys

FLAGGED_POOL = "a3u-sim/h200-b"
DAG = "nightly_fabric_validation"


def main() -> int:
    from gpufleet.airflow.triggers import PollingTrigger
    from gpufleet.backends.sim.state import SimState
    from gpufleet.store import Ledger
    from tests.support.fleet import SimTriggerClock, frozen_sim_clock, run_dag, task_states

    frozen_sim_clock()  # the sim's time moves only as the triggers wait: no wall-clock waits
    PollingTrigger.clock = SimTriggerClock()
    nights = []
    cluster, pool = FLAGGED_POOL.split("/")
    for conf, fault in (({}, None), ({"pools": [FLAGGED_POOL]}, "fabric-down")):
        if fault:
            SimState().inject(cluster, pool, fault)
        dr = run_dag(DAG, conf)
        nights.append({"run_id": dr.run_id, "state": str(dr.state), "tasks": task_states(dr)})
    SimState().clear(cluster, pool)
    ledger = Ledger()
    fabric = next(
        r
        for r in ledger.validations_for_run(nights[1]["run_id"])
        if (r["cluster"], r["pool"], r["kind"]) == (cluster, pool, "fabric")
    )
    state = ledger.pool_state(cluster, pool) or {}
    out = {
        "nights": nights,
        "flagged_pool": FLAGGED_POOL,
        "flagged_fabric": {
            "passed": bool(fabric["passed"]),
            "transport": fabric["transport"],
            "busbw_gbps": fabric["busbw_gbps"],
            "reasons": list(fabric["reasons"]),
        },
        "flagged_state": {"state": state.get("state"), "reason": state.get("reason")},
    }
    print("SEED " + json.dumps(out, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
