"""``gpufleet trigger`` against a real Airflow 3 (api-server, scheduler, dag-processor, triggerer).

Every case runs the CLI as CI would (``python -m gpufleet trigger ...`` in a subprocess) against
one Airflow for the module, serving ``tests/live/dags/ci_probe.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from airflow_live import PLUGINS_DIR, VIEWER, LiveAirflow

pytestmark = [pytest.mark.slow, pytest.mark.live]

LIVE_DAGS = Path(__file__).resolve().parent / "dags"
REPO_DAGS = PLUGINS_DIR.parent / "dags"
DAG = "ci_probe"


@pytest.fixture(scope="module")
def airflow(live_airflow) -> LiveAirflow:
    return live_airflow(LIVE_DAGS)


def gpufleet(
    airflow: LiveAirflow, *args: str, timeout: float = 120, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpufleet", "trigger", *args],
        env=airflow.cli_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=PLUGINS_DIR.parent,
        check=False,
    )


def field(stdout: str, key: str) -> str:
    """The value of a ``key: value`` line the CLI printed."""
    for line in stdout.splitlines():
        if line.startswith(f"{key}: "):
            return line.split(": ", 1)[1]
    raise AssertionError(f"no {key!r} line in:\n{stdout}")


def explain(result: subprocess.CompletedProcess[str]) -> str:
    return f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"


def test_success_with_wait(airflow: LiveAirflow) -> None:
    result = gpufleet(airflow, DAG, "--conf", '{"nodes": 3}', "--wait", "--poll", "1")
    assert result.returncode == 0, explain(result)
    run_id = field(result.stdout, "run_id")
    assert field(result.stdout, "state") == "success"
    assert field(result.stdout, "url") == f"{airflow.url}/dags/{DAG}/runs/" + _quoted(run_id)
    assert "running -> success" in result.stderr  # progress goes to stderr
    # the conf reached Airflow as given, and the run really succeeded there
    run = airflow.request("GET", f"/api/v2/dags/{DAG}/dagRuns/{_quoted(run_id)}").json()
    assert run["state"] == "success"
    assert run["conf"] == {"nodes": 3}


def test_failed_run_exits_1_naming_the_task(airflow: LiveAirflow, tmp_path: Path) -> None:
    conf = tmp_path / "conf.json"
    conf.write_text(json.dumps({"should_fail": True}))
    result = gpufleet(airflow, DAG, "--conf", f"@{conf}", "--wait", "--poll", "1")
    assert result.returncode == 1, explain(result)
    assert field(result.stdout, "state") == "failed"
    failed = field(result.stdout, "failed_tasks")
    assert failed.split(", ")[0] == "probe"
    assert "report (upstream_failed)" in failed
    assert "failed tasks: probe" in result.stderr


def test_param_violation_names_the_param(airflow: LiveAirflow) -> None:
    result = gpufleet(airflow, DAG, "--conf", '{"nodes": 99}')
    assert result.returncode == 2, explain(result)
    message = result.stderr.strip()
    assert len(message.splitlines()) == 1
    assert "conf.nodes: 99 is greater than the maximum of 4" in message
    assert "(400)" in message
    assert result.stdout == ""


def test_wrong_type_names_the_param(airflow: LiveAirflow) -> None:
    result = gpufleet(airflow, DAG, "--conf", '{"should_fail": "yes"}')
    assert result.returncode == 2, explain(result)
    assert "conf.should_fail: 'yes' is not of type 'boolean'" in result.stderr


def test_wrong_password(airflow: LiveAirflow) -> None:
    result = gpufleet(airflow, DAG, GPUFLEET_AIRFLOW_PASSWORD="not-the-password")
    assert result.returncode == 2, explain(result)
    assert f"authentication failed for user 'ci' at {airflow.url}" in result.stderr
    assert "GPUFLEET_AIRFLOW_PASSWORD" in result.stderr


def test_viewer_may_not_trigger(airflow: LiveAirflow) -> None:
    result = gpufleet(
        airflow,
        DAG,
        "--user",
        VIEWER,
        "--password",
        airflow.viewer_password,
    )
    assert result.returncode == 2, explain(result)
    assert f"user '{VIEWER}' may not POST /api/v2/dags/{DAG}/dagRuns" in result.stderr


def test_unknown_dag(airflow: LiveAirflow) -> None:
    result = gpufleet(airflow, "no_such_dag", "--conf", "{}")
    assert result.returncode == 2, explain(result)
    assert "DAG 'no_such_dag' not found" in result.stderr
    assert "is it parsed? is the name right?" in result.stderr


def test_invalid_conf_refused_before_any_http_call(airflow: LiveAirflow) -> None:
    # port 9 (discard) has no Airflow: an HTTP call would fail with "cannot reach"
    for conf, expected in (
        ("{nodes: 2}", "--conf is not valid JSON"),
        ("[1, 2]", "--conf must be a JSON object"),
        ("@/nonexistent/conf.json", "cannot read --conf file"),
    ):
        result = gpufleet(airflow, DAG, "--conf", conf, "--url", "http://127.0.0.1:9")
        assert result.returncode == 2, explain(result)
        assert expected in result.stderr
        assert "cannot reach" not in result.stderr


def test_paused_dag_is_refused_unless_unpause(airflow: LiveAirflow) -> None:
    airflow.request("PATCH", f"/api/v2/dags/{DAG}", json={"is_paused": True}).raise_for_status()
    try:
        refused = gpufleet(airflow, DAG)
        assert refused.returncode == 2, explain(refused)
        assert f"DAG '{DAG}' is paused" in refused.stderr
        assert "--unpause" in refused.stderr
        result = gpufleet(airflow, DAG, "--unpause", "--wait", "--poll", "1")
        assert result.returncode == 0, explain(result)
        assert "unpaused DAG ci_probe" in result.stderr
        assert airflow.request("GET", f"/api/v2/dags/{DAG}").json()["is_paused"] is False
    finally:
        airflow.unpause(DAG)


def test_duplicate_run_id(airflow: LiveAirflow) -> None:
    first = gpufleet(airflow, DAG, "--run-id", "ci-duplicate-check")
    assert first.returncode == 0, explain(first)
    assert field(first.stdout, "run_id") == "ci-duplicate-check"
    second = gpufleet(airflow, DAG, "--run-id", "ci-duplicate-check")
    assert second.returncode == 2, explain(second)
    assert "already has a run 'ci-duplicate-check'" in second.stderr


def test_wait_timeout_is_an_error(airflow: LiveAirflow) -> None:
    result = gpufleet(airflow, DAG, "--wait", "--timeout", "0.2", "--poll", "0.1")
    assert result.returncode == 2, explain(result)
    assert "after 0.2s" in result.stderr
    assert "--timeout" in result.stderr


@pytest.fixture(scope="module")
def fleet_airflow(live_airflow, tmp_path_factory) -> LiveAirflow:
    """An Airflow serving the project's own DAGs, on a throwaway sim fleet and ledger."""
    state = tmp_path_factory.mktemp("trigger-fleet")
    return live_airflow(REPO_DAGS, extra_env={"GPUFLEET_STATE_DIR": str(state)})


