"""gated_training_launch end to end with dag.test() on the simulated fleet."""

from __future__ import annotations

import pytest

from gpufleet.backends import cluster_backend
from gpufleet.backends.sim.state import SimState
from gpufleet.config.catalog import load_catalog
from gpufleet.store import Ledger
from tests.support.fleet import asset_events, run_dag, task_states, validate

pytestmark = [pytest.mark.slow]

DAG = "gated_training_launch"


def job(name: str, pool: str = "h200-a", nodes: int = 2, **extra) -> dict:
    return {
        "cluster": "a3u-sim",
        "pools": [pool],
        "nodes": nodes,
        "gpus_per_node": 8,
        "job_name": name,
        "namespace": "ml-team",
        "image": "example/train:1",
        "command": ["torchrun", "train.py"],
        **extra,
    }


@pytest.fixture
def fleet(airflow_db, fleet_state):
    return fleet_state


def jobsets() -> list[str]:
    backend = cluster_backend(load_catalog().cluster("a3u-sim"))
    return sorted(
        {
            p.labels.get("jobset.sigs.k8s.io/jobset-name")
            for p in backend.list_pods("ml-team", "gpufleet.io/workload=training")
        }
    )


def test_launch_onto_a_freshly_validated_pool_confirms_the_transport(fleet):
    assert validate("a3u-sim", "h200-a")["passed"]
    dr = run_dag(DAG, job("finetune-a"))
    assert str(dr.state) == "success", task_states(dr)
    ledger = Ledger()
    launch = ledger.launches()[0]
    assert launch["job"] == "finetune-a" and launch["state"] == "confirmed"
    assert launch["confirmed_transport"] == "gib" and launch["expected_transport"] == "gib"
    assert {r["transport"] for r in launch["ranks"].values()} == {"gib"}
    assert len(launch["ranks"]) == 2 and all(r["gdrdma"] for r in launch["ranks"].values())
    (decision,) = ledger.gate_decisions()
    assert decision["launch"] is True and launch["gate_decision_id"] == decision["id"]
    assert decision["run_id"] == launch["run_id"] == dr.run_id
    assert jobsets() == ["finetune-a"]
    (event,) = asset_events("x-gpufleet://fleet/job-transport-confirmed", dr.run_id)
    assert event == {
        "job": "ml-team/finetune-a",
        "cluster": "a3u-sim",
        "pool": "h200-a",
        "transport": "gib",
    }
    busy = [
        n
        for n in cluster_backend(load_catalog().cluster("a3u-sim")).list_nodes("h200-a")
        if n.workloads
    ]
    assert len(busy) == 2 and all(n.workloads == ("finetune-a",) for n in busy)


def _refused(dr, reason: str, launches_before: int = 0) -> None:
    states = task_states(dr)
    assert str(dr.state) == "failed"
    assert states["gate"] == "failed"
    assert states["submit"] == "upstream_failed" and states["confirm_transport"] == (
        "upstream_failed"
    )
    decision = Ledger().gate_decisions()[0]
    assert decision["launch"] is False
    assert any(reason in r for r in decision["reasons"]), decision["reasons"]
    assert jobsets() == []  # nothing was submitted
    assert len(Ledger().launches()) == launches_before


def test_no_validation_on_record_refuses(fleet):
    _refused(run_dag(DAG, job("never-validated")), "no fabric validation on record")


def _finished_hours_ago(hours: float) -> None:
    """Move every recorded validation's finish ``hours`` back (instead of waiting them out)."""
    from datetime import timedelta

    from sqlalchemy import select, update

    from gpufleet.store.schema import validations as table

    with Ledger().engine.begin() as conn:
        for vid, at in conn.execute(select(table.c.id, table.c.finished_at)).all():
            conn.execute(
                update(table)
                .where(table.c.id == vid)
                .values(finished_at=at - timedelta(hours=hours))
            )


