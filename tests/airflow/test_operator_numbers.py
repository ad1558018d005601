"""Operators that convert their own numeric arguments refuse NaN and Infinity, naming the
field, before anything is done or recorded: a Param default overridden in code (or a templated
value) can carry them past the Params' own checks, and NaN passes every bound."""

from __future__ import annotations

import pytest
from airflow.sdk.exceptions import AirflowFailException
from airflow.sdk.execution_time.context import OutletEventAccessors

from gpufleet.airflow.operators import FabricValidationOperator
from gpufleet.airflow.operators.onboarding import OnboardingStepOperator
from gpufleet.airflow.operators.remediation import NodeRemediationOperator
from gpufleet.store import Ledger

CLUSTER, POOL, REGION = "a3u-sim", "h200-a", "sim-europe-west4"
BAD = [float("nan"), float("inf"), "nan", "-Infinity"]


class _Dag:
    dag_id = "some_dag"


def context(run_id: str = "r1") -> dict:
    return {"run_id": run_id, "outlet_events": OutletEventAccessors(), "dag": _Dag()}


@pytest.mark.parametrize("field", ["tolerance", "max_quarantine_share", "max_repairs"])
@pytest.mark.parametrize("bad", BAD, ids=repr)
def test_fabric_validation_refuses_a_non_finite_number(airflow_db, fleet_state, field, bad):
    op = FabricValidationOperator(
        task_id="validate_fabric", cluster=CLUSTER, node_pool=POOL, **{field: bad}
    )
    with pytest.raises(AirflowFailException, match=f"{field} must be a finite number"):
        op.execute(context())
    assert Ledger().validations_for_run("r1") == []  # no verdict, not even an error one


@pytest.mark.parametrize("bad", BAD, ids=repr)
def test_remediation_refuses_a_non_finite_max_repairs(airflow_db, fleet_state, bad):
    op = NodeRemediationOperator(
        task_id="remediate", cluster=CLUSTER, node_pool=POOL, max_repairs=bad
    )
    with pytest.raises(AirflowFailException, match="max_repairs must be a finite number"):
        op.execute(context())


@pytest.mark.parametrize("bad", BAD, ids=repr)
def test_an_onboarding_step_refuses_a_non_finite_timeout(airflow_db, fleet_state, bad):
    op = OnboardingStepOperator(
        task_id="network", step="network", region=REGION, timeout_minutes=bad
    )
    with pytest.raises(AirflowFailException, match="timeout_minutes must be a finite number"):
        op.execute(context())
    assert Ledger().onboarding_actions(REGION, "r1") == []  # nothing looked at or made
    assert Ledger().region_lock(REGION) is None  # nor the region locked
