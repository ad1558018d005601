"""A node whose RDMA NIC is down (``bad-node:<node>:nic``), through the nightly's validation.

NCCL on that node finds no RDMA device and its pairs fall back to TCP sockets; pass 2 pairs it
with known-good nodes, localizes it, and quarantines it alone. The run is a ``sim_fault_drill``
(the nightly's own validation sub-graph) and the fault comes in through its ``sim_faults``
Param, so the Param path, the fault parser and the injector run as well.
"""

from __future__ import annotations

import pytest

from gpufleet.backends import cluster_backend
from gpufleet.backends.sim.state import SimState
from gpufleet.config.catalog import load_catalog
from gpufleet.domain.workloads import QUARANTINE_KEY, QUARANTINE_LABEL
from gpufleet.store import Ledger
from tests.support.fleet import run_dag, task_states

pytestmark = [pytest.mark.slow]

DAG = "sim_fault_drill"
BAD = "a3u-sim-h200-a-2"


def test_a_nic_fault_is_localized_and_only_that_node_is_quarantined(airflow_db, fleet_state):
    dr = run_dag(
        DAG,
        {
            "pools": ["a3u-sim/h200-a"],
            "mode": "fabric",
            "sim_faults": [f"a3u-sim/h200-a=bad-node:{BAD}:nic"],
        },
    )
    assert str(dr.state) == "success", task_states(dr)  # the pool passes without that node
    ledger = Ledger()
    assert [q["node"] for q in ledger.quarantined("a3u-sim")] == [BAD]
    row = next(r for r in ledger.validations_for_run(dr.run_id) if r["kind"] == "fabric")
    assert row["passed"] and row["details"]["quarantined"] == [BAD]
    pairs = ledger.pairs(row["id"])
    with_bad = [p for p in pairs if BAD in (p["node_a"], p["node_b"])]
    without = [p for p in pairs if BAD not in (p["node_a"], p["node_b"])]
    # every pair with the node fell back to sockets; every other pair kept gIB over RDMA
    assert with_bad and all(p["transport"] == "socket" and not p["passed"] for p in with_bad)
    assert without and all(p["transport"] == "gib" and p["passed"] for p in without)
    partners = {p["node_b"] if p["node_a"] == BAD else p["node_a"] for p in with_bad}
    assert len(partners) >= 2  # blamed only after failing with more than one partner
    nodes = {
        n.name: n for n in cluster_backend(load_catalog().cluster("a3u-sim")).list_nodes("h200-a")
    }
    assert nodes[BAD].quarantined and not nodes[BAD].schedulable
    assert nodes[BAD].labels[QUARANTINE_LABEL] == "true"
    assert any(t.key == QUARANTINE_KEY and t.effect == "NoSchedule" for t in nodes[BAD].taints)
    assert all(n.schedulable and not n.quarantined for name, n in nodes.items() if name != BAD)
    assert SimState().faults() == []  # the run's fault is cleared with the run