def test_stale_validation_refuses(fleet):
    validate("a3u-sim", "h200-a")
    _finished_hours_ago(2)
    _refused(run_dag(DAG, job("stale", max_validation_age_hours=1)), "fabric validation is stale")


def test_degraded_pool_refuses(fleet):
    SimState().inject("a3u-sim", "h200-b", "fabric-down")
    assert not validate("a3u-sim", "h200-b")["passed"]
    SimState().clear()
    _refused(run_dag(DAG, job("on-degraded", pool="h200-b")), "pool is degraded")


def test_pool_unknown_to_the_cluster_refuses_and_records_nothing(fleet):
    """h100-a passes the form (it is a pool name of the fleet) but is not in cluster a3u-sim:
    a bad request, refused by the gate task before the gate decides (nothing recorded)."""
    from airflow.sdk.exceptions import AirflowFailException

    from gpufleet.airflow.operators.launch import LaunchGateOperator

    request = job("wrong-pool", pool="h100-a")
    states = task_states(run_dag(DAG, request))
    assert states["gate"] == "failed" and states["submit"] == "upstream_failed"
    assert Ledger().gate_decisions() == [] and Ledger().launches() == [] and jobsets() == []
    with pytest.raises(AirflowFailException, match="cluster 'a3u-sim' has no node pool 'h100-a'"):
        LaunchGateOperator(task_id="gate", request=request).execute({"run_id": "manual__x"})


def test_too_few_free_nodes_refuses(fleet):
    validate("a3u-sim", "h200-a")
    assert str(run_dag(DAG, job("first", nodes=4)).state) == "success"
    dr = run_dag(DAG, job("second", nodes=4))
    states = task_states(dr)
    assert states["gate"] == "failed"
    decision = Ledger().gate_decisions()[0]
    assert (
        "a3u-sim/h200-a: the job needs 4 nodes; the pool has 2 schedulable "
        "(a job runs within one pool)" in decision["reasons"]
    )
    assert jobsets() == ["first"]


def test_fabric_breaking_after_validation_stops_the_job_at_confirmation(fleet):
    assert validate("a3u-sim", "h200-b")["passed"]
    SimState().inject("a3u-sim", "h200-b", "fabric-down")  # breaks after the validation
    dr = run_dag(DAG, job("unlucky", pool="h200-b"))
    states = task_states(dr)
    assert states["gate"] == "success" and states["submit"] == "success"
    assert states["confirm_transport"] == "failed" and str(dr.state) == "failed"
    ledger = Ledger()
    launch = ledger.launches()[0]
    assert launch["state"] == "stopped"
    # each rank's reason names what NCCL said about the pinned network (NCCL_NET=gIB)
    assert any("expected gib" in r and "gIB" in r for r in launch["reasons"]), launch["reasons"]
    assert ledger.pool_state("a3u-sim", "h200-b")["state"] == "suspect"
    # the nodes of the ranks on the wrong transport are suspects: retested first next night
    ranks = {r["node"] for r in launch["ranks"].values()}
    suspects = {r["node"] for r in ledger.node_states("a3u-sim", "h200-b", ["suspect"])}
    assert suspects and suspects == ranks
    assert jobsets() == []  # the job was stopped
    # a suspect pool is refused until the next nightly validation clears it
    _refused(run_dag(DAG, job("next-one", pool="h200-b")), "pool is suspect", launches_before=1)


def test_warn_policy_alerts_and_lets_the_job_run(fleet):
    assert validate("a3u-sim", "h200-b")["passed"]
    SimState().inject("a3u-sim", "h200-b", "fabric-down")
    dr = run_dag(DAG, job("tolerated", pool="h200-b", transport_policy="warn"))
    assert task_states(dr)["confirm_transport"] == "success"
    launch = Ledger().launches()[0]
    assert launch["state"] == "running-unconfirmed" and launch["reasons"]


