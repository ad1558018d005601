"""The gate under hostile conditions (issue 8): repeated and alternative pools, facts dated in
the future, states and flags nobody planned, crashes outside gpufleet's own errors, and a
validation that could not finish. Real catalog, simulated fleet, real ledger."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text

from gpufleet.config.catalog import load_catalog
from gpufleet.services.launch.gate import check_gate
from gpufleet.store import Ledger
from tests.support.ledger_helpers import start_transition

CLUSTER = "a3u-sim"


def sound(ledger: Ledger, pool: str, at: datetime | None = None) -> None:
    """Record what makes ``pool`` launchable: fresh passing fabric and storage validations."""
    ref = load_catalog().pool(CLUSTER, pool)
    at = at or datetime.now(UTC) - timedelta(hours=1)
    for kind in ("fabric", "storage"):
        ledger.record_validation(
            run_id="seed",
            cluster=CLUSTER,
            pool=pool,
            kind=kind,
            passed=True,
            started_at=at,
            finished_at=at,
            transport=ref.pool.transport if kind == "fabric" else None,
        )
    ledger.set_pool_state(CLUSTER, pool, "validated")


def gate(pools, nodes):
    return check_gate(load_catalog(), Ledger, CLUSTER, pools, nodes, job="j", run_id="r")


def test_a_repeated_pool_counts_once(fleet_state):
    sound(Ledger(), "h200-a")
    decision = gate(["h200-a", "h200-a"], 12)
    assert not decision.launch and decision.decision_id is not None
    assert "the job needs 12 nodes; the pool has 6 schedulable" in decision.reasons[0]
    assert gate(["h200-a", "h200-a"], 6).launch


def test_alternative_pools_are_not_added_up_and_the_choice_is_recorded(fleet_state):
    ledger = Ledger()
    sound(ledger, "h200-a")
    sound(ledger, "h200-b")
    assert not gate(["h200-a", "h200-b"], 10).launch  # 6 + 4: neither holds 10
    decision = gate(["h200-b", "h200-a"], 5)  # h200-b (4) is too small: h200-a is chosen
    assert decision.launch and decision.pool == "h200-a"
    row = ledger.gate_decision(decision.decision_id)
    assert row["pool"] == "h200-a" and row["launch"] is True
    assert any(r.startswith("a3u-sim/h200-b: the job needs 5 nodes") for r in row["reasons"])


def test_a_fact_dated_in_the_future_refuses_and_hides_nothing(fleet_state):
    ledger = Ledger()
    sound(ledger, "h200-a", at=datetime.now(UTC) + timedelta(days=365))
    decision = gate(["h200-a"], 1)
    assert not decision.launch
    assert any("dated in the future" in r for r in decision.reasons)
    # a pass a few minutes ahead, then a genuine failure: the failure is the latest
    ledger = Ledger()
    sound(ledger, "h200-b", at=datetime.now(UTC) + timedelta(minutes=4))
    ledger.record_validation(
        run_id="later",
        cluster=CLUSTER,
        pool="h200-b",
        kind="fabric",
        passed=False,
        started_at=datetime.now(UTC) - timedelta(minutes=1),
        transport="socket",
    )
    assert ledger.latest_validation(CLUSTER, "h200-b", "fabric")["run_id"] == "later"
    decision = gate(["h200-b"], 1)
    assert not decision.launch
    assert "a3u-sim/h200-b: the latest fabric validation failed" in decision.reasons


@pytest.mark.parametrize("state", ["Validated", "validated ", "green", ""])
def test_an_unknown_pool_state_refuses_naming_it(fleet_state, state):
    ledger = Ledger()
    sound(ledger, "h200-a")
    with ledger.engine.begin() as conn:  # a hand edit (the CHECK would refuse it)
        conn.exec_driver_sql("PRAGMA ignore_check_constraints=ON")
        conn.execute(text("UPDATE gf_pool_state SET state = :s"), {"s": state})
    decision = gate(["h200-a"], 1)
    assert not decision.launch
    assert f"pool state {state!r} is not one this gpufleet knows" in decision.reasons[0]


@pytest.mark.parametrize("state", ["Running", "running ", "paused"])
def test_an_unknown_transition_state_refuses_naming_it(fleet_state, state):
    ledger = Ledger()
    sound(ledger, "h200-a")
    tid = start_transition(ledger, CLUSTER, "h200-a", "h200-b")
    with ledger.engine.begin() as conn:
        conn.exec_driver_sql("PRAGMA ignore_check_constraints=ON")
        conn.execute(
            text("UPDATE gf_transitions SET state = :s WHERE id = :i"), {"s": state, "i": tid}
        )
    decision = gate(["h200-a"], 1)
    assert not decision.launch
    assert f"transition state {state!r} is not one" in decision.reasons[0]


@pytest.mark.parametrize("value", [2, -1, "yes", "true", 0.5])
def test_a_boolean_that_is_neither_true_nor_false_refuses(fleet_state, value):
    ledger = Ledger()
    sound(ledger, "h200-a")
    with ledger.engine.begin() as conn:
        conn.exec_driver_sql("PRAGMA ignore_check_constraints=ON")
        conn.execute(text("UPDATE gf_validations SET passed = :v"), {"v": value})
    decision = gate(["h200-a"], 1)
    assert not decision.launch
    assert "is neither true nor false" in decision.reasons[0]


def test_a_corrupt_simulator_database_is_a_recorded_refusal(fleet_state):
    ledger = Ledger()
    sound(ledger, "h200-a")
    assert gate(["h200-a"], 1).launch  # the sim database exists now
    (fleet_state / "sim.db").write_bytes(b"this is not a database" * 100)
    for suffix in ("-wal", "-shm"):
        (fleet_state / f"sim.db{suffix}").unlink(missing_ok=True)
    decision = gate(["h200-a"], 1)
    assert not decision.launch and decision.decision_id is not None
    assert "file is not a database" in " ".join(decision.reasons)
    assert Ledger().gate_decision(decision.decision_id)["launch"] is False


def test_a_validation_that_could_not_finish_stops_the_pool_at_once(fleet_state):
    ledger = Ledger()
    sound(ledger, "h200-a")
    assert gate(["h200-a"], 1).launch
    ledger.record_validation_error("r2", CLUSTER, "h200-a", "fabric", "busbw=abc is no number")
    row = ledger.latest_validation(CLUSTER, "h200-a", "fabric")
    assert (row["verdict"], row["passed"], row["reasons"]) == (
        "error",
        False,
        ["busbw=abc is no number"],
    )
    decision = gate(["h200-a"], 1)
    assert not decision.launch
    assert (
        "a3u-sim/h200-a: the latest fabric validation could not finish: busbw=abc is no number"
        in decision.reasons
    )


def test_submit_uses_the_pool_the_gate_chose_never_one_chosen_again(fleet_state):
    from gpufleet.services.launch.request import LaunchRequest
    from gpufleet.services.launch.submit import LaunchRefused, TrainingLaunch

    catalog = load_catalog()
    params = {
        "cluster": CLUSTER,
        "pools": ["h200-a", "h200-b"],
        "nodes": 2,
        "gpus_per_node": 8,
        "job_name": "train-a",
        "namespace": "ml-team",
        "image": "example/train:1",
        "command": ["torchrun", "train.py"],
    }
    req = LaunchRequest.from_params(params, catalog)
    launch = TrainingLaunch(catalog, Ledger)
    assert launch.choose_pool(req, {"id": 1, "pool": "h200-b"}).pool.name == "h200-b"
    for pool in (None, "h200-c"):
        with pytest.raises(LaunchRefused, match="chose no target pool"):
            launch.choose_pool(req, {"id": 1, "pool": pool})


def test_a_drifting_pool_launches_with_its_figures_unless_the_catalog_blocks_it(
    fleet_state, tmp_path
):
    """The drift's figures travel from the pool state's reason into the decision; a catalog
    pool with ``block_on_drift: true`` is refused while it drifts."""
    import yaml

    from gpufleet.config.catalog import load_catalog as load

    ledger = Ledger()
    sound(ledger, "h200-a")
    drift = "busbw 331.2 GB/s is 6.7% below its 14-night median 355.0 GB/s (noise ±0.8%)"
    ledger.set_pool_state(CLUSTER, "h200-a", "drifting", drift, "nightly-1")
    decision = gate(["h200-a"], 2)
    assert decision.launch and decision.pool == "h200-a"
    assert (
        f"a3u-sim/h200-a: warning: launching on a drifting pool: {drift}"
        in (ledger.gate_decision(decision.decision_id)["reasons"])
    )

    root = Path(__file__).resolve().parents[3] / "include" / "fleet"
    for path in root.glob("*.yaml"):
        data = yaml.safe_load(path.read_text())
        for region in data.get("regions", []):
            for cluster in region.get("clusters", []):
                for pool in cluster.get("node_pools", []):
                    if cluster["name"] == CLUSTER and pool["name"] == "h200-a":
                        pool["block_on_drift"] = True
        (tmp_path / path.name).write_text(yaml.safe_dump(data))
    blocked = check_gate(load(tmp_path), Ledger, CLUSTER, ["h200-a"], 2, job="j", run_id="r")
    assert not blocked.launch
    assert blocked.reasons == [
        f"a3u-sim/h200-a: pool is drifting (the catalog sets block_on_drift): {drift}"
    ]
