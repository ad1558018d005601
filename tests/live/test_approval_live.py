"""CI approves a waiting retire through Airflow 3.3's REST API (issue 34).

A real Airflow (``tests/live/conftest.py``'s harness: api-server, scheduler, dag-processor,
triggerer, workers) runs ``reservation_transition`` on a simulated fleet of its own (this
module's ``live_fleet_dir``: the moves of ``test_trigger_live.py`` do not reach it, nor these
its). The run reaches ``approve_retire``, which waits in ``awaiting_input``; ``gpufleet approve``
(a subprocess, as CI runs it) answers ``PATCH .../hitlDetails``; the retire proceeds, and the
ledger names the API user as the approver.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.live.airflow_live import PLUGINS_DIR, LiveAirflow
from tests.live.test_trigger_live import (
    _finished,
    _quoted,
    _task_instances,
    _trigger,
    _until,
    explain,
    field,
    live_fleet,
)

pytestmark = [pytest.mark.slow, pytest.mark.live]

DAG = "reservation_transition"
CLUSTER, OLD, NEW = "a3u-sim", "h200-b", "h200-c"


@pytest.fixture(scope="module")
def live_fleet_dir(tmp_path_factory):
    """This module's own simulated fleet and ledger."""
    return tmp_path_factory.mktemp("live-approval-fleet")


def approve(airflow: LiveAirflow, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpufleet", "approve", *args],
        env=airflow.cli_env(),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=PLUGINS_DIR.parent,
        check=False,
    )


def test_ci_approves_the_waiting_retire_through_the_rest_api(airflow, live_fleet_dir):
    run_id = "ci-retire-1"
    conf = {"cluster": CLUSTER, "old_pool": OLD, "new_pool": NEW, "soak_minutes": 0.01}
    _trigger(airflow, DAG, run_id, conf)

    def waiting():
        states = {t["task_id"]: t["state"] for t in _task_instances(airflow, DAG, run_id)}
        assert states.get("watcher") != "failed" and "failed" not in states.values(), states
        return states.get("approve_retire") == "awaiting_input"

    _until("approve_retire waits for input", waiting, airflow, timeout=600)
    # nothing retired while it waits
    from gpufleet.store import Ledger

    with live_fleet(airflow, live_fleet_dir):
        (request,) = Ledger().approvals(kind="retire_pool")
        assert request["state"] == "pending" and request["run_id"] == run_id
        assert (Ledger().pool_state(CLUSTER, OLD) or {}).get("state") != "retired"

    result = approve(airflow, DAG, run_id, "approve_retire", "--wait", "60")
    assert result.returncode == 0, explain(result)
    assert field(result.stdout, "answer") == "Approve"
    assert field(result.stdout, "by") == airflow.username
    assert _finished(airflow, DAG, run_id, timeout=600) == "success"

    with live_fleet(airflow, live_fleet_dir):
        (request,) = Ledger().approvals(kind="retire_pool")
        assert (request["state"], request["answer"], request["answered_by"]) == (
            "done",
            "Approve",
            airflow.username,
        )
        assert Ledger().pool_state(CLUSTER, OLD)["state"] == "retired"

    # an answer is given once: a second one is refused (409), naming why
    again = approve(airflow, DAG, run_id, "approve_retire", "--reject")
    assert again.returncode == 2 and "answered already" in again.stderr, explain(again)
    hitl = airflow.request(
        "GET",
        f"/api/v2/dags/{DAG}/dagRuns/{_quoted(run_id)}/taskInstances/approve_retire/-1/hitlDetails",
    ).json()
    assert hitl["chosen_options"] == ["Approve"]