def test_form_refuses_bad_input_before_a_run_as_the_gate_would(fleet):
    from airflow.sdk.exceptions import ParamValidationError

    from gpufleet.services.launch.request import request_problems

    catalog = load_catalog()
    assert request_problems(job("ok"), catalog) == []
    for bad in (
        job("Bad_Name"),
        job("x" * 41),
        job("ok", nodes=0),
        job("ok", nodes=99),
        {**job("ok"), "cluster": "nope"},
        job("ok", transport_policy="maybe"),
        job("ok", namespace="Team"),
        job("ok", image="two words"),
        job("ok", image="example/tra\u200bin:1"),  # a zero-width space
        job("ok", command=[]),
        job("ok", command=["x" * 5000]),
        job("ok", env={"NCCL_NET\n": "Socket"}),
        job("ok", env={"A": "x" * 40_000}),
        job("ok", priority_class="system-node-critical"),
    ):
        with pytest.raises(ParamValidationError):
            run_dag(DAG, bad)
        assert request_problems(bad, catalog), bad  # one definition: the gate refuses it too


def test_the_form_is_the_request_schema(fleet):
    """Each launch Param's JSON schema is the request's own (plus the fleet's names)."""
    from gpufleet.airflow.dagkit import index
    from gpufleet.services.launch.request import REQUEST_FIELDS, field_schema
    from tests.support.fleet import get_dag

    params = get_dag(DAG).params
    assert set(params) == set(REQUEST_FIELDS)
    for name in REQUEST_FIELDS:
        expected = field_schema(name, index())
        schema = params.get_param(name).schema
        assert {k: v for k, v in schema.items() if k in expected} == expected, name


def test_a_job_the_renderer_refuses_fails_submit_for_good(fleet):
    """The renderer keeps its own check: a request that reached submit without the gate's
    (a hand-built operator) is still refused for good, nothing applied."""
    from airflow.sdk.exceptions import AirflowFailException

    from gpufleet.airflow.operators.launch import SubmitTrainingJobOperator

    validate("a3u-sim", "h200-a")
    decision, _, context = _gate_and_submit(job("sneaky"), "manual__s")
    submit = SubmitTrainingJobOperator(
        task_id="submit", request=job("sneaky", env={"NCCL_NET": "Socket"}), decision=decision
    )
    with pytest.raises(AirflowFailException, match="NCCL_NET is platform-owned"):
        submit.execute(context)
    assert jobsets() == [] and Ledger().launches() == []


@pytest.mark.parametrize(
    "extra,says",
    [
        ({"env": {"NCCL_NET": "Socket"}}, "NCCL_NET is platform-owned"),
        ({"env": {"NCCL_IB_TC": "1"}}, "NCCL_IB_TC is platform-owned"),  # the gIB pool's tuning
        ({"priority_class": "training-high"}, "allows: training-high, training-low"),
    ],
    ids=["pinned-net", "pool-tuning", "priority-class-allowed"],
)
def test_what_the_form_cannot_see_is_refused_before_the_gate_decides(fleet, extra, says):
    """Platform-owned env names (which depend on the pool) and a priority class the namespace
    does not allow pass the form; the gate task refuses them before deciding: no decision in
    the ledger, nothing submitted, the task failed for good."""
    from airflow.sdk.exceptions import AirflowFailException

    from gpufleet.airflow.operators.launch import LaunchGateOperator

    validate("a3u-sim", "h200-a")
    request = job("sneaky", **extra)
    if "priority_class" in extra:  # allowed in ml-team: refused in ml-demo, naming ml-team's
        request = {**request, "namespace": "ml-demo"}
        says = "namespace 'ml-demo' of cluster 'a3u-sim' allows no priority class"
    dr = run_dag(DAG, request)
    states = task_states(dr)
    assert states["gate"] == "failed" and states["submit"] == "upstream_failed"
    assert Ledger().gate_decisions() == [] and Ledger().launches() == []
    assert jobsets() == []
    with pytest.raises(AirflowFailException, match=says):
        LaunchGateOperator(task_id="gate", request=request).execute({"run_id": "manual__x"})
    assert Ledger().gate_decisions() == []