def _param_cases() -> list[Path]:
    from tests.test_bad_inputs import PARAM_CASES

    return PARAM_CASES


@pytest.mark.parametrize("case", _param_cases(), ids=lambda p: p.stem)
def test_a_bad_conf_for_a_gpufleet_dag_is_refused_naming_the_param_and_no_run_exists(
    fleet_airflow: LiveAirflow, case: Path
) -> None:
    """The params corpus through the REST API: Airflow's Param validation refuses the conf
    (exit 2, one line naming the field) and the run was never created. A non-finite number is
    refused by the CLI before it is sent (JSON has no NaN), naming the field the same way."""
    from tests.test_bad_inputs import BASE_CONFS

    spec = json.loads(case.read_text())
    base = dict(BASE_CONFS.get(spec["dag"], {}))  # a conf the DAG accepts, but for the field
    run_id = f"bad-conf-{case.stem}"
    conf = json.dumps({**base, **spec["conf"]})
    result = gpufleet(fleet_airflow, spec["dag"], "--conf", conf, "--run-id", run_id)
    assert result.returncode == 2, explain(result)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, explain(result)
    assert f"conf.{spec['field']}:" in lines[0], lines[0]
    assert "Traceback" not in result.stdout + result.stderr and result.stdout == ""
    run = fleet_airflow.request("GET", f"/api/v2/dags/{spec['dag']}/dagRuns/{_quoted(run_id)}")
    assert run.status_code == 404, run.text


def _quoted(run_id: str) -> str:
    from urllib.parse import quote

    return quote(run_id, safe="")
