"""``gpufleet trigger`` against a real Airflow 3 (api-server, scheduler, dag-processor, triggerer).

Every case runs the CLI as CI would (``python -m gpufleet trigger ...`` in a subprocess) against
the session's one live Airflow (``tests/live/conftest.py``: the repo's DAGs and
``tests/live/dags/ci_probe.py``, on a simulated fleet of its own). The last cases launch
``gated_training_launch`` the way CI does: ``gpufleet trigger gated_training_launch --conf ...
--wait``.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from airflow_live import PLUGINS_DIR, VIEWER, LiveAirflow

pytestmark = [pytest.mark.slow, pytest.mark.live]

DAG = "ci_probe"


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


def _param_cases() -> list[Path]:
    from tests.test_bad_inputs import PARAM_CASES

    return PARAM_CASES


@pytest.mark.parametrize("case", _param_cases(), ids=lambda p: p.stem)
def test_a_bad_conf_for_a_gpufleet_dag_is_refused_naming_the_param_and_no_run_exists(
    airflow: LiveAirflow, case: Path, capsys, monkeypatch
) -> None:
    """The params corpus through the REST API: Airflow's Param validation refuses the conf
    (exit 2, one line naming the field) and the run was never created. A non-finite number is
    refused by the CLI before it is sent (JSON has no NaN), naming the field the same way.
    The CLI runs in this process (``gpufleet.cli.main``, the code ``python -m gpufleet``
    runs): the REST calls are the real ones, without a Python start per case."""
    from gpufleet.cli import main
    from tests.test_bad_inputs import BASE_CONFS

    spec = json.loads(case.read_text())
    base = dict(BASE_CONFS.get(spec["dag"], {}))  # a conf the DAG accepts, but for the field
    run_id = f"bad-conf-{case.stem}"
    conf = json.dumps({**base, **spec["conf"]})
    for key, value in airflow.cli_env().items():
        if key.startswith("GPUFLEET_AIRFLOW_"):
            monkeypatch.setenv(key, value)
    code = main(["trigger", spec["dag"], "--conf", conf, "--run-id", run_id])
    out, err = capsys.readouterr()
    assert code == 2, (code, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert f"conf.{spec['field']}:" in lines[0], lines[0]
    assert "Traceback" not in out + err and out == ""
    run = airflow.request("GET", f"/api/v2/dags/{spec['dag']}/dagRuns/{_quoted(run_id)}")
    assert run.status_code == 404, run.text


def _quoted(run_id: str) -> str:
    from urllib.parse import quote

    return quote(run_id, safe="")


@contextlib.contextmanager
def state_dir(path: Path):
    """Point this process at the live Airflow's sim fleet and ledger for a moment."""
    before = os.environ.get("GPUFLEET_STATE_DIR")
    os.environ["GPUFLEET_STATE_DIR"] = str(path)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("GPUFLEET_STATE_DIR")
        else:
            os.environ["GPUFLEET_STATE_DIR"] = before


@pytest.fixture(scope="module")
def validated(live_fleet_dir):
    """A real validation of a3u-sim/h200-a in the live Airflow's sim fleet and ledger."""
    from tests.support.fleet import validate

    with state_dir(live_fleet_dir):
        assert validate("a3u-sim", "h200-a")["passed"]


LAUNCH = "gated_training_launch"


def launch_conf(**overrides) -> str:
    body = {
        "cluster": "a3u-sim",
        "pools": ["h200-a"],
        "nodes": 2,
        "gpus_per_node": 8,
        "job_name": "ci-finetune",
        "namespace": "ml-ci",
        "image": "example/train:1",
        "command": ["torchrun", "train.py"],
    }
    body.update(overrides)
    return json.dumps(body)


def test_ci_launch_succeeds_and_confirms_the_transport(airflow, validated, live_fleet_dir):
    result = gpufleet(
        airflow,
        LAUNCH,
        "--conf",
        launch_conf(),
        "--wait",
        "--poll",
        "1",
        "--unpause",
        timeout=300,
    )
    assert result.returncode == 0, explain(result)
    assert "state: success" in result.stdout
    from gpufleet.store import Ledger

    with state_dir(live_fleet_dir):
        launch = Ledger().launches()[0]
    assert (launch["job"], launch["state"], launch["confirmed_transport"]) == (
        "ci-finetune",
        "confirmed",
        "gib",
    )


def test_a_bad_launch_conf_gets_the_api_refusal_naming_the_field(airflow):
    result = gpufleet(airflow, LAUNCH, "--conf", launch_conf(nodes=99), "--unpause")
    assert result.returncode == 2
    assert "nodes" in result.stderr and "99" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    bad_name = gpufleet(airflow, LAUNCH, "--conf", launch_conf(job_name="Not_A_DNS_Name"))
    assert bad_name.returncode == 2 and "job_name" in bad_name.stderr
