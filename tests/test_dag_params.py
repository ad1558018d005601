"""A bad DAG conf is refused by Airflow's own Param validation through ``dag.test()``: the
ParamValidationError names the field, no DAG run is created, no task runs, and the ledger and
the simulated fleet are untouched. Every case of the params corpus (tests/data/bad_inputs/params,
also checked against the serialized DAG in tests/test_bad_inputs.py) goes through it."""

from __future__ import annotations

import copy
import json

import pytest

from tests.support.fleet import get_dag
from tests.test_bad_inputs import BASE_CONFS, LAUNCH_CONF, PARAM_CASES, _snapshot


@pytest.fixture(scope="module")
def parsed(airflow_db):
    """Each DAG parsed once: a refused conf never reaches the DAG object (nothing to leak)."""
    return {
        d: get_dag(d)
        for d in (
            "gated_training_launch",
            "nightly_fabric_validation",
            "reservation_transition",
            "region_onboarding",
            "sim_fault_drill",
        )
    }


def _runs(dag_id: str) -> tuple[int, int]:
    from airflow.models import DagRun, TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        runs = session.query(DagRun).filter(DagRun.dag_id == dag_id).count()
        tis = session.query(TaskInstance).filter(TaskInstance.dag_id == dag_id).count()
    return runs, tis


@pytest.mark.parametrize("case", PARAM_CASES, ids=lambda p: p.stem)
def test_dag_test_refuses_a_bad_conf_naming_the_field_and_runs_nothing(case, parsed, fleet_state):
    from airflow.exceptions import ParamValidationError

    from gpufleet.cli import main

    assert main(["sim", "show"]) == 0  # the sim fleet exists: "untouched" compares a database
    spec = json.loads(case.read_text())
    base = copy.deepcopy(BASE_CONFS.get(spec["dag"], {}))
    before = _runs(spec["dag"]), _snapshot(fleet_state)
    with pytest.raises(ParamValidationError) as err:
        parsed[spec["dag"]].test(run_conf={**base, **spec["conf"]})
    assert f"param {spec['field']}" in str(err.value), str(err.value)
    assert (_runs(spec["dag"]), _snapshot(fleet_state)) == before


def test_the_untouched_confs_are_accepted_by_the_same_validation(parsed):
    """The refusals above are about their field: the base confs themselves validate."""
    for dag_id, conf in (("gated_training_launch", LAUNCH_CONF), ("nightly_fabric_validation", {})):
        params = copy.deepcopy(parsed[dag_id].params)
        params.update(copy.deepcopy(conf))
        assert params.validate()["nodes" if conf else "mode"] is not None
