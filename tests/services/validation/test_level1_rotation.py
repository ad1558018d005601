"""The level-1 rotation (issue 35; ``level1_every_nights`` in the catalog): an idle node runs
``dcgmi diag -r 1`` once in that many nights; on its other nights its dcgm-exporter is read
instead, and a node whose reading is not healthy (a finding, or nothing to read) is checked at
level 1 anyway. On the simulated fleet through the real services.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpufleet.backends import cluster_backend
from gpufleet.backends.base import Taint
from gpufleet.backends.sim.state import SimState
from gpufleet.config.catalog import load_catalog
from gpufleet.domain.health.tiers import level1_tonight, next_level1, weekly_day
from gpufleet.domain.workloads import UNVALIDATED_KEY
from gpufleet.store import Ledger
from tests.support.fleet import frozen_sim_clock, validate

CLUSTER, POOL = "a3u-sim", "h200-a"
NODES = [f"{CLUSTER}-{POOL}-{i}" for i in range(6)]
EVERY = 4
KEY = f"{CLUSTER}/{POOL}"


def rotating(every: int = EVERY, ref=None):
    ref = ref or load_catalog().pool(CLUSTER, POOL)
    return ref.model_copy(
        update={"pool": ref.pool.model_copy(update={"level1_every_nights": every})}
    )


def tonight():
    return datetime.fromtimestamp(frozen_sim_clock().time(), UTC).date()


def checks(run_id: str) -> dict[str, dict]:
    row = Ledger().latest_validation(CLUSTER, POOL, "health")
    assert row is not None and row["run_id"] == run_id
    return row["details"]["nodes"]


def resting_tonight() -> list[str]:
    night = tonight()
    weekly = weekly_day(NODES[0], f"{CLUSTER}/{POOL}") == night.weekday()  # the pool's night
    return [] if weekly else [n for n in NODES if not level1_tonight(n, night, EVERY)]


def test_the_catalog_refuses_a_rotation_outside_1_to_7_nights():
    from pydantic import ValidationError

    for bad in (0, 8, True, "4", 2.5):
        with pytest.raises(ValidationError, match="level1_every_nights"):
            rotating(1).pool.model_validate(
                {**rotating(1).pool.model_dump(), "level1_every_nights": bad}
            )


def checked(run_id: str) -> set[str]:
    """The nodes checked at level 1 or above tonight (not rested)."""
    return {n for n, c in checks(run_id).items() if c["level"] >= 1}


def partners(run_id: str) -> dict[str, str]:
    row = Ledger().latest_validation(CLUSTER, POOL, "fabric")
    assert row["run_id"] == run_id
    out = {}
    for p in Ledger().pairs(row["id"]):
        out[p["node_a"]], out[p["node_b"]] = p["node_b"], p["node_a"]
    return out


def test_nodes_not_due_rest_on_a_healthy_reading_and_cost_no_gpu_time(fleet_state):
    """The checks run in the pairs' pods and the due nodes pair together: a node not due rests
    unless its partner is due (then its pod would only wait for the partner's step, so it runs
    the same step at no further cost: it is checked, not rested)."""
    rest = resting_tonight()
    assert rest and len(rest) < len(NODES)  # the frozen night has both kinds
    summary = validate(CLUSTER, POOL, run_id="night-1", storage=False, ref=rotating())
    assert summary["passed"]
    nodes = checks("night-1")
    assert set(nodes) == set(NODES)  # every node has tonight's health, rested or checked
    due = [n for n in NODES if n not in rest]
    partner = partners("night-1")
    beside_due = [n for n in rest if partner[n] in due]
    # the due nodes pair together where the pairing allows: in one sub-block, at most one of
    # them has a partner not due; the ring across sub-blocks (topology.plan_by_scope) pairs
    # each sub-block's first node with the next one's second, so there a due node's partner
    # may be one not due, checked with it. Every node not due checked tonight had a due partner
    assert all(partner[n] in due for n in beside_due)
    assert len(beside_due) <= len(due)
    for node in rest:
        if node in beside_due:
            assert (nodes[node]["level"], nodes[node]["rested"]) == (1, False)
            continue
        assert (nodes[node]["level"], nodes[node]["action"], nodes[node]["rested"]) == (
            0,
            "healthy",
            True,
        )
        assert nodes[node]["stages"] == {}  # no step held it
        nxt = next_level1(node, tonight(), EVERY)
        assert f"level 1 rests tonight (once in 4 nights; next on {nxt:%Y-%m-%d})" in " ".join(
            nodes[node]["notes"]
        )
    checked = due + beside_due
    for node in checked:
        assert nodes[node]["level"] >= 1 and not nodes[node]["rested"]
        assert nodes[node]["stages"]["diag_r" + str(nodes[node]["level"])] > 0
    # the night's tier is counted over every node it covered: the rested ones cost nothing
    details = Ledger().latest_validation(CLUSTER, POOL, "health")["details"]
    assert details["cost_nodes"] == len(NODES)
    assert details["gpu_minutes_per_node"] == pytest.approx(
        details["gpu_minutes"] / len(NODES), abs=0.001
    )


def test_every_night_checks_every_idle_node_as_before(fleet_state):
    validate(CLUSTER, POOL, run_id="night-1", storage=False, ref=rotating(1))
    assert all(c["level"] >= 1 for c in checks("night-1").values())


def test_a_resting_node_with_a_finding_is_checked_tonight_and_quarantined(fleet_state):
    node = resting_tonight()[0]
    SimState().inject(CLUSTER, POOL, f"xid:{node}:79")
    summary = validate(CLUSTER, POOL, run_id="night-1", storage=False, ref=rotating())
    assert summary["quarantined"] == [node]
    check = checks("night-1")[node]
    assert check["level"] == 1 and check["action"] == "reboot"  # dcgmi diag ran on it


def test_a_resting_node_without_an_exporter_is_checked_never_taken_for_healthy(fleet_state):
    ref = load_catalog().pool(CLUSTER, POOL)
    bare = ref.cluster.model_copy(
        update={"sim": ref.cluster.sim.model_copy(update={"dcgm_exporter": False})}
    )
    validate(
        CLUSTER,
        POOL,
        run_id="night-1",
        storage=False,
        ref=rotating(ref=ref.model_copy(update={"cluster": bare})),
    )
    assert all(c["level"] >= 1 and not c["rested"] for c in checks("night-1").values())


def test_a_pending_node_is_checked_whatever_its_rotation(fleet_state):
    node = resting_tonight()[0]
    kube = cluster_backend(load_catalog().pool(CLUSTER, POOL).cluster)
    kube.add_taint(node, Taint(UNVALIDATED_KEY, "true", "NoSchedule"))
    validate(CLUSTER, POOL, run_id="night-1", storage=False, ref=rotating())
    assert checks("night-1")[node]["level"] >= 1


def test_a_fault_only_dcgmi_diag_sees_waits_for_the_nodes_night(fleet_state):
    """The trade-off the rotation makes, pinned: ``dcgmi diag -r 1``'s own findings (here its
    whole run failing) on a node whose exporter reads healthy are found on the node's night of
    the rotation, within ``level1_every_nights`` nights, not the next night."""
    node = resting_tonight()[0]
    SimState().inject(CLUSTER, POOL, f"dcgm-fail-all:{node}")
    clock = frozen_sim_clock()
    for night in range(EVERY):
        run_id = f"night-{night}"
        validate(CLUSTER, POOL, run_id=run_id, storage=False, ref=rotating())
        check = checks(run_id)[node]
        due = level1_tonight(node, tonight(), EVERY)
        due = due or weekly_day(node, KEY) == tonight().weekday()
        # or its pass-1 partner's night: a pair's pods run the same step (test above)
        beside = not due and check["level"] >= 1 and partners(run_id)[node] in checked(run_id)
        assert (check["level"] >= 1) == (due or beside)
        if due or beside:
            assert check["action"] != "healthy"
            break
        assert check["action"] == "healthy" and check["level"] == 0
        clock.advance(86_400)
    else:
        pytest.fail(f"{node} was not checked within {EVERY} nights")