def test_an_allowed_priority_class_launches_with_it(fleet):
    validate("a3u-sim", "h200-a")
    decision, submit, context = _gate_and_submit(
        job("prio", priority_class="training-high"), "manual__prio"
    )
    assert decision["launch"] is True
    submit.execute(context)
    (launch,) = Ledger().launches()
    assert launch["job"] == "prio"


# --- submit converges: the operators as a task retry runs them (same run, same inputs) -------


def _gate_and_submit(request: dict, run_id: str):
    from gpufleet.airflow.operators.launch import LaunchGateOperator, SubmitTrainingJobOperator

    context = {"run_id": run_id}
    decision = LaunchGateOperator(task_id="gate", request=request).execute(context)
    submit = SubmitTrainingJobOperator(task_id="submit", request=request, decision=decision)
    return decision, submit, context


def test_a_retried_submit_finds_its_jobset_and_records_one_launch(fleet):
    validate("a3u-sim", "h200-a")
    validate("a3u-sim", "h200-b")
    request = {**job("retried"), "pools": ["h200-a", "h200-b"]}
    decision, submit, context = _gate_and_submit(request, "manual__retried")
    first = submit.execute(context)
    assert first["pool"] == "h200-a"  # the first target pool with room
    # before the retry, h200-a fills up: choosing again would now pick h200-b
    backend = cluster_backend(load_catalog().cluster("a3u-sim"))
    for node in backend.list_nodes("h200-a"):
        if node.idle:
            backend.set_unschedulable(node.name, True)
    second = submit.execute(context)  # the retry
    assert second == first
    assert jobsets() == ["retried"]
    on = {n.pool for n in backend.list_nodes() if n.workloads == ("retried",)}
    assert on == {"h200-a"}
    ledger = Ledger()
    (launch,) = ledger.launches()
    assert (launch["id"], launch["pool"], launch["state"]) == (
        first["launch_id"],
        "h200-a",
        "submitted",
    )
    (recorded,) = ledger.gate_decisions()
    assert recorded["launch"] is True
    assert launch["gate_decision_id"] == recorded["id"] == decision["decision_id"]


def test_a_job_name_another_run_launched_is_refused_not_adopted(fleet):
    from airflow.sdk.exceptions import AirflowFailException

    validate("a3u-sim", "h200-a")
    _, submit, context = _gate_and_submit(job("shared"), "manual__first")
    submit.execute(context)
    _, submit, context = _gate_and_submit(job("shared"), "manual__second")
    with pytest.raises(AirflowFailException, match="already exists and another launch created it"):
        submit.execute(context)
    second, first = Ledger().launches()
    assert (first["run_id"], first["state"]) == ("manual__first", "submitted")
    assert (second["run_id"], second["state"]) == ("manual__second", "refused")
    assert "another launch created it" in second["reasons"][0]
    assert jobsets() == ["shared"]
    node_jobs = {
        n.workloads for n in cluster_backend(load_catalog().cluster("a3u-sim")).list_nodes()
    }
    assert node_jobs == {(), ("shared",)}  # the first run's job, untouched


def test_submit_needs_this_runs_decision_to_launch(fleet):
    from airflow.sdk.exceptions import AirflowFailException

    from gpufleet.airflow.operators.launch import SubmitTrainingJobOperator

    validate("a3u-sim", "h200-a")
    decision, _, _ = _gate_and_submit(job("gated"), "manual__gated")
    for run_id, given in (
        ("manual__gated", {}),  # no decision at all
        ("manual__other", decision),  # another run's decision
    ):
        submit = SubmitTrainingJobOperator(task_id="submit", request=job("gated"), decision=given)
        with pytest.raises(AirflowFailException, match="no gate decision to launch"):
            submit.execute({"run_id": run_id})
    assert jobsets() == [] and Ledger().launches() == []
