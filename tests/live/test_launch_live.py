"""gated_training_launch on a live Airflow (api-server, scheduler, dag-processor, triggerer),
triggered the way CI does: ``gpufleet trigger gated_training_launch --conf ... --wait``."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from airflow_live import PLUGINS_DIR, LiveAirflow

pytestmark = [pytest.mark.slow, pytest.mark.live]

REPO_DAGS = PLUGINS_DIR.parent / "dags"
DAG = "gated_training_launch"


@pytest.fixture(scope="module")
def fleet_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("live-fleet")


@pytest.fixture(scope="module")
def airflow(live_airflow, fleet_dir) -> LiveAirflow:
    return live_airflow(
        REPO_DAGS, extra_env={"GPUFLEET_STATE_DIR": str(fleet_dir), "GPUFLEET_SIM_SPEED": "0.2"}
    )


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
def validated(fleet_dir):
    """A real validation of a3u-sim/h200-a in the live Airflow's sim fleet and ledger."""
    from tests.support.fleet import validate

    with state_dir(fleet_dir):
        assert validate("a3u-sim", "h200-a")["passed"]


def conf(**overrides) -> str:
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


def trigger(airflow: LiveAirflow, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpufleet", "trigger", DAG, *args],
        env=airflow.cli_env(**env),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=PLUGINS_DIR.parent,
        check=False,
    )


def test_ci_launch_succeeds_and_confirms_the_transport(airflow, validated, fleet_dir):
    result = trigger(airflow, "--conf", conf(), "--wait", "--poll", "1", "--unpause")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "state: success" in result.stdout
    from gpufleet.store import Ledger

    with state_dir(fleet_dir):
        launch = Ledger().launches()[0]
    assert (launch["job"], launch["state"], launch["confirmed_transport"]) == (
        "ci-finetune",
        "confirmed",
        "gib",
    )


def test_bad_conf_gets_the_api_refusal_naming_the_field(airflow):
    result = trigger(airflow, "--conf", conf(nodes=99), "--unpause")
    assert result.returncode == 2
    assert "nodes" in result.stderr and "99" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    bad_name = trigger(airflow, "--conf", conf(job_name="Not_A_DNS_Name"))
    assert bad_name.returncode == 2 and "job_name" in bad_name.stderr


def test_wrong_password_is_a_clear_401(airflow):
    result = trigger(airflow, "--conf", conf(), GPUFLEET_AIRFLOW_PASSWORD="wrong")
    assert result.returncode == 2
    assert "authentication failed" in result.stderr
